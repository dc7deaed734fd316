// Records on PostgreSQL with real `kestrel` processes and a real server of the tests' own
// (support/postgres.h; skipped where PostgreSQL is not installed): two tuning sessions
// writing into one database at once, a SIGKILLed session resumed, `kestrel records
// migrate` between SQLite and PostgreSQL, `kestrel best` on a URI.
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <tuple>

#include "kestrel/records/records.h"
#include "support/kestrel_processes.h"
#include "support/postgres.h"

using namespace kestrel;
using namespace kestrel::test::e2e;
using namespace std::chrono_literals;

namespace {

// The quick workload of tune_e2e_test.cpp, Kestrel's own kernels only.
std::vector<std::string> tune_args(const std::string& db, int trials, int seed) {
  return {kKestrel,          "tune", "--op",          "gemm", "--shape",       "48x40x32", "--trials",
          std::to_string(trials), "--batch", "4",      "--db",   db,            "--repeat", "2",
          "--min-repeat-ms", "2",    "--final-top",   "2",    "--final-repeat", "3",       "--seed",
          std::to_string(seed), "--vendors", "none"};
}

nlohmann::json parse_json(const std::string& output) {
  auto brace = output.find("\n{");
  if (brace == std::string::npos && output.rfind('{', 0) == 0) brace = 0;
  if (brace == std::string::npos) return nullptr;
  return nlohmann::json::parse(output.substr(brace), nullptr, false);
}

std::vector<records::Record> all_records(const std::string& db) {
  return records::open_records(db, records::OpenMode::existing)->all();
}

std::size_t record_count(const std::string& db) {
  try {
    return records::open_records(db, records::OpenMode::existing)->count();
  } catch (const records::RecordsError&) {
    return 0;  // not created yet
  }
}

// Non-final records, and how many distinct configurations they cover.
std::pair<std::size_t, std::size_t> trial_records(const std::string& db) {
  std::set<std::string> configs;
  std::size_t trials = 0;
  for (const auto& r : all_records(db)) {
    if (r.final_measurement) continue;
    ++trials;
    configs.insert(ops::format_config(r.config));
  }
  return {trials, configs.size()};
}

// An export's lines without their ids, sorted: the records, wherever they are stored.
std::vector<std::string> export_lines(const TempDir& dir, const std::string& db, const std::string& name) {
  std::string output;
  std::string file = dir.file(name + ".jsonl");
  REQUIRE(test::run_command({kKestrel, "records", "export", "--db", db, "--out", file}, output, dir.file(name)) == 0);
  std::istringstream in(test::read_text(file));
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) {
    auto j = nlohmann::json::parse(line);
    j.erase("id");
    lines.push_back(j.dump());
  }
  std::sort(lines.begin(), lines.end());
  return lines;
}

}  // namespace

TEST_CASE("two kestrel tune processes into one PostgreSQL database keep every record of each session",
          "[e2e][tune][postgres]") {
  const std::string db = test::postgres().create_database();
  TempDir dir;
  auto args_a = tune_args(db, 8, 7), args_b = tune_args(db, 8, 8);
  args_a.push_back("--json");
  args_b.push_back("--json");
  // Both open the fresh database (and create its tables) at the same moment.
  Process a(args_a, dir.file("a.out")), b(args_b, dir.file("b.out"));
  auto code_a = a.wait_exit(100s);
  auto code_b = b.wait_exit(100s);
  INFO(a.log());
  INFO(b.log());
  REQUIRE(code_a == 0);
  REQUIRE(code_b == 0);
  auto result_a = parse_json(a.log()), result_b = parse_json(b.log());
  REQUIRE(result_a.is_object());
  REQUIRE(result_b.is_object());
  const std::string session_a = result_a["session"], session_b = result_b["session"];
  CHECK(session_a != session_b);
  CHECK(result_a["this_session"].get<std::size_t>() > 0);  // both measured
  CHECK(result_b["this_session"].get<std::size_t>() > 0);

  // Per session: its trials and its final round, nothing lost, nothing twice.
  std::map<std::string, std::size_t> trials, finals;
  std::set<std::int64_t> ids;
  std::set<std::tuple<std::string, std::string, bool, std::int64_t>> rows;
  auto records = all_records(db);
  for (const auto& r : records) {
    (r.final_measurement ? finals : trials)[r.session] += 1;
    ids.insert(r.id);
    rows.insert({r.session, ops::format_config(r.config), r.final_measurement, r.time_unix_ms});
  }
  CHECK(trials[session_a] == result_a["this_session"].get<std::size_t>());
  CHECK(trials[session_b] == result_b["this_session"].get<std::size_t>());
  CHECK(finals[session_a] == result_a["final"].size());
  CHECK(finals[session_b] == result_b["final"].size());
  CHECK(records.size() == trials[session_a] + trials[session_b] + finals[session_a] + finals[session_b]);
  CHECK(ids.size() == records.size());
  CHECK(rows.size() == records.size());

  // A third run resumes every configuration both measured and measures 2 more.
  auto [kept, distinct] = trial_records(db);
  CHECK(kept >= distinct);
  std::string output;
  auto argv = tune_args(db, static_cast<int>(distinct) + 2, 9);
  argv.push_back("--json");
  REQUIRE(test::run_command(argv, output, dir.file("c.out")) == 0);
  INFO(output);
  auto result = parse_json(output);
  REQUIRE(result.is_object());
  CHECK(result["resumed"].get<std::size_t>() == distinct);
  CHECK(result["this_session"] == 2);
}

TEST_CASE("a SIGKILLed tuning run on PostgreSQL loses no committed record and the rerun resumes them all",
          "[e2e][tune][postgres]") {
  const std::string db = test::postgres().create_database();
  TempDir dir;
  const int trials = 24;
  {
    Process run(tune_args(db, trials, 7), dir.file("run1.log"));
    REQUIRE(test::wait_for([&] { return record_count(db) >= 8 || !run.running(); }, 100s));
    REQUIRE(run.running());
    run.signal(SIGKILL);
    REQUIRE(run.wait_exit(5s));
  }
  const std::size_t committed = record_count(db);
  INFO("records committed before the kill: " << committed);
  CHECK(committed >= 8);

  std::string output;
  auto argv = tune_args(db, trials, 7);
  argv.push_back("--json");
  REQUIRE(test::run_command(argv, output, dir.file("run2.out")) == 0);
  INFO(output);
  auto result = parse_json(output);
  REQUIRE(result.is_object());
  CHECK(result["resumed"].get<std::size_t>() == committed);  // everything committed was found
  CHECK(result["this_session"].get<std::size_t>() == trials - committed);
  auto [records, distinct] = trial_records(db);
  CHECK(records == static_cast<std::size_t>(trials));  // nothing measured twice
  CHECK(distinct == static_cast<std::size_t>(trials));
}

TEST_CASE("kestrel records migrate copies SQLite -> PostgreSQL -> SQLite and a rerun copies nothing",
          "[e2e][records][postgres]") {
  const std::string pg = test::postgres().create_database();
  TempDir dir;
  const std::string source = dir.file("source.db"), back = dir.file("back.db");
  {
    auto db = records::open_records(source);
    for (int i = 0; i < 40; ++i) {
      records::Record r;
      r.op = i % 4 == 0 ? "conv2d" : "gemm";
      r.workload = i % 2 == 0 ? ops::Params{{"K", 32}, {"M", 48}, {"N", 40}} : ops::Params{{"K", 8}, {"M", 8}, {"N", 8}};
      r.target = *kestrel::ops::TargetId::parse("x86_64-linux-gnu (znver4)");
      r.device_class = {"local/0", "AMD EPYC", "x86_64-linux-gnu|AMD EPYC|16"};
      r.device = "cpu0";
      r.config = {{"mc", 16 * (i + 1)}};
      const bool ok = i % 5 != 0;
      r.status = ok ? kernel::Status::ok : kernel::Status::host_compile_error;
      r.message = ok ? "" : "error: \xc2\xb5 \"quoted\"\nsecond line";
      r.round_seconds = ok ? std::vector<double>{1e-3 / (i + 1), 1.1e-3 / (i + 1)} : std::vector<double>{};
      r.cost = ok ? 1e-3 / (i + 1) : std::numeric_limits<double>::infinity();
      r.gflops = ok ? 0.1 * (i + 1) : std::numeric_limits<double>::quiet_NaN();
      r.compile_ms = 1.0 / 3.0;
      r.tool_version = "test";
      r.time_unix_ms = 1'700'000'000'000 + i;
      r.session = i < 30 ? "s1" : "s2";
      r.final_measurement = i >= 30;
      r.is_default = i == 31 || i == 32;
      db->add(r);
    }
  }
  std::string output;
  REQUIRE(test::run_command({kKestrel, "records", "migrate", "--from", source, "--to", pg}, output, dir.file("m1")) == 0);
  CHECK_THAT(output, Catch::Contains("copied 40 records"));
  REQUIRE(test::run_command({kKestrel, "records", "migrate", "--from", source, "--to", pg}, output, dir.file("m2")) == 0);
  CHECK_THAT(output, Catch::Contains("copied 0 records"));
  REQUIRE(test::run_command({kKestrel, "records", "migrate", "--from", pg, "--to", back}, output, dir.file("m3")) == 0);
  CHECK_THAT(output, Catch::Contains("copied 40 records"));
  REQUIRE(test::run_command({kKestrel, "records", "migrate", "--from", pg, "--to", back}, output, dir.file("m4")) == 0);
  CHECK_THAT(output, Catch::Contains("copied 0 records"));

  const auto original = export_lines(dir, source, "source");
  CHECK(original.size() == 40);
  CHECK(export_lines(dir, pg, "pg") == original);
  CHECK(export_lines(dir, back, "back") == original);

  // kestrel best answers the same from both, for all and for one task.
  std::string from_sqlite, from_pg;
  REQUIRE(test::run_command({kKestrel, "best", "--db", source, "--json"}, from_sqlite, dir.file("b1")) == 0);
  REQUIRE(test::run_command({kKestrel, "best", "--db", pg, "--json"}, from_pg, dir.file("b2")) == 0);
  CHECK(from_pg == from_sqlite);
  REQUIRE(test::run_command({kKestrel, "best", "--db", pg, "--op", "gemm", "--shape", "48x40x32", "--target",
                             "x86_64-linux-gnu (znver4)", "--json"},
                            from_pg, dir.file("b3")) == 0);
  auto one = nlohmann::json::parse(from_pg.substr(from_pg.find('[')), nullptr, false);
  REQUIRE(one.is_array());
  REQUIRE(one.size() == 1);
  CHECK(one[0]["workload"] == "K=32,M=48,N=40");
  REQUIRE(test::run_command({kKestrel, "best", "--db", source, "--op", "gemm", "--shape", "48x40x32", "--target",
                             "x86_64-linux-gnu (znver4)", "--json"},
                            from_sqlite, dir.file("b4")) == 0);
  CHECK(from_pg == from_sqlite);

  // A missing source is an error, and nothing is created.
  const std::string missing = dir.file("missing.db"), nowhere = dir.file("nowhere.db");
  CHECK(test::run_command({kKestrel, "records", "migrate", "--from", missing, "--to", nowhere}, output,
                          dir.file("m5")) == 2);
  CHECK_THAT(output, Catch::Contains("no records database at '" + missing + "'"));
  CHECK(::access(nowhere.c_str(), F_OK) != 0);
  CHECK(::access(missing.c_str(), F_OK) != 0);
}
