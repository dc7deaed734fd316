// `kestrel datagen` as a user runs it on the embedded default: a random family tuned with
// the trials asked for and recorded, a rerun that resumes, --list, held-out sets kept
// out, and the usage errors.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <set>

#include "kestrel/host/target.h"
#include "kestrel/records/records.h"
#include "kestrel/records/sqlite_records.h"
#include "support/kestrel_processes.h"

using namespace kestrel;
using namespace kestrel::test::e2e;
using Catch::Matchers::Contains;

namespace {

// Tiny gemms (at most 2 MFLOP) measured briefly: every trial takes well under a second.
std::vector<std::string> datagen_args(const std::string& db, int trials) {
  return {kKestrel, "datagen", "--db", db, "--ops", "gemm", "--random", "2", "--max-gflop", "0.002",
          "--trials-per-workload", std::to_string(trials), "--batch", "4", "--repeat", "2", "--min-repeat-ms", "2",
          "--seed", "5", "--quiet"};
}

// Trial records per workload.
std::map<std::string, std::size_t> trials_by_workload(const std::string& db) {
  std::map<std::string, std::size_t> out;
  for (const auto& r : records::SqliteRecords(db, records::OpenMode::existing).all()) {
    if (!r.final_measurement) ++out[r.op + " " + ops::format_params(r.workload)];
  }
  return out;
}

}  // namespace

TEST_CASE("kestrel datagen tunes every workload of the family and resumes", "[e2e][datagen]") {
  TempDir dir;
  const std::string db = dir.file("data.db");
  std::string out;
  int code = test::run_command(datagen_args(db, 4), out, dir.file("first.out"));
  INFO(out);
  REQUIRE(code == 0);
  CHECK_THAT(out, Contains("2/2 workloads tuned") && Contains("kestrel cost-model train --db " + db));
  auto first = trials_by_workload(db);
  REQUIRE(first.size() == 2);
  for (const auto& [workload, trials] : first) {
    INFO(workload);
    CHECK(workload.rfind("gemm ", 0) == 0);
    CHECK(trials == 4);
  }

  // Again with more trials: the same workloads, two more trials each.
  code = test::run_command(datagen_args(db, 6), out, dir.file("second.out"));
  REQUIRE(code == 0);
  auto second = trials_by_workload(db);
  REQUIRE(second.size() == 2);
  for (const auto& [workload, trials] : second) {
    CHECK(first.contains(workload));
    CHECK(trials == 6);
  }
}

TEST_CASE("kestrel datagen's progress names each workload and shows the whole run's ETA", "[e2e][datagen]") {
  TempDir dir;
  const std::string db = dir.file("data.db");
  std::vector<std::string> argv = datagen_args(db, 4);
  argv.pop_back();  // --quiet
  argv[std::find(argv.begin(), argv.end(), "--batch") - argv.begin() + 1] = "2";
  std::string out;
  REQUIRE(test::run_command(argv, out, dir.file("progress.out")) == 0);
  INFO(out);
  const auto workloads = trials_by_workload(db);
  REQUIRE(workloads.size() == 2);
  // Each line names its workload as the records do ("(1/2 gemm K=..,M=..,N=..) [##..] ..."),
  // never "gemm ?x?x?".
  for (const auto& [workload, trials] : workloads) CHECK_THAT(out, Contains("/2 " + workload + ") ["));
  CHECK_THAT(out, !Contains("?x?"));
  CHECK_THAT(out, Contains(" | overall ETA "));
}

TEST_CASE("kestrel datagen --list shows the family and keeps held-out sets out", "[e2e][datagen]") {
  TempDir dir;
  std::string out;
  int code = test::run_command({kKestrel, "datagen", "--list", "--random", "0", "--sets", "mobilenetv2-dw,gemm-skinny",
                                "--exclude-sets", "gemm-skinny"},
                               out, dir.file("list.out"));
  INFO(out);
  REQUIRE(code == 0);
  CHECK_THAT(out, Contains("depthwise_conv2d") && Contains("C=960,H=7,N=1,R=3,S=3,W=7") && Contains("10 workloads"));
  // In this machine's block (its floats per vector: 8 for AVX2, 16 for AVX-512), which on an
  // AVX2 machine is not the op's fallback (16) that the set's entries carry.
  const auto floats = host::parse_target("native", "").traits.vector_floats;
  const std::string block = ",block=" + std::to_string(std::clamp(floats, 4, 16)) + ",";
  CHECK_THAT(out, Contains(block));
  for (const char* other : {",block=4,", ",block=8,", ",block=16,"}) {
    if (other != block) CHECK_THAT(out, !Contains(other));
  }
  CHECK_THAT(out, !Contains("gemm "));
  CHECK_FALSE(std::filesystem::exists(dir.file("kestrel-data.db")));

  // Random shapes of three ops, reproducible from the seed.
  std::string again;
  auto list = std::vector<std::string>{kKestrel, "datagen", "--list", "--random", "3", "--seed", "9"};
  REQUIRE(test::run_command(list, out, dir.file("a.out")) == 0);
  REQUIRE(test::run_command(list, again, dir.file("b.out")) == 0);
  CHECK(out == again);
  CHECK_THAT(out, Contains("gemm") && Contains("conv2d_nchwc") && Contains("depthwise_conv2d") && Contains("9 workloads"));
}

TEST_CASE("kestrel datagen refuses what it cannot do, with the reason", "[e2e][datagen]") {
  TempDir dir;
  std::string out;
  CHECK(test::run_command({kKestrel, "datagen", "--ops", "softmax"}, out, dir.file("a.out")) == 2);
  CHECK_THAT(out, Contains("op softmax has no random family"));
  CHECK(test::run_command({kKestrel, "datagen", "--random", "0"}, out, dir.file("b.out")) == 2);
  CHECK_THAT(out, Contains("the family is empty"));
  CHECK(test::run_command({kKestrel, "datagen", "--time-budget", "3 days"}, out, dir.file("c.out")) == 2);
  CHECK_THAT(out, Contains("--time-budget '3 days'"));
  CHECK(test::run_command({kKestrel, "datagen", "--sets", "no-such-set"}, out, dir.file("d.out")) == 2);
  CHECK_THAT(out, Contains("no-such-set"));
  CHECK_FALSE(std::filesystem::exists(dir.file("kestrel-data.db")));
}
