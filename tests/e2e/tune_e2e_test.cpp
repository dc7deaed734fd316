// `kestrel tune` as users run it: the embedded default, resuming after SIGKILL and
// Ctrl-C, bad input, and `kestrel best` / `kestrel records` on what it recorded.
#include <algorithm>
#include <map>
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>
#include <set>
#include <thread>
#include <unistd.h>
#include <sqlite3.h>

#include "kestrel/records/records.h"
#include "kestrel/records/sqlite_records.h"
#include "support/kestrel_processes.h"

using namespace kestrel;
using namespace kestrel::test::e2e;
using namespace std::chrono_literals;

namespace {

// A small, quick workload: every trial compiles and runs in well under a second. Kestrel's
// own kernels only (the vendor libraries have a test of their own).
std::vector<std::string> tune_args(const std::string& db, int trials) {
  return {kKestrel,          "tune", "--op",          "gemm", "--shape",       "48x40x32", "--trials",
          std::to_string(trials), "--batch", "4",      "--db",   db,            "--repeat", "2",
          "--min-repeat-ms", "2",    "--final-top",   "2",    "--final-repeat", "3",       "--seed",
          "7",               "--vendors", "none"};
}

nlohmann::json parse_json(const std::string& output) {
  auto brace = output.find('{');
  if (brace == std::string::npos) return nullptr;
  return nlohmann::json::parse(output.substr(brace), nullptr, false);
}

const ops::Params kWorkload{{"K", 32}, {"M", 48}, {"N", 40}};

// Non-final records, and how many distinct configurations they cover.
std::pair<std::size_t, std::size_t> trial_records(const std::string& db) {
  records::SqliteRecords records(db);
  std::set<std::string> configs;
  std::size_t trials = 0;
  for (const auto& r : records.find("gemm", kWorkload, records.best().empty() ? kestrel::ops::TargetId{} : records.best()[0].target)) {
    if (r.final_measurement) continue;
    ++trials;
    configs.insert(ops::format_config(r.config));
  }
  return {trials, configs.size()};
}

std::size_t record_count(const std::string& db) {
  if (::access(db.c_str(), F_OK) != 0) return 0;
  try {
    return records::SqliteRecords(db).count();
  } catch (const records::RecordsError&) {
    return 0;
  }
}

// The records by status (and final round), for a failure's message.
std::string describe_records(const std::string& db) {
  std::map<std::string, std::size_t> by_status;
  std::size_t total = 0;
  try {
    records::SqliteRecords records(db);
    for (const auto& r : records.all()) {
      ++total;
      ++by_status[std::string(kernel::to_string(r.status)) + (r.final_measurement ? " (final)" : "")];
    }
  } catch (const records::RecordsError& e) {
    return e.what();
  }
  std::string text = std::to_string(total) + " records:";
  for (const auto& [status, n] : by_status) text += " " + status + " " + std::to_string(n);
  return text;
}

// A rerun with 4 more trials than the `kept` records resumes all of them and measures 4.
void check_rerun_resumes(const TempDir& dir, const std::string& db, std::size_t kept) {
  std::string output;
  auto argv = tune_args(db, static_cast<int>(kept) + 4);
  argv.push_back("--json");
  const int code = test::run_command(argv, output, dir.file("rerun.out"));
  INFO("the rerun's output:\n" << output);
  REQUIRE(code == 0);
  auto result = parse_json(output);
  REQUIRE(result.is_object());
  // What the database holds, when the count differs: records by status and final flag.
  INFO("records kept: " << kept << "; " << describe_records(db));
  CHECK(result["resumed"].get<std::size_t>() == kept);
  CHECK(result["this_session"] == 4);
}

}  // namespace

TEST_CASE("kestrel tune on the embedded default tunes, records every trial, and shows the best",
          "[e2e][tune]") {
  TempDir dir;
  std::string db = dir.file("t.db");
  auto argv = tune_args(db, 12);
  argv.push_back("--json");
  std::string output;
  REQUIRE(test::run_command(argv, output, dir.file("tune.out")) == 0);
  INFO(output);
  auto result = parse_json(output);
  REQUIRE(result.is_object());
  CHECK(result["trials"] == 12);
  CHECK(result["this_session"] == 12);
  CHECK(result["stop_reason"] == "trials");
  // The two best and the default (unless it is one of them), re-measured side by side.
  std::size_t defaults = 0, finalists = 0;
  for (const auto& f : result["final"]) (f["is_default"].get<bool>() ? defaults : finalists) += 1;
  CHECK(defaults == 1);
  CHECK(finalists >= 1);
  CHECK(finalists <= 2);
  CHECK(result["final"].size() == (finalists == 2 ? 3u : 2u));
  CHECK(result["final"][0]["gflops"].get<double>() > 0);
  CHECK(result["default_gflops"].get<double>() > 0);
  // Never a recommendation slower than the default.
  CHECK(result["final"][0]["gflops"].get<double>() >= result["default_gflops"].get<double>());
  CHECK(record_count(db) == 12 + result["final"].size());

  std::string best;
  REQUIRE(test::run_command({kKestrel, "best", "--db", db}, best, dir.file("best.out")) == 0);
  CHECK_THAT(best, Catch::Contains("K=32,M=48,N=40") && Catch::Contains("x86_64-linux-gnu"));
  // The device class the best was measured on: the pool key and the CPU model.
  REQUIRE(test::run_command({kKestrel, "best", "--db", db, "--json"}, best, dir.file("best.json")) == 0);
  auto best_json = nlohmann::json::parse(best.substr(best.find('[')), nullptr, false);
  REQUIRE(best_json.is_array());
  REQUIRE(best_json.size() == 1);
  CHECK_FALSE(best_json[0]["device_class"]["key"].get<std::string>().empty());
  CHECK_FALSE(best_json[0]["device_class"]["model"].get<std::string>().empty());
  CHECK_THAT(best, Catch::Contains(best_json[0]["device_class"]["fingerprint"].get<std::string>()));

  // Export, import into another database: the same records.
  std::string jsonl = dir.file("records.jsonl");
  REQUIRE(test::run_command({kKestrel, "records", "export", "--db", db, "--out", jsonl}, output, dir.file("e")) == 0);
  REQUIRE(test::run_command({kKestrel, "records", "import", "--db", dir.file("copy.db"), jsonl}, output,
                            dir.file("i")) == 0);
  CHECK_THAT(output, Catch::Contains("imported " + std::to_string(12 + result["final"].size()) + " records"));
  REQUIRE(test::run_command({kKestrel, "records", "import", "--db", dir.file("copy.db"), jsonl}, output,
                            dir.file("i2")) == 0);
  CHECK_THAT(output, Catch::Contains("imported 0 records"));
}

TEST_CASE("read-only commands never create a records database", "[e2e][tune][bad-input]") {
  TempDir dir;
  std::string output;
  std::string typo = dir.file("typo.db");
  CHECK(test::run_command({kKestrel, "records", "export", "--db", typo}, output, dir.file("export.out")) != 0);
  CHECK_THAT(output, Catch::Contains("no records database at '" + typo + "'"));
  CHECK(::access(typo.c_str(), F_OK) != 0);
  std::string jsonl = dir.file("out.jsonl");
  CHECK(test::run_command({kKestrel, "records", "export", "--db", typo, "--out", jsonl}, output,
                          dir.file("export2.out")) != 0);
  CHECK(::access(typo.c_str(), F_OK) != 0);
  CHECK(::access(jsonl.c_str(), F_OK) != 0);  // no empty export either
  CHECK(test::run_command({kKestrel, "best", "--db", typo}, output, dir.file("best.out")) != 0);
  CHECK_THAT(output, Catch::Contains("no records database at '" + typo + "'"));
  CHECK(::access(typo.c_str(), F_OK) != 0);
}

TEST_CASE("a SIGKILLed tuning run loses no committed record and the rerun re-measures nothing",
          "[e2e][tune]") {
  TempDir dir;
  std::string db = dir.file("resume.db");
  const int trials = 24;
  pid_t killed = 0;
  {
    Process run(tune_args(db, trials), dir.file("run1.log"));
    REQUIRE(test::wait_for([&] { return record_count(db) >= 8 || !run.running(); }, 120s));
    REQUIRE(run.running());
    killed = run.pid();
    run.signal(SIGKILL);
    REQUIRE(run.wait_exit(5s));
  }
  std::size_t committed = record_count(db);
  INFO("records committed before the kill: " << committed);
  CHECK(committed >= 8);
  // The embedded device runtime (named after its parent's pid) went with its parent.
  std::string orphan = "pgrep -f 'kestrel-devic[e].*local-" + std::to_string(killed) + "-' > /dev/null";
  CHECK(test::wait_for([&] { return std::system(orphan.c_str()) != 0; }, 5s));

  std::string output;
  auto argv = tune_args(db, trials);
  argv.push_back("--json");
  REQUIRE(test::run_command(argv, output, dir.file("run2.out")) == 0);
  INFO(output);
  auto result = parse_json(output);
  REQUIRE(result.is_object());
  CHECK(result["resumed"].get<std::size_t>() == committed);  // everything committed was found
  CHECK(result["trials"] == trials);
  CHECK(result["this_session"].get<std::size_t>() == trials - result["resumed"].get<std::size_t>());
  auto [records, distinct] = trial_records(db);
  CHECK(records == static_cast<std::size_t>(trials));  // nothing measured twice
  CHECK(distinct == static_cast<std::size_t>(trials));
  CHECK(record_count(db) >= committed);
}

TEST_CASE("Ctrl-C in the middle of a batch keeps the records and the next run resumes", "[e2e][tune]") {
  TempDir dir;
  std::string db = dir.file("interrupt.db");
  Process run(tune_args(db, 400), dir.file("run.log"));
  REQUIRE(test::wait_for([&] { return record_count(db) >= 6 || !run.running(); }, 120s));
  REQUIRE(run.running());
  run.signal(SIGINT);
  auto code = run.wait_exit(60s);
  INFO("the interrupted run's log:\n" << run.log());
  REQUIRE(code);
  CHECK(*code == 130);
  CHECK_THAT(run.log(), Catch::Contains("stopping now: the batch in flight is dropped"));
  std::size_t kept = record_count(db);
  CHECK(kept >= 6);

  check_rerun_resumes(dir, db, kept);
}

// A terminal's Ctrl-C signals the whole foreground process group: the embedded device
// must not be in it (it would die mid-batch, its candidates recorded "device lost").
TEST_CASE("Ctrl-C to the whole process group stops cleanly, loses no device, and the next run resumes",
          "[e2e][tune]") {
  TempDir dir;
  std::string db = dir.file("group.db");
  Process run(tune_args(db, 400), dir.file("run.log"), /*new_group=*/true);
  REQUIRE(test::wait_for([&] { return record_count(db) >= 6 || !run.running(); }, 120s));
  REQUIRE(run.running());
  run.signal_group(SIGINT);
  auto code = run.wait_exit(20s);
  INFO(run.log());
  REQUIRE(code);
  CHECK(*code == 130);
  std::size_t kept = record_count(db);
  std::size_t lost = 0, ok = 0;
  {
    records::SqliteRecords records(db);
    for (const auto& best : records.best()) {
      for (const auto& r : records.find(best.op, best.workload, best.target)) {
        lost += r.status == kernel::Status::device_lost ? 1 : 0;
        ok += r.ok() ? 1 : 0;
      }
    }
  }
  CHECK(lost == 0);
  REQUIRE(ok > 0);
  // Trials succeeded: the summary shows the best of them.
  CHECK_THAT(run.log(), !Catch::Contains("no successful measurement"));
  CHECK_THAT(run.log(), Catch::Contains("best recorded"));

  check_rerun_resumes(dir, db, kept);
}

TEST_CASE("kestrel tune --final-top 0 shows the best recorded configuration", "[e2e][tune]") {
  TempDir dir;
  std::string db = dir.file("top0.db");
  auto argv = tune_args(db, 6);
  argv[std::find(argv.begin(), argv.end(), "--final-top") - argv.begin() + 1] = "0";
  std::string output;
  REQUIRE(test::run_command(argv, output, dir.file("tune.out")) == 0);
  INFO(output);
  CHECK_THAT(output, !Catch::Contains("no successful measurement"));
  CHECK_THAT(output, Catch::Contains("best recorded (not re-measured)"));
  CHECK(record_count(db) == 6);  // nothing re-measured
}

TEST_CASE("kestrel tune rejects bad input with clear errors", "[e2e][tune][bad-input]") {
  TempDir dir;
  std::string output;
  std::string db = dir.file("x.db");
  CHECK(test::run_command({kKestrel, "tune", "--op", "fft", "--shape", "8", "--db", db}, output, dir.file("o1")) == 2);
  CHECK_THAT(output, Catch::Contains("unknown op 'fft'"));
  CHECK(test::run_command({kKestrel, "tune", "--shape", "512xx512", "--db", db}, output, dir.file("o2")) == 2);
  CHECK_THAT(output, Catch::Contains("not an integer"));
  CHECK(test::run_command({kKestrel, "tune", "--op", "conv2d", "--shape", "N=1,C=3,H=2,W=2,K=4,R=5,S=5", "--db", db},
                          output, dir.file("o3")) == 2);
  CHECK_THAT(output, Catch::Contains("empty output"));
  CHECK(test::run_command({kKestrel, "tune", "--shape", "64x64x64", "--strategy", "magic", "--db", db}, output,
                          dir.file("o4")) == 2);
  CHECK_THAT(output, Catch::Contains("unknown strategy 'magic'"));
  // One --seed (the search's); the input data's is --data-seed.
  REQUIRE(test::run_command({kKestrel, "tune", "--help"}, output, dir.file("help")) == 0);
  std::size_t seeds = 0;
  for (auto at = output.find("--seed "); at != std::string::npos; at = output.find("--seed ", at + 1)) ++seeds;
  CHECK(seeds == 1);
  CHECK_THAT(output, Catch::Contains("--data-seed"));
  CHECK(test::run_command({kKestrel, "tune", "--shape", "64x64x64", "--time-budget", "10x", "--db", db}, output,
                          dir.file("o4b")) == 2);
  CHECK_THAT(output, Catch::Contains("unknown unit 'x'"));
  CHECK(test::run_command({kKestrel, "tune", "--shape", "64x64x64", "--time-budget", "m", "--db", db}, output,
                          dir.file("o4c")) == 2);
  CHECK_THAT(output, Catch::Contains("not a duration"));

  // Not a database.
  std::ofstream(dir.file("notes.db")) << "these are my notes, not a database\n";
  CHECK(test::run_command({kKestrel, "tune", "--shape", "64x64x64", "--db", dir.file("notes.db")}, output,
                          dir.file("o5")) == 2);
  CHECK_THAT(output, Catch::Contains("not a Kestrel records database"));
  CHECK(test::read_text(dir.file("notes.db")) == "these are my notes, not a database\n");

  // A database from a newer Kestrel.
  { records::SqliteRecords create(dir.file("future.db")); }
  sqlite3* handle = nullptr;
  REQUIRE(sqlite3_open(dir.file("future.db").c_str(), &handle) == SQLITE_OK);
  REQUIRE(sqlite3_exec(handle, "UPDATE meta SET value = '7' WHERE key = 'schema_version'", nullptr, nullptr, nullptr) ==
          SQLITE_OK);
  sqlite3_close(handle);
  CHECK(test::run_command({kKestrel, "tune", "--shape", "64x64x64", "--db", dir.file("future.db")}, output,
                          dir.file("o6")) == 2);
  CHECK_THAT(output, Catch::Contains("7"));

  // A key no device serves: a clear message after the wait.
  TrackerProcess tracker(dir);
  auto device = start_device(dir, tracker, "cpu", "the-only-one");
  REQUIRE(test::wait_for([&] { return device_count(query(dir, tracker)) == 1; }));
  auto start = std::chrono::steady_clock::now();
  CHECK(test::run_command({kKestrel, "tune", "--tracker", tracker.address(), "--key", "rpi4", "--wait-ms", "700",
                           "--shape", "64x64x64", "--db", db},
                          output, dir.file("o7")) == 1);
  CHECK(std::chrono::steady_clock::now() - start >= 700ms);
  CHECK_THAT(output, Catch::Contains("no device is registered under key 'rpi4'") && Catch::Contains("cpu"));
}

TEST_CASE("two device classes of one target tuned into one database each get their trials", "[e2e][tune]") {
  // Two keys (a Pi 4 and a Jetson would both be aarch64-linux-gnu): the records of the
  // first must not make the second "resume" trials it never measured.
  TempDir dir;
  std::string db = dir.file("classes.db");
  TrackerProcess tracker(dir);
  auto pi4 = start_device(dir, tracker, "pi4", "board-a");
  auto jetson = start_device(dir, tracker, "jetson", "board-b");
  REQUIRE(test::wait_for([&] { return device_count(query(dir, tracker)) == 2; }));
  auto tune_on = [&](const std::string& key, const std::string& out) {
    auto argv = tune_args(db, 6);
    argv.insert(argv.end(), {"--tracker", tracker.address(), "--key", key, "--json"});
    std::string output;
    int code = test::run_command(argv, output, dir.file(out));
    INFO(output);
    REQUIRE(code == 0);
    return parse_json(output);
  };
  auto first = tune_on("pi4", "pi4.out");
  CHECK(first["this_session"] == 6);
  auto second = tune_on("jetson", "jetson.out");
  CHECK(second["resumed"] == 0);
  CHECK(second["this_session"] == 6);
  auto again = tune_on("pi4", "pi4-again.out");
  CHECK(again["resumed"] == 6);
  CHECK(again["this_session"] == 0);
  // `best` answers per device class.
  std::string output;
  REQUIRE(test::run_command({kKestrel, "best", "--db", db, "--json"}, output, dir.file("best.out")) == 0);
  auto best = nlohmann::json::parse(output.substr(output.find('[')), nullptr, false);
  REQUIRE(best.is_array());
  std::set<std::string> keys;
  for (const auto& b : best) keys.insert(b["device_class"]["key"].get<std::string>());
  CHECK(keys == std::set<std::string>{"jetson", "pi4"});
}

TEST_CASE("a tuning session carries on when the tracker restarts in the middle", "[e2e][tune]") {
  TempDir dir;
  auto tracker = std::make_unique<TrackerProcess>(dir);
  const std::uint16_t port = tracker->port;
  auto device = start_device(dir, *tracker, "cpu", "steady");
  REQUIRE(test::wait_for([&] { return device_count(query(dir, *tracker)) == 1; }));

  std::string db = dir.file("restart.db");
  const int trials = 24;
  auto argv = tune_args(db, trials);
  std::vector<std::string> extra = {"--tracker", tracker->address(), "--key", "cpu", "--json"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  Process tune(argv, dir.file("tune.log"));
  REQUIRE(test::wait_for([&] { return record_count(db) >= 6 || !tune.running(); }, 120s));
  REQUIRE(tune.running());

  tracker->process->signal(SIGTERM);
  REQUIRE(tracker->process->wait_exit(5s));
  tracker.reset();
  std::this_thread::sleep_for(700ms);  // the session and the device are now retrying
  tracker = std::make_unique<TrackerProcess>(dir, std::vector<std::string>{}, port, "tracker2.log");

  auto code = tune.wait_exit(180s);
  INFO(tune.log());
  REQUIRE(code);
  CHECK(*code == 0);
  CHECK_THAT(tune.log(), Catch::Contains("reconnected to the tracker"));
  auto result = parse_json(tune.log());
  REQUIRE(result.is_object());
  CHECK(result["trials"] == trials);
  auto [records, distinct] = trial_records(db);
  CHECK(records == static_cast<std::size_t>(trials));
  CHECK(distinct == static_cast<std::size_t>(trials));
  CHECK(device->running());  // the same runtime process served before and after
}

TEST_CASE("a tuning session whose tracker never comes back gives up clearly and keeps its records",
          "[e2e][tune][bad-input]") {
  TempDir dir;
  auto tracker = std::make_unique<TrackerProcess>(dir);
  auto device = start_device(dir, *tracker, "cpu", "orphaned");
  REQUIRE(test::wait_for([&] { return device_count(query(dir, *tracker)) == 1; }));
  std::string db = dir.file("gone.db");
  auto argv = tune_args(db, 400);
  std::vector<std::string> extra = {"--tracker", tracker->address(), "--key", "cpu", "--reconnect-ms", "1500"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  Process tune(argv, dir.file("tune.log"));
  REQUIRE(test::wait_for([&] { return record_count(db) >= 4 || !tune.running(); }, 120s));
  REQUIRE(tune.running());
  tracker->process->signal(SIGKILL);
  REQUIRE(tracker->process->wait_exit(5s));
  std::size_t kept = record_count(db);

  auto code = tune.wait_exit(60s);
  INFO(tune.log());
  REQUIRE(code);
  CHECK(*code == 1);
  CHECK_THAT(tune.log(), Catch::Contains("tracker unreachable for 1500 ms"));
  CHECK(record_count(db) >= kept);  // nothing recorded was lost
  // And nothing was invented: candidates that could not be measured get no record.
  records::SqliteRecords records(db);
  REQUIRE_FALSE(records.best().empty());
  for (const auto& r : records.find("gemm", kWorkload, records.best()[0].target)) {
    CHECK(r.status != kernel::Status::device_lost);
  }
}

TEST_CASE("kestrel tune times OpenBLAS on the device beside Kestrel's kernels and best picks the fastest",
          "[e2e][tune][vendor]") {
  TempDir dir;
  std::string db = dir.file("vendors.db");
  // Only the default configuration against OpenBLAS (scripts/setup.sh installs it) on a
  // mid-sized gemm: OpenBLAS should win, and when it does best shows its row.
  std::vector<std::string> argv = {kKestrel, "tune", "--op", "gemm", "--shape", "192x160x224", "--trials", "1",
                                   "--batch", "1", "--db", db, "--repeat", "3", "--min-repeat-ms", "5",
                                   "--final-top", "1", "--final-repeat", "6", "--seed", "7", "--json"};
  std::string output;
  REQUIRE(test::run_command(argv, output, dir.file("tune.out")) == 0);
  INFO(output);
  auto result = parse_json(output);
  REQUIRE(result.is_object());
  // The finalist, the default and OpenBLAS, re-measured interleaved on the device.
  const nlohmann::json* openblas = nullptr;
  for (const auto& f : result["final"]) {
    if (f["implementation"] == "openblas") openblas = &f;
  }
  REQUIRE(openblas != nullptr);
  CHECK((*openblas)["status"] == "ok");
  CHECK((*openblas)["config"] == "");
  CHECK((*openblas)["gflops"].get<double>() > 0);
  const std::string winner = result["final"][0]["implementation"].get<std::string>();

  // Recorded like any other measurement, under its implementation.
  std::size_t vendor_records = 0;
  for (const auto& r : records::SqliteRecords(db, records::OpenMode::existing)
                           .find("gemm", {{"K", 224}, {"M", 192}, {"N", 160}}, *kestrel::ops::TargetId::parse(result["target"].get<std::string>()))) {
    if (r.implementation != "openblas") continue;
    ++vendor_records;
    CHECK(r.final_measurement);
    CHECK(r.ok());
  }
  CHECK(vendor_records == 1);

  // `best` picks the fastest across implementations: the final round's winner.
  std::string best;
  REQUIRE(test::run_command({kKestrel, "best", "--db", db, "--json"}, best, dir.file("best.json")) == 0);
  auto best_json = nlohmann::json::parse(best.substr(best.find('[')), nullptr, false);
  REQUIRE(best_json.is_array());
  REQUIRE(best_json.size() == 1);
  CHECK(best_json[0]["implementation"] == winner);
  REQUIRE(test::run_command({kKestrel, "best", "--db", db}, best, dir.file("best.out")) == 0);
  if (winner == "openblas") {
    CHECK(best_json[0].contains("kestrel"));  // Kestrel's own best beside it
    CHECK_THAT(best, Catch::Contains("openblas") && Catch::Contains("kestrel's best: "));
  } else {
    WARN("Kestrel's kernel beat OpenBLAS on this machine: best shows Kestrel's row");
    CHECK_THAT(best, Catch::Contains("kestrel"));
  }

  // --vendors none skips them.
  argv[11] = dir.file("none.db");
  argv.insert(argv.end(), {"--vendors", "none"});
  REQUIRE(test::run_command(argv, output, dir.file("none.out")) == 0);
  result = parse_json(output);
  REQUIRE(result.is_object());
  for (const auto& f : result["final"]) CHECK(f["implementation"] == "kestrel");
}
