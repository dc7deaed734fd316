// `kestrel bench` and `kestrel tune --workloads` as users run them: a real compile of the
// kernel, loaded into the bench process, checked against OpenBLAS/oneDNN (when built in)
// and timed interleaved with them; the correctness gate on a deliberately wrong kernel;
// configurations taken from a database that `kestrel tune --workloads smoke` filled.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "support/kestrel_processes.h"

using namespace kestrel;
using namespace kestrel::test::e2e;
using namespace std::chrono_literals;

namespace {

nlohmann::json parse_json(const std::string& output) {
  auto brace = output.find('{');
  if (brace == std::string::npos) return nullptr;
  return nlohmann::json::parse(output.substr(brace), nullptr, false);
}

// Runs a command with a generous limit (tuning compiles and measures for real).
int run_long(std::vector<std::string> argv, std::string& output, const std::string& log) {
  std::remove(log.c_str());
  Process p(std::move(argv), log);
  auto code = p.wait_exit(180s);
  REQUIRE(code);
  output = p.log();
  return *code;
}

std::vector<std::string> quick(std::vector<std::string> argv) {
  for (const char* a : {"--repeat", "2", "--min-round-ms", "2"}) argv.push_back(a);
  return argv;
}

}  // namespace

TEST_CASE("kestrel bench --list-sets names every set and its workloads", "[e2e][bench]") {
  TempDir dir;
  std::string output;
  REQUIRE(test::run_command({kKestrel, "bench", "--list-sets"}, output, dir.file("list.out")) == 0);
  for (const char* s : {"gemm-square:", "gemm-skinny:", "resnet18-conv:", "smoke:", "fc-16x4096x4096",
                        "layer2.0.downsample", "stride=2,pad=3"}) {
    CHECK_THAT(output, Catch::Contains(s));
  }
}

TEST_CASE("kestrel bench times the default config against the libraries on 1 and 2 threads", "[e2e][bench]") {
  TempDir dir;
  std::string output;
  int code = run_long(quick({kKestrel, "bench", "--op", "gemm", "--shape", "64x48x32", "--threads", "1,2",
                             "--db", dir.file("none.db"), "--json"}),
                      output, dir.file("bench.out"));
  INFO(output);
  // A --db that does not exist is an error, not an empty database created on the fly.
  CHECK(code == 2);
  CHECK_THAT(output, Catch::Contains("no records database at"));

  code = run_long(quick({kKestrel, "bench", "--op", "gemm", "--shape", "64x48x32", "--threads", "1,2", "--json"}),
                  output, dir.file("bench2.out"));
  INFO(output);
  REQUIRE(code == 0);
  auto result = parse_json(output);
  REQUIRE(result.is_object());
  CHECK_THAT(result["command"].get<std::string>(), Catch::Contains("kestrel bench --op gemm --shape 64x48x32"));
  REQUIRE(result["results"].size() == 2);
  for (const auto& row : result["results"]) {
    CHECK(row["workload"] == "K=32,M=64,N=48");
    CHECK(row["kestrel"]["status"] == "ok");
    CHECK(row["kestrel"]["config_source"] == "default");
    CHECK(row["kestrel"]["gflops"].get<double>() > 0);
    CHECK(row["kestrel"]["round_seconds"].size() == 2);
#if KESTREL_TEST_HAVE_OPENBLAS
    CHECK(row["checked_against"] == "openblas");
    CHECK(row["libraries"]["openblas"]["status"] == "ok");
    CHECK(row["libraries"]["openblas"]["ratio"].get<double>() > 0);
#endif
#if KESTREL_TEST_HAVE_ONEDNN
    CHECK(row["libraries"]["onednn"]["status"] == "ok");
    CHECK(row["libraries"]["onednn"]["ratio"].get<double>() > 0);
#endif
  }
  CHECK(result["results"][0]["threads"] == 1);
  CHECK(result["results"][1]["threads"] == 2);
#if !KESTREL_TEST_HAVE_OPENBLAS
  CHECK_THAT(output, Catch::Contains("OpenBLAS not built in (install libopenblas-dev and rebuild)"));
#endif
}

TEST_CASE("kestrel bench refuses to time a wrong kernel", "[e2e][bench]") {
  TempDir dir;
  std::string output;
  int code = run_long(quick({kKestrel, "bench", "--op", "gemm", "--shape", "24x20x16", "--threads", "1",
                             "--kernel-source", KESTREL_E2E_FIXTURE_DIR "/wrong_gemm.c", "--json"}),
                      output, dir.file("wrong.out"));
  INFO(output);
  CHECK(code == 1);
  auto result = parse_json(output);
  REQUIRE(result.is_object());
  REQUIRE(result["results"].size() == 1);
  const auto& row = result["results"][0];
  CHECK_THAT(row["kestrel"]["status"].get<std::string>(), Catch::StartsWith("wrong answer"));
  CHECK_FALSE(row["kestrel"].contains("gflops"));
  CHECK(row["kestrel"]["config_source"] == "file");
#if KESTREL_TEST_HAVE_OPENBLAS
  CHECK(row["libraries"]["openblas"]["status"] == "ok");
  CHECK_FALSE(row["libraries"]["openblas"].contains("ratio"));
#endif

  // The text report says so too.
  code = run_long(quick({kKestrel, "bench", "--op", "gemm", "--shape", "24x20x16", "--threads", "1",
                         "--kernel-source", KESTREL_E2E_FIXTURE_DIR "/wrong_gemm.c"}),
                  output, dir.file("wrong.txt"));
  CHECK(code == 1);
  CHECK_THAT(output, Catch::Contains("WRONG") && Catch::Contains("problem: gemm 24x20x16: kestrel: wrong answer"));
}

TEST_CASE("kestrel tune --workloads fills one database that kestrel bench --workloads uses", "[e2e][bench][tune]") {
  TempDir dir;
  std::string db = dir.file("sets.db");
  std::string output;
  int code = run_long({kKestrel, "tune", "--workloads", "smoke", "--trials", "3", "--batch", "3", "--db", db,
                       "--repeat", "2", "--min-repeat-ms", "2", "--final-top", "1", "--final-repeat", "2", "--json"},
                      output, dir.file("tune.out"));
  INFO(output);
  REQUIRE(code == 0);
  auto tuned = parse_json(output);
  REQUIRE(tuned.is_object());
  REQUIRE(tuned["workloads"].size() == 2);
  CHECK(tuned["workloads"][0]["label"] == "gemm-tiny");
  CHECK(tuned["workloads"][0]["op"] == "gemm");
  CHECK(tuned["workloads"][1]["label"] == "conv-tiny");
  CHECK(tuned["workloads"][1]["op"] == "conv2d");
  for (const auto& w : tuned["workloads"]) CHECK(w["trials"] == 3);

  code = run_long(quick({kKestrel, "bench", "--workloads", "smoke", "--db", db, "--threads", "1"}), output,
                  dir.file("bench.out"));
  INFO(output);
  REQUIRE(code == 0);
  CHECK_THAT(output, Catch::Contains("threads: 1") && Catch::Contains("WORKLOAD") && Catch::Contains("KESTREL"));
  CHECK_THAT(output, Catch::Contains("gemm-tiny: gemm 48x40x32; db config") &&
                         Catch::Contains("conv-tiny: conv2d C=8,H=10,W=10,K=8,R=3,S=3,pad=1; db config"));
  CHECK_THAT(output, Catch::Contains("best of 3 trials"));
#if KESTREL_TEST_HAVE_OPENBLAS && KESTREL_TEST_HAVE_ONEDNN
  CHECK_THAT(output, Catch::Contains("ONEDNN-ANY") && Catch::Contains("geomean Kestrel/openblas"));
#endif

  // Only one workload of the set, by label.
  code = run_long(quick({kKestrel, "bench", "--workloads", "smoke", "--only", "conv-tiny", "--db", db, "--threads",
                         "1", "--json"}),
                  output, dir.file("only.out"));
  REQUIRE(code == 0);
  auto only = parse_json(output);
  REQUIRE(only["results"].size() == 1);
  CHECK(only["results"][0]["label"] == "conv-tiny");
  CHECK(only["results"][0]["kestrel"]["config_source"] == "db");
}

TEST_CASE("kestrel bench --tune-trials tunes a workload with no record before timing it", "[e2e][bench][tune]") {
  TempDir dir;
  std::string db = dir.file("fresh.db");
  std::string output;
  int code = run_long(quick({kKestrel, "bench", "--workloads", "smoke", "--only", "gemm-tiny", "--tune-trials", "2",
                             "--db", db, "--threads", "1", "--json"}),
                      output, dir.file("bench.out"));
  INFO(output);
  REQUIRE(code == 0);
  auto result = parse_json(output);
  REQUIRE(result.is_object());
  REQUIRE(result["results"].size() == 1);
  CHECK(result["results"][0]["kestrel"]["config_source"] == "db");
  CHECK_THAT(result["results"][0]["kestrel"]["config_detail"].get<std::string>(), Catch::StartsWith("best of 2 trials"));
}

TEST_CASE("kestrel bench rejects bad input with a clear message", "[e2e][bench]") {
  TempDir dir;
  std::string output;
  CHECK(test::run_command({kKestrel, "bench", "--workloads", "resnet50"}, output, dir.file("a")) == 2);
  CHECK_THAT(output, Catch::Contains("unknown workload set 'resnet50'"));
  CHECK(test::run_command({kKestrel, "bench", "--shape", "64x64x64", "--threads", "0"}, output, dir.file("b")) == 2);
  CHECK_THAT(output, Catch::Contains("--threads expects a list of thread counts"));
  CHECK(test::run_command({kKestrel, "bench"}, output, dir.file("c")) == 2);
  CHECK_THAT(output, Catch::Contains("--workloads or --shape is required"));
  CHECK(test::run_command({kKestrel, "tune", "--workloads", "smoke", "--shape", "4x4x4"}, output, dir.file("d")) == 2);
  CHECK_THAT(output, Catch::Contains("either --shape or --workloads"));
}
