// Tests of the records database: round trips, best(), JSONL export/import, refusing
// foreign and newer files, and the multi-process properties (a SIGKILLed writer loses
// nothing it had committed; concurrent writers do not see SQLITE_BUSY).
#include "kestrel/records/records.h"
#include "kestrel/records/sqlite_records.h"

#include <libpq-fe.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <thread>
#include <vector>

#include "kestrel/records/pg_records.h"
#include "support/postgres.h"

namespace {

using kestrel::kernel::Status;
using kestrel::ops::Config;
using kestrel::ops::Params;
using kestrel::records::Best;
using kestrel::records::DeviceClass;
using kestrel::records::OpenMode;
using kestrel::records::Record;
using kestrel::records::RecordsError;
using kestrel::records::RecordStore;
using RecordsDb = kestrel::records::SqliteRecords;

// A target from its text ("x86_64-linux-gnu (znver4)"), as records store it.
kestrel::ops::TargetId tid(const std::string& text) { return *kestrel::ops::TargetId::parse(text); }

constexpr double kInf = std::numeric_limits<double>::infinity();

// A fresh directory under $TMPDIR, removed with everything in it.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "kestrel-records-XXXXXX").string();
    if (mkdtemp(pattern.data()) == nullptr) FAIL("mkdtemp failed");
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  std::string file(const std::string& name) const { return (path_ / name).string(); }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

// Workloads and configs in the tests: "K=512,M=512,N=512", "tile_m=32,tile_n=64", or a
// short name "A" / "c1" that stands for {{"A", 1}} / {{"c", 1}}.
std::map<std::string, std::int64_t> pairs(const std::string& text) {
  if (text.find('=') != std::string::npos) return kestrel::ops::parse_pairs(text);
  std::size_t digits = text.find_first_of("0123456789");
  if (digits == std::string::npos) return {{text, 1}};
  return {{text.substr(0, digits), std::stoll(text.substr(digits))}};
}

const DeviceClass kEpyc{"local/0", "AMD EPYC", "x86_64-linux-gnu|AMD EPYC|16"};

Record make_record(const std::string& workload, const std::string& config, double cost, bool ok = true) {
  Record r;
  r.op = "gemm";
  r.workload = pairs(workload);
  r.target = tid("x86_64-linux-gnu (znver4)");
  r.device_class = kEpyc;
  r.device = "cpu0";
  r.config = pairs(config);
  r.status = ok ? Status::ok : Status::wrong_answer;
  r.message = ok ? "" : "max error 3.5 at index 17";
  r.round_seconds = ok ? std::vector<double>{cost, cost * 1.01, cost * 0.99} : std::vector<double>{};
  r.cost = ok ? cost : kInf;
  r.gflops = ok ? 1.0 / cost : 0;
  r.compile_ms = 12.5;
  r.tool_version = "0.1.0";
  r.time_unix_ms = 1700000000000;
  r.session = "session-a";
  return r;
}

// Every field but the id.
void require_same(const Record& a, const Record& b) {
  CHECK(a.op == b.op);
  CHECK(a.workload == b.workload);
  CHECK(a.target == b.target);
  CHECK(a.device_class == b.device_class);
  CHECK(a.device == b.device);
  CHECK(a.config == b.config);
  CHECK(a.status == b.status);
  CHECK(a.message == b.message);
  CHECK(a.round_seconds == b.round_seconds);
  if (std::isinf(a.cost)) {
    CHECK(std::isinf(b.cost));
    CHECK(b.cost > 0);
  } else {
    CHECK(a.cost == b.cost);
  }
  CHECK(a.gflops == b.gflops);
  CHECK(a.compile_ms == b.compile_ms);
  CHECK(a.tool_version == b.tool_version);
  CHECK(a.time_unix_ms == b.time_unix_ms);
  CHECK(a.session == b.session);
  CHECK(a.final_measurement == b.final_measurement);
  CHECK(a.is_default == b.is_default);
  CHECK(a.implementation == b.implementation);
  CHECK(a.machine == b.machine);
  CHECK(a.recommended == b.recommended);
}

// Runs `sql` on `path` with the SQLite C API, bypassing RecordsDb.
void raw_sql(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
  char* error = nullptr;
  int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &error);
  std::string message = error != nullptr ? error : "";
  sqlite3_free(error);
  sqlite3_close(db);
  INFO(message);
  REQUIRE(rc == SQLITE_OK);
}

std::string error_of(const std::string& path) {
  try {
    RecordsDb db(path);
  } catch (const RecordsError& e) {
    return e.what();
  }
  return "(no error)";
}

// Writes all of `value` to `fd`.
bool write_all(int fd, const void* data, std::size_t size) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t n = write(fd, p, size);
    if (n <= 0) return false;
    p += n;
    size -= static_cast<std::size_t>(n);
  }
  return true;
}

// Reads exactly `size` bytes; false at end of file.
bool read_all(int fd, void* data, std::size_t size) {
  char* p = static_cast<char*>(data);
  while (size > 0) {
    ssize_t n = read(fd, p, size);
    if (n <= 0) return false;
    p += n;
    size -= static_cast<std::size_t>(n);
  }
  return true;
}

// Adds `n` records for `session`, writing each id to `report_fd` (if >= 0) after add()
// returns. Runs in a forked child: never returns, exits 0 on success.
[[noreturn]] void child_writer(const std::string& path, const std::string& session, int n, int report_fd) {
  int code = 0;
  try {
    RecordsDb db(path);
    for (int i = 0; i < n; ++i) {
      Record r = make_record("M=" + std::to_string(i), "tile=" + std::to_string(i), 1e-3 + i * 1e-6);
      r.session = session;
      r.time_unix_ms += i;
      std::int64_t id = db.add(r);
      if (report_fd >= 0 && !write_all(report_fd, &id, sizeof id)) {
        code = 3;
        break;
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "child writer %s: %s\n", session.c_str(), e.what());
    code = 2;
  }
  _exit(code);
}

// The backends the shared cases run on: SQLite, and PostgreSQL where it is installed
// (or required: KESTREL_REQUIRE_POSTGRES=1 fails them where it is not).
std::vector<std::string> backends() {
  if (kestrel::test::postgres_installed() || kestrel::test::postgres_required()) return {"sqlite", "postgres"};
  std::cout << "note: PostgreSQL is not installed; the records cases run on SQLite only\n";
  return {"sqlite"};
}

// The stores of one test case on one backend: the same name is the same database (a file
// in the test's directory, or a fresh database on the tests' PostgreSQL server).
class Stores {
 public:
  Stores(std::string backend, const TempDir& dir) : backend_(std::move(backend)), dir_(dir) {}
  const std::string& backend() const { return backend_; }
  std::string location(const std::string& name) {
    if (backend_ == "sqlite") return dir_.file(name);
    auto it = uris_.find(name);
    if (it == uris_.end()) it = uris_.emplace(name, kestrel::test::postgres().create_database()).first;
    return it->second;
  }
  std::unique_ptr<RecordStore> open(const std::string& name, OpenMode mode = OpenMode::create) {
    return kestrel::records::open_records(location(name), mode);
  }

 private:
  std::string backend_;
  const TempDir& dir_;
  std::map<std::string, std::string> uris_;
};

}  // namespace

TEST_CASE("records: add and find round-trip every field", "[records]") {
  TempDir dir;
  Stores stores(GENERATE(from_range(backends())), dir);
  INFO("backend: " << stores.backend());
  auto db_store = stores.open("records.db");
  auto& db = *db_store;
  CHECK(db.count() == 0);

  Record ok = make_record("K=512,M=512,N=512", "tile_m=32,tile_n=64", 1.0 / 3.0);
  ok.round_seconds = {0.1, 1.0 / 3.0, 0.25, 1e-9, 123.456789012345};
  ok.message = "quotes \" and\nnewlines and unicode \xc2\xb5s";
  ok.final_measurement = true;
  ok.is_default = true;
  Record failed = make_record("K=512,M=512,N=512", "tile_m=1,tile_n=1", 0, false);
  failed.time_unix_ms += 1;

  std::int64_t id_ok = db.add(ok);
  std::int64_t id_failed = db.add(failed);
  CHECK(id_ok != id_failed);
  CHECK(db.count() == 2);

  auto found = db.find("gemm", pairs("K=512,M=512,N=512"), tid("x86_64-linux-gnu (znver4)"));
  REQUIRE(found.size() == 2);
  CHECK(found[0].id == id_ok);
  CHECK(found[1].id == id_failed);
  require_same(found[0], ok);
  require_same(found[1], failed);
  CHECK(found[0].round_seconds.size() == 5);
  CHECK(std::isinf(found[1].cost));

  CHECK(db.find("gemm", pairs("K=1,M=1,N=1"), tid("x86_64-linux-gnu (znver4)")).empty());
  CHECK(db.find("conv2d", pairs("K=512,M=512,N=512"), tid("x86_64-linux-gnu (znver4)")).empty());

  // Reopening sees the same records.
  auto again_store = stores.open("records.db");
  auto& again = *again_store;
  auto reread = again.find("gemm", pairs("K=512,M=512,N=512"), tid("x86_64-linux-gnu (znver4)"));
  REQUIRE(reread.size() == 2);
  require_same(reread[0], ok);
}

TEST_CASE("records: best picks the lowest-cost ok record, preferring final ones", "[records]") {
  TempDir dir;
  Stores stores(GENERATE(from_range(backends())), dir);
  INFO("backend: " << stores.backend());
  auto db_store = stores.open("records.db");
  auto& db = *db_store;
  // Workload A: trials only; a failed record must not win despite its default cost.
  db.add(make_record("A", "c1", 3.0));
  db.add(make_record("A", "c2", 1.0));
  db.add(make_record("A", "c3", 2.0));
  db.add(make_record("A", "c4", 0, false));
  // Workload B: the trial c2 is cheaper than the final re-measurement, but final wins.
  db.add(make_record("B", "c1", 5.0));
  db.add(make_record("B", "c2", 0.5));
  Record final_b = make_record("B", "c3", 0.9);
  final_b.final_measurement = true;
  db.add(final_b);
  Record final_b2 = make_record("B", "c4", 0.8);
  final_b2.final_measurement = true;
  db.add(final_b2);
  // A failed final re-measurement does not displace ok trials.
  db.add(make_record("C", "c1", 4.0));
  Record final_c = make_record("C", "c2", 0, false);
  final_c.final_measurement = true;
  db.add(final_c);
  // Workload D: nothing ok, so no best.
  db.add(make_record("D", "c1", 0, false));

  auto best = db.best();
  REQUIRE(best.size() == 3);
  CHECK(best[0].workload == pairs("A"));
  CHECK(best[0].record.config == pairs("c2"));
  CHECK(best[0].record.cost == 1.0);
  CHECK(best[0].trials == 4);
  CHECK(best[0].op == "gemm");
  CHECK(best[0].target == tid("x86_64-linux-gnu (znver4)"));

  CHECK(best[1].workload == pairs("B"));
  CHECK(best[1].record.config == pairs("c4"));
  CHECK(best[1].record.final_measurement);
  CHECK(best[1].trials == 4);

  CHECK(best[2].workload == pairs("C"));
  CHECK(best[2].record.config == pairs("c1"));
  CHECK(best[2].trials == 2);
  for (const Best& b : best) {
    CHECK(b.device_class == kEpyc);
    CHECK(!b.default_record);  // no default configuration recorded
    CHECK(!b.default_is_best);
  }
}

TEST_CASE("records: find_other_workloads excludes the workload and honours the limit", "[records]") {
  TempDir dir;
  Stores stores(GENERATE(from_range(backends())), dir);
  INFO("backend: " << stores.backend());
  auto db_store = stores.open("records.db");
  auto& db = *db_store;
  for (int i = 0; i < 10; ++i) {
    Record r = make_record(i % 2 == 0 ? "mine" : "other" + std::to_string(i), "c" + std::to_string(i), 1.0 + i);
    r.time_unix_ms += i;
    db.add(r);
  }
  Record other_target = make_record("elsewhere", "c", 1.0);
  other_target.target = tid("aarch64-linux-gnu");
  db.add(other_target);

  auto others = db.find_other_workloads("gemm", pairs("mine"), tid("x86_64-linux-gnu (znver4)"));
  REQUIRE(others.size() == 5);
  for (const auto& r : others) {
    CHECK(r.workload != pairs("mine"));
    CHECK(r.target == tid("x86_64-linux-gnu (znver4)"));
  }
  auto limited = db.find_other_workloads("gemm", pairs("mine"), tid("x86_64-linux-gnu (znver4)"), 2);
  CHECK(limited.size() == 2);
  CHECK(db.find_other_workloads("conv2d", pairs("mine"), tid("x86_64-linux-gnu (znver4)")).empty());
}

TEST_CASE("records: export and import round-trip, re-import adds nothing", "[records]") {
  TempDir dir;
  Stores stores(GENERATE(from_range(backends())), dir);
  INFO("backend: " << stores.backend());
  auto source_store = stores.open("source.db");
  auto& source = *source_store;
  for (int i = 0; i < 20; ++i) {
    Record r = make_record("W" + std::to_string(i % 3), "c" + std::to_string(i), 1e-3 * (i + 1), i % 4 != 0);
    r.time_unix_ms += i;
    r.final_measurement = i % 5 == 0;
    r.is_default = i % 7 == 0;
    r.round_seconds.push_back(1.0 / 7.0);
    source.add(r);
  }
  std::stringstream exported;
  source.export_jsonl(exported);
  std::string text = exported.str();
  CHECK(std::count(text.begin(), text.end(), '\n') == 20);
  CHECK(text.find("\"cost\":null") != std::string::npos);

  auto copy_store = stores.open("copy.db");
  auto& copy = *copy_store;
  std::istringstream in(text);
  CHECK(copy.import_jsonl(in) == 20);
  CHECK(copy.count() == source.count());

  std::stringstream exported_again;
  copy.export_jsonl(exported_again);
  CHECK(exported_again.str() == text);  // ids are 1..20 in both here; fields identical

  for (int w = 0; w < 3; ++w) {
    Params workload = pairs("W" + std::to_string(w));
    auto a = source.find("gemm", workload, tid("x86_64-linux-gnu (znver4)"));
    auto b = copy.find("gemm", workload, tid("x86_64-linux-gnu (znver4)"));
    REQUIRE(a.size() == b.size());
    for (std::size_t i = 0; i < a.size(); ++i) require_same(a[i], b[i]);
  }

  std::istringstream in_again(text);
  CHECK(copy.import_jsonl(in_again) == 0);
  CHECK(copy.count() == 20);

  // Importing into a database that already holds other records merges.
  Record extra = make_record("W9", "new", 1.0);
  extra.session = "session-b";
  copy.add(extra);
  std::stringstream merged;
  copy.export_jsonl(merged);
  std::istringstream merged_in(merged.str());
  CHECK(source.import_jsonl(merged_in) == 1);
  CHECK(source.count() == 21);
}

TEST_CASE("records: a malformed JSONL line is refused with its number", "[records]") {
  TempDir dir;
  Stores stores(GENERATE(from_range(backends())), dir);
  INFO("backend: " << stores.backend());
  auto source_store = stores.open("source.db");
  auto& source = *source_store;
  source.add(make_record("W", "c1", 1.0));
  std::stringstream exported;
  source.export_jsonl(exported);
  std::string good = exported.str();

  auto db_store = stores.open("target.db");
  auto& db = *db_store;
  SECTION("broken JSON") {
    std::istringstream in(good + "\n" + good + "{\"op\": \"gemm\",\n");
    REQUIRE_THROWS_WITH(db.import_jsonl(in), Catch::Contains("line 4") && Catch::Contains("malformed JSON"));
  }
  SECTION("missing field") {
    std::istringstream in(good + "{\"op\": \"gemm\", \"workload\": \"W\"}\n");
    REQUIRE_THROWS_WITH(db.import_jsonl(in), Catch::Contains("line 2") && Catch::Contains("'target'"));
  }
  SECTION("wrong type") {
    std::string bad = good;
    bad.replace(bad.find("\"time_unix_ms\":"), 15, "\"time_unix_ms\":\"soon\",\"x\":");
    std::istringstream in(bad);
    REQUIRE_THROWS_WITH(db.import_jsonl(in), Catch::Contains("line 1") && Catch::Contains("time_unix_ms"));
  }
  CHECK(db.count() == 0);  // nothing from a refused import
}

TEST_CASE("records: files that are not ours are refused on open", "[records]") {
  TempDir dir;
  SECTION("a text file") {
    std::string path = dir.file("notes.txt");
    std::ofstream(path) << "these are my notes, not a database\n" << std::string(4096, 'x') << "\n";
    std::string error = error_of(path);
    CHECK_THAT(error, Catch::Contains("not a Kestrel records database") && Catch::Contains("notes.txt") &&
                          Catch::Contains("file is not a database"));
    std::ifstream check(path);
    std::string first;
    std::getline(check, first);
    CHECK(first == "these are my notes, not a database");  // untouched
  }
  SECTION("a newer schema") {
    std::string path = dir.file("future.db");
    raw_sql(path,
            "CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);"
            "INSERT INTO meta VALUES('schema_version', '99');"
            "CREATE TABLE records(id INTEGER PRIMARY KEY, blob BLOB);");
    std::string error = error_of(path);
    CHECK_THAT(error, Catch::Contains("99") && Catch::Contains("version 5") && Catch::Contains("upgrade Kestrel"));
  }
  SECTION("another program's SQLite database") {
    std::string path = dir.file("other.db");
    raw_sql(path, "CREATE TABLE customers(id INTEGER PRIMARY KEY, name TEXT);");
    CHECK_THAT(error_of(path), Catch::Contains("not a Kestrel records database"));
  }
  SECTION("a missing directory") {
    CHECK_THAT(error_of(dir.file("no/such/dir/records.db")),
               Catch::Contains("does not exist") && Catch::Contains("no/such/dir"));
  }
  SECTION("an empty file is a new database") {
    std::string path = dir.file("empty.db");
    std::ofstream{path};
    RecordsDb db(path);
    CHECK(db.count() == 0);
  }
}

TEST_CASE("records: a SIGKILLed writer loses nothing it had committed", "[records][multiprocess]") {
  TempDir dir;
  std::string path = dir.file("records.db");
  { RecordsDb create(path); }

  std::mt19937 rng(std::random_device{}());
  for (int round = 0; round < 3; ++round) {
    const int kill_after = std::uniform_int_distribution<int>(5, 300)(rng);
    int fds[2];
    REQUIRE(pipe(fds) == 0);
    std::fflush(nullptr);
    pid_t child = fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      close(fds[0]);
      child_writer(path, "killed-" + std::to_string(round), 1000000, fds[1]);
    }
    close(fds[1]);
    std::vector<std::int64_t> reported;
    std::int64_t id = 0;
    while (static_cast<int>(reported.size()) < kill_after && read_all(fds[0], &id, sizeof id)) reported.push_back(id);
    usleep(std::uniform_int_distribution<unsigned>(0, 2000)(rng));
    kill(child, SIGKILL);  // mid-loop: probably inside add()
    while (read_all(fds[0], &id, sizeof id)) reported.push_back(id);  // what it wrote before dying
    close(fds[0]);
    int status = 0;
    REQUIRE(waitpid(child, &status, 0) == child);
    CHECK(WIFSIGNALED(status));
    REQUIRE(static_cast<int>(reported.size()) >= kill_after);

    RecordsDb db(path);
    std::set<std::int64_t> present;
    for (int i = 0; i < static_cast<int>(reported.size()) + 2; ++i) {
      for (const auto& r : db.find("gemm", pairs("M=" + std::to_string(i)), tid("x86_64-linux-gnu (znver4)"))) {
        if (r.session == "killed-" + std::to_string(round)) present.insert(r.id);
      }
    }
    for (std::int64_t reported_id : reported) {
      INFO("round " << round << ", id " << reported_id);
      CHECK(present.count(reported_id) == 1);
    }
    db.add(make_record("after-kill", "c", 1.0));  // still writable
  }
  raw_sql(path, "PRAGMA integrity_check;");
}

TEST_CASE("records: concurrent writers both get through", "[records][multiprocess]") {
  TempDir dir;
  std::string path = dir.file("records.db");
  { RecordsDb create(path); }

  std::fflush(nullptr);
  std::vector<pid_t> children;
  for (const char* session : {"writer-1", "writer-2"}) {
    pid_t child = fork();
    REQUIRE(child >= 0);
    if (child == 0) child_writer(path, session, 200, -1);
    children.push_back(child);
  }
  for (pid_t child : children) {
    int status = 0;
    REQUIRE(waitpid(child, &status, 0) == child);
    REQUIRE(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);  // 2: an error (e.g. SQLITE_BUSY) surfaced in the child
  }
  RecordsDb db(path);
  CHECK(db.count() == 400);
  std::stringstream exported;
  db.export_jsonl(exported);
  std::string text = exported.str();
  std::size_t first = 0, second = 0;
  for (std::size_t at = text.find("writer-1"); at != std::string::npos; at = text.find("writer-1", at + 1)) ++first;
  for (std::size_t at = text.find("writer-2"); at != std::string::npos; at = text.find("writer-2", at + 1)) ++second;
  CHECK(first == 200);
  CHECK(second == 200);
}

namespace {

// A final re-measurement of `config` in `session`; `is_default` marks the default config.
Record final_record(const std::string& workload, const std::string& config, double cost, const std::string& session,
                    bool is_default = false) {
  Record r = make_record(workload, config, cost);
  r.final_measurement = true;
  r.is_default = is_default;
  r.session = session;
  return r;
}

}  // namespace

TEST_CASE("records: best never prefers a config slower than the default in the same final round", "[records][best]") {
  TempDir dir;
  Stores stores(GENERATE(from_range(backends())), dir);
  INFO("backend: " << stores.backend());
  auto db_store = stores.open("records.db");
  auto& db = *db_store;
  // A: trials found c2 lucky-fast; re-measured beside the default, c2 is slower: the
  // default is best.
  Record default_trial = make_record("A", "c0", 2.0);
  default_trial.is_default = true;
  db.add(default_trial);
  db.add(make_record("A", "c2", 0.5));
  db.add(make_record("A", "c3", 0.7));
  db.add(final_record("A", "c2", 1.6, "s1"));
  db.add(final_record("A", "c3", 1.5, "s1"));
  db.add(final_record("A", "c0", 1.4, "s1", true));
  // B: a finalist beats the default in the final round; a cheaper trial does not count.
  db.add(make_record("B", "c5", 0.1));
  db.add(final_record("B", "c6", 0.9, "s1"));
  db.add(final_record("B", "c0", 1.2, "s1", true));
  // C: a tie goes to the default.
  db.add(final_record("C", "c7", 1.0, "s1"));
  db.add(final_record("C", "c0", 1.0, "s1", true));
  // D: the newest round with the default decides; an older round said otherwise.
  db.add(final_record("D", "c8", 0.5, "s1"));
  db.add(final_record("D", "c0", 2.0, "s1", true));
  db.add(final_record("D", "c8", 3.0, "s2"));
  db.add(final_record("D", "c0", 2.5, "s2", true));
  // E: the default failed in the final round: no baseline, best as without one.
  db.add(make_record("E", "c1", 3.0));
  db.add(final_record("E", "c2", 2.0, "s1"));
  Record failed_default = final_record("E", "c0", 0, "s1", true);
  failed_default.status = Status::run_timeout;
  failed_default.cost = kInf;
  failed_default.round_seconds.clear();
  db.add(failed_default);

  auto best = db.best();
  REQUIRE(best.size() == 5);
  auto of = [&](const std::string& workload) -> const Best& {
    for (const auto& b : best) {
      if (b.workload == pairs(workload)) return b;
    }
    FAIL("no best for " << workload);
    return best.front();
  };
  const Best& a = of("A");
  CHECK(a.default_is_best);
  CHECK(a.record.config == pairs("c0"));
  CHECK(a.record.final_measurement);
  CHECK(a.record.cost == 1.4);
  REQUIRE(a.default_record);
  CHECK(a.default_record->id == a.record.id);
  CHECK(a.trials == 6);

  const Best& b = of("B");
  CHECK(!b.default_is_best);
  CHECK(b.record.config == pairs("c6"));
  REQUIRE(b.default_record);
  CHECK(b.default_record->config == pairs("c0"));
  CHECK(b.default_record->cost == 1.2);

  CHECK(of("C").default_is_best);
  CHECK(of("C").record.config == pairs("c0"));

  const Best& d = of("D");
  CHECK(d.default_is_best);
  CHECK(d.record.session == "s2");
  CHECK(d.record.cost == 2.5);

  const Best& e = of("E");
  CHECK(!e.default_is_best);
  CHECK(e.record.config == pairs("c2"));  // final preferred, as without a default
  CHECK(!e.default_record);               // the default never measured ok
}

TEST_CASE("records: find and best keep device classes apart", "[records][device-class]") {
  TempDir dir;
  Stores stores(GENERATE(from_range(backends())), dir);
  INFO("backend: " << stores.backend());
  auto db_store = stores.open("records.db");
  auto& db = *db_store;
  const DeviceClass pi4{"pi4", "Cortex-A72", "aarch64-linux-gnu|Cortex-A72|4"};
  const DeviceClass jetson{"jetson", "Cortex-A78AE", "aarch64-linux-gnu|Cortex-A78AE|8"};
  const DeviceClass other_pi{"pi4", "Cortex-A76", "aarch64-linux-gnu|Cortex-A76|4"};  // same key, other board
  int n = 0;
  for (const auto& [device_class, cost] : {std::pair{pi4, 3.0}, std::pair{pi4, 2.0}, std::pair{jetson, 1.0},
                                           std::pair{other_pi, 0.5}}) {
    Record r = make_record("M=64", "c" + std::to_string(++n), cost);
    r.target = tid("aarch64-linux-gnu");
    r.device_class = device_class;
    db.add(r);
  }
  CHECK(db.find("gemm", pairs("M=64"), tid("aarch64-linux-gnu")).size() == 4);
  auto on_pi = db.find("gemm", pairs("M=64"), tid("aarch64-linux-gnu"), &pi4);
  REQUIRE(on_pi.size() == 2);
  for (const auto& r : on_pi) CHECK(r.device_class == pi4);
  REQUIRE(db.find("gemm", pairs("M=64"), tid("aarch64-linux-gnu"), &jetson).size() == 1);
  const DeviceClass nowhere{"pi5", "Cortex-A76", "aarch64-linux-gnu|Cortex-A76|4"};
  CHECK(db.find("gemm", pairs("M=64"), tid("aarch64-linux-gnu"), &nowhere).empty());

  auto best = db.best();
  REQUIRE(best.size() == 3);  // one per device class
  for (const auto& b : best) {
    if (b.device_class == pi4) {
      CHECK(b.record.config == pairs("c2"));
      CHECK(b.trials == 2);
    } else if (b.device_class == jetson) {
      CHECK(b.record.config == pairs("c3"));
      CHECK(b.trials == 1);
    } else {
      CHECK(b.device_class == other_pi);
      CHECK(b.record.config == pairs("c4"));
    }
  }
}

namespace {

// The version-1 schema, as Kestrel 0.1 wrote it.
constexpr const char* kVersion1 = R"sql(
CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
INSERT INTO meta VALUES('schema_version', '1');
CREATE TABLE records(
  id INTEGER PRIMARY KEY, op TEXT NOT NULL, workload TEXT NOT NULL, target TEXT NOT NULL,
  device_key TEXT NOT NULL, device TEXT NOT NULL, device_fingerprint TEXT NOT NULL, config TEXT NOT NULL,
  status TEXT NOT NULL, message TEXT NOT NULL, round_seconds TEXT NOT NULL, cost REAL, gflops REAL,
  compile_ms REAL, tool_version TEXT NOT NULL, time_unix_ms INTEGER NOT NULL, session TEXT NOT NULL,
  final_measurement INTEGER NOT NULL);
CREATE INDEX records_by_workload ON records(op, workload, target);
INSERT INTO records VALUES(1, 'gemm', 'K=8,M=8,N=8', 'x86_64-linux-gnu (znver4)', 'local', 'cpu0',
  'x86_64-linux-gnu|AMD EPYC 9654|16', 'mc=64,nc=256', 'ok', '', '[0.002,0.001,0.003]', 0.002, 1.5, 12.0,
  '0.1.0', 1700000000000, 's-old', 0);
INSERT INTO records VALUES(2, 'gemm', 'K=8,M=8,N=8', 'x86_64-linux-gnu (znver4)', 'local', '', '',
  'mc=8,nc=8', 'instantiation error', 'too small', '[]', NULL, 0, 0, '0.1.0', 1700000000001, 's-old', 0);
INSERT INTO records VALUES(3, 'gemm', 'K=8,M=8,N=8', 'cuda sm_90', 'h100', 'gpu0', 'x86_64-linux-gnu|Xeon|32',
  'bm=32', 'ok', '', '[0.001]', 0.001, 3.0, 40.0, '0.1.0', 1700000000002, 's-old', 1);
)sql";

// One value of one SQL query on `path`, read with the SQLite C API.
std::string raw_value(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK);
  sqlite3_stmt* stmt = nullptr;
  REQUIRE(sqlite3_prepare_v2(db, sql.c_str(), -1, &stmt, nullptr) == SQLITE_OK);
  std::string value;
  if (sqlite3_step(stmt) == SQLITE_ROW && sqlite3_column_text(stmt, 0) != nullptr) {
    value = reinterpret_cast<const char*>(sqlite3_column_text(stmt, 0));
  }
  sqlite3_finalize(stmt);
  sqlite3_close(db);
  return value;
}

void check_version1_records(const std::vector<Record>& cpu, const std::vector<Record>& gpu) {
  REQUIRE(cpu.size() == 2);
  CHECK(cpu[0].workload == Params{{"K", 8}, {"M", 8}, {"N", 8}});
  CHECK(cpu[0].config == Config{{"mc", 64}, {"nc", 256}});
  CHECK(cpu[0].status == Status::ok);
  CHECK(cpu[0].device_class == DeviceClass{"local", "AMD EPYC 9654", "x86_64-linux-gnu|AMD EPYC 9654|16"});
  CHECK(!cpu[0].is_default);
  CHECK(cpu[1].status == Status::instantiation_error);
  CHECK(cpu[1].device_class == DeviceClass{"local", "", ""});
  REQUIRE(gpu.size() == 1);
  CHECK(gpu[0].device_class.model.empty());  // a GPU's name is not in a version-1 fingerprint
  CHECK(gpu[0].final_measurement);
}

}  // namespace

TEST_CASE("records: a version-1 file is read as it is read-only and upgraded when opened for writing",
          "[records][upgrade]") {
  TempDir dir;
  std::string path = dir.file("v1.db");
  raw_sql(path, kVersion1);
  const kestrel::ops::TargetId target = tid("x86_64-linux-gnu (znver4)");
  const Params workload{{"K", 8}, {"M", 8}, {"N", 8}};
  {
    RecordsDb reader(path, OpenMode::existing);
    check_version1_records(reader.find("gemm", workload, target), reader.find("gemm", workload, tid("cuda sm_90")));
    CHECK(reader.count() == 3);
    CHECK(reader.best().size() == 2);
    const DeviceClass epyc{"local", "AMD EPYC 9654", "x86_64-linux-gnu|AMD EPYC 9654|16"};
    CHECK(reader.find("gemm", workload, target, &epyc).size() == 1);
  }
  CHECK(raw_value(path, "SELECT value FROM meta WHERE key = 'schema_version'") == "1");  // untouched
  CHECK(raw_value(path, "SELECT COUNT(*) FROM pragma_table_info('records') WHERE name = 'device_model'") == "0");

  {
    RecordsDb writer(path);
    check_version1_records(writer.find("gemm", workload, target), writer.find("gemm", workload, tid("cuda sm_90")));
    Record r = make_record("K=8,M=8,N=8", "mc=32", 1.0);
    r.is_default = true;
    r.time_unix_ms = 1800000000000;  // after the version-1 records
    writer.add(r);
    CHECK(writer.count() == 4);
  }
  CHECK(raw_value(path, "SELECT value FROM meta WHERE key = 'schema_version'") == "5");
  CHECK(raw_value(path, "SELECT device_model FROM records WHERE id = 1") == "AMD EPYC 9654");
  CHECK(raw_value(path, "SELECT implementation FROM records WHERE id = 1") == "kestrel");
  CHECK(raw_value(path, "SELECT COALESCE(machine, 'null') || '/' || recommended FROM records WHERE id = 1") ==
        "null/0");
  RecordsDb again(path);  // a second open finds version 5 and changes nothing
  auto all = again.find("gemm", workload, target);
  REQUIRE(all.size() == 3);
  CHECK(all[2].is_default);
  CHECK(all[2].device_class == kEpyc);
}

TEST_CASE("records: OpenMode::existing never creates or changes a file", "[records][read-only]") {
  TempDir dir;
  SECTION("a missing file") {
    std::string path = dir.file("typo.db");
    try {
      RecordsDb db(path, OpenMode::existing);
      FAIL("opened a missing database");
    } catch (const RecordsError& e) {
      CHECK_THAT(e.what(), Catch::Contains("no records database at '" + path + "'"));
    }
    CHECK(!std::filesystem::exists(path));
    CHECK(std::filesystem::is_empty(std::filesystem::path(path).parent_path()));
  }
  SECTION("an empty file") {
    std::string path = dir.file("empty.db");
    std::ofstream{path};
    try {
      RecordsDb db(path, OpenMode::existing);
      FAIL("opened an empty file");
    } catch (const RecordsError& e) {
      CHECK_THAT(e.what(), Catch::Contains("empty.db") && Catch::Contains("no Kestrel records"));
    }
    CHECK(std::filesystem::file_size(path) == 0);
  }
  SECTION("a database: readable, not writable") {
    std::string path = dir.file("records.db");
    { RecordsDb(path).add(make_record("W", "c1", 1.0)); }
    RecordsDb db(path, OpenMode::existing);
    CHECK(db.count() == 1);
    CHECK(db.best().size() == 1);
    CHECK_THROWS_WITH(db.add(make_record("W", "c2", 1.0)), Catch::Contains("read-only"));
    std::istringstream in("");
    CHECK_THROWS_WITH(db.import_jsonl(in), Catch::Contains("read-only"));
  }
  SECTION("a read-only reader leaves no WAL files behind") {
    std::string path = dir.file("records.db");
    { RecordsDb(path).add(make_record("W", "c1", 1.0)); }
    REQUIRE(!std::filesystem::exists(path + "-wal"));
    { CHECK(RecordsDb(path, OpenMode::existing).count() == 1); }
    CHECK(!std::filesystem::exists(path + "-wal"));
    CHECK(!std::filesystem::exists(path + "-shm"));
  }
  SECTION("refusals are the same") {
    std::string path = dir.file("other.db");
    raw_sql(path, "CREATE TABLE customers(id INTEGER PRIMARY KEY, name TEXT);");
    try {
      RecordsDb db(path, OpenMode::existing);
      FAIL("opened a foreign database");
    } catch (const RecordsError& e) {
      CHECK_THAT(e.what(), Catch::Contains("not a Kestrel records database"));
    }
  }
}

TEST_CASE("records: stored text that does not parse is an error naming the record", "[records]") {
  TempDir dir;
  std::string path = dir.file("records.db");
  { RecordsDb(path).add(make_record("M=1", "c1", 1.0)); }
  raw_sql(path, "UPDATE records SET config = 'mc=64,garbage' WHERE id = 1");
  RecordsDb db(path);
  CHECK_THROWS_WITH(db.find("gemm", pairs("M=1"), tid("x86_64-linux-gnu (znver4)")),
                    Catch::Contains("record 1") && Catch::Contains("config") && Catch::Contains("garbage"));
  raw_sql(path, "UPDATE records SET config = 'mc=64', status = 'exploded' WHERE id = 1");
  CHECK_THROWS_WITH(db.find("gemm", pairs("M=1"), tid("x86_64-linux-gnu (znver4)")),
                    Catch::Contains("record 1") && Catch::Contains("status") && Catch::Contains("exploded"));
}

TEST_CASE("records: an export of version 1 imports, with the new fields at their defaults", "[records]") {
  TempDir dir;
  Stores stores(GENERATE(from_range(backends())), dir);
  INFO("backend: " << stores.backend());
  auto db_store = stores.open("records.db");
  auto& db = *db_store;
  std::istringstream in(
      R"({"id":7,"op":"gemm","workload":"K=8,M=8,N=8","target":"x86_64-linux-gnu","device_key":"local",)"
      R"("device":"cpu0","device_fingerprint":"x86_64-linux-gnu|EPYC|16","config":"mc=64","status":"wrong answer",)"
      R"("message":"off by 2","round_seconds":[],"cost":null,"gflops":0,"compile_ms":3,"tool_version":"0.1.0",)"
      R"("time_unix_ms":1700000000000,"session":"old","final_measurement":false})"
      "\n");
  CHECK(db.import_jsonl(in) == 1);
  auto found = db.find("gemm", pairs("K=8,M=8,N=8"), tid("x86_64-linux-gnu"));
  REQUIRE(found.size() == 1);
  CHECK(found[0].status == Status::wrong_answer);
  CHECK(found[0].config == Config{{"mc", 64}});
  CHECK(found[0].device_class == DeviceClass{"local", "", "x86_64-linux-gnu|EPYC|16"});
  CHECK(!found[0].is_default);
  CHECK(found[0].implementation == "kestrel");
  CHECK(!found[0].machine.known());
  CHECK(found[0].recommended == 0);

  std::istringstream bad_status(R"({"op":"gemm","workload":"M=1","target":"t","config":"a=1","status":"meh",)"
                                R"("round_seconds":[],"cost":null,"time_unix_ms":1,"session":"s"})"
                                "\n");
  CHECK_THROWS_WITH(db.import_jsonl(bad_status), Catch::Contains("line 1") && Catch::Contains("unknown status 'meh'"));
}

namespace {

// The version-2 schema, as Kestrel wrote it before vendor libraries were recorded.
constexpr const char* kVersion2 = R"sql(
CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
INSERT INTO meta VALUES('schema_version', '2');
CREATE TABLE records(
  id INTEGER PRIMARY KEY, op TEXT NOT NULL, workload TEXT NOT NULL, target TEXT NOT NULL,
  device_key TEXT NOT NULL, device TEXT NOT NULL, device_fingerprint TEXT NOT NULL, config TEXT NOT NULL,
  status TEXT NOT NULL, message TEXT NOT NULL, round_seconds TEXT NOT NULL, cost REAL, gflops REAL,
  compile_ms REAL, tool_version TEXT NOT NULL, time_unix_ms INTEGER NOT NULL, session TEXT NOT NULL,
  final_measurement INTEGER NOT NULL, device_model TEXT NOT NULL DEFAULT '', is_default INTEGER NOT NULL DEFAULT 0);
CREATE INDEX records_by_workload ON records(op, workload, target);
INSERT INTO records VALUES(1, 'gemm', 'K=8,M=8,N=8', 'x86_64-linux-gnu (znver4)', 'local/0', 'cpu0',
  'x86_64-linux-gnu|AMD EPYC|16', 'mc=64,nc=256', 'ok', '', '[0.002,0.001,0.003]', 0.002, 1.5, 12.0,
  '0.2.0', 1700000000000, 's-old', 0, 'AMD EPYC', 1);
)sql";

}  // namespace

TEST_CASE("records: a version-2 file is read as it is read-only and upgraded when opened for writing",
          "[records][upgrade]") {
  TempDir dir;
  std::string path = dir.file("v2.db");
  raw_sql(path, kVersion2);
  const kestrel::ops::TargetId target = tid("x86_64-linux-gnu (znver4)");
  const Params workload{{"K", 8}, {"M", 8}, {"N", 8}};
  {
    RecordsDb reader(path, OpenMode::existing);
    auto records = reader.find("gemm", workload, target);
    REQUIRE(records.size() == 1);
    CHECK(records[0].implementation == "kestrel");
    CHECK(records[0].is_default);
    auto best = reader.best();
    REQUIRE(best.size() == 1);
    CHECK(best[0].own() == &best[0].record);
  }
  CHECK(raw_value(path, "SELECT value FROM meta WHERE key = 'schema_version'") == "2");  // untouched
  CHECK(raw_value(path, "SELECT COUNT(*) FROM pragma_table_info('records') WHERE name = 'implementation'") == "0");
  {
    RecordsDb writer(path);
    Record vendor = make_record("K=8,M=8,N=8", "c1", 0.001);
    vendor.config.clear();  // a vendor library's record has no configuration
    vendor.implementation = "openblas";
    vendor.time_unix_ms = 1800000000000;
    writer.add(vendor);
  }
  CHECK(raw_value(path, "SELECT value FROM meta WHERE key = 'schema_version'") == "5");
  CHECK(raw_value(path, "SELECT implementation FROM records WHERE id = 1") == "kestrel");
  CHECK(raw_value(path, "SELECT implementation FROM records WHERE id = 2") == "openblas");
  RecordsDb again(path);  // a second open finds version 5 and changes nothing
  auto all = again.find("gemm", workload, target);
  REQUIRE(all.size() == 2);
  CHECK(all[0].implementation == "kestrel");
  CHECK(all[1].implementation == "openblas");
  CHECK(all[1].config.empty());
}

TEST_CASE("records: best picks the fastest implementation, and keeps Kestrel's own best beside a vendor's",
          "[records][best][vendor]") {
  TempDir dir;
  Stores stores(GENERATE(from_range(backends())), dir);
  INFO("backend: " << stores.backend());
  auto db_store = stores.open("records.db");
  auto& db = *db_store;
  auto vendor = [](const std::string& workload, double cost, const std::string& session, bool final) {
    Record r = make_record(workload, "c1", cost);
    r.config.clear();  // a vendor library's record has no configuration
    r.implementation = "openblas";
    r.final_measurement = final;
    r.session = session;
    return r;
  };
  // A: the vendor wins the final round; Kestrel's best of that round is kept beside it.
  db.add(make_record("A", "c1", 0.5));
  db.add(final_record("A", "c1", 1.2, "s1"));
  db.add(final_record("A", "c0", 1.5, "s1", true));
  db.add(vendor("A", 1.0, "s1", true));
  // B: Kestrel wins the final round against the vendor.
  db.add(final_record("B", "c1", 0.8, "s1"));
  db.add(final_record("B", "c0", 1.5, "s1", true));
  db.add(vendor("B", 1.0, "s1", true));
  // C: no final round: the lowest cost wins, here the vendor's; Kestrel's best is kept.
  db.add(make_record("C", "c1", 2.0));
  db.add(make_record("C", "c2", 3.0));
  db.add(vendor("C", 1.0, "s1", false));
  // D: only the vendor measured ok: no Kestrel best.
  db.add(vendor("D", 1.0, "s1", false));

  auto best = db.best();
  REQUIRE(best.size() == 4);
  auto of = [&](const std::string& workload) -> const Best& {
    for (const auto& b : best) {
      if (b.workload == pairs(workload)) return b;
    }
    FAIL("no best for " << workload);
    return best.front();
  };
  const Best& a = of("A");
  CHECK(a.record.implementation == "openblas");
  CHECK(a.record.cost == 1.0);
  CHECK(!a.default_is_best);
  REQUIRE(a.own() != nullptr);
  CHECK(a.own()->config == pairs("c1"));
  CHECK(a.own()->cost == 1.2);  // the final round's, not the lucky trial's
  const Best& b = of("B");
  CHECK(b.record.implementation == "kestrel");
  CHECK(b.record.config == pairs("c1"));
  CHECK(b.own() == &b.record);
  CHECK(!b.own_record);
  const Best& c = of("C");
  CHECK(c.record.implementation == "openblas");
  REQUIRE(c.own() != nullptr);
  CHECK(c.own()->config == pairs("c1"));
  const Best& d = of("D");
  CHECK(d.record.implementation == "openblas");
  CHECK(d.own() == nullptr);

  // The implementation survives an export and an import.
  std::stringstream jsonl;
  db.export_jsonl(jsonl);
  CHECK_THAT(jsonl.str(), Catch::Contains("\"implementation\":\"openblas\""));
  auto copy_store = stores.open("copy.db");
  auto& copy = *copy_store;
  CHECK(copy.import_jsonl(jsonl) == db.count());
  auto copied = copy.find("gemm", pairs("D"), tid("x86_64-linux-gnu (znver4)"));
  REQUIRE(copied.size() == 1);
  CHECK(copied[0].implementation == "openblas");
}

// --- Both backends: BestQuery, transactions, schema versions, concurrency; PostgreSQL's
// connection errors ---

namespace {

// Runs `sql` on the PostgreSQL database at `uri` with libpq, bypassing PgRecords.
void raw_pg(const std::string& uri, const std::string& sql) {
  PGconn* conn = PQconnectdb(uri.c_str());
  REQUIRE(PQstatus(conn) == CONNECTION_OK);
  PGresult* result = PQexec(conn, sql.c_str());
  auto status = PQresultStatus(result);
  std::string message = PQresultErrorMessage(result);
  PQclear(result);
  PQfinish(conn);
  INFO(message);
  REQUIRE((status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK));
}

// Runs `sql` on the store called `name` of `stores`, with the backend's own client.
void raw(Stores& stores, const std::string& name, const std::string& sql) {
  if (stores.backend() == "sqlite") {
    raw_sql(stores.location(name), sql);
  } else {
    raw_pg(stores.location(name), sql);
  }
}

std::string open_error(const std::string& location, OpenMode mode) {
  try {
    kestrel::records::open_records(location, mode);
  } catch (const RecordsError& e) {
    return e.what();
  }
  return "(no error)";
}

// The same answer: task, record, default and Kestrel's own.
void require_same_best(const Best& a, const Best& b) {
  CHECK(a.op == b.op);
  CHECK(a.workload == b.workload);
  CHECK(a.target == b.target);
  CHECK(a.device_class == b.device_class);
  CHECK(a.record.id == b.record.id);
  CHECK(a.trials == b.trials);
  CHECK(a.default_is_best == b.default_is_best);
  CHECK(a.default_record.has_value() == b.default_record.has_value());
  if (a.default_record && b.default_record) CHECK(a.default_record->id == b.default_record->id);
  CHECK((a.own() ? a.own()->id : -1) == (b.own() ? b.own()->id : -1));
}

}  // namespace

TEST_CASE("records: best(BestQuery) gives best()'s answer for the tasks it selects", "[records][best-query]") {
  TempDir dir;
  Stores stores(GENERATE(from_range(backends())), dir);
  INFO("backend: " << stores.backend());
  auto db_store = stores.open("records.db");
  auto& db = *db_store;
  const DeviceClass other_class{"rpi/0", "Cortex-A72", "aarch64-linux-gnu|Cortex-A72|4"};
  int n = 0;
  for (const char* workload : {"A", "B", "C"}) {
    for (const char* target : {"x86_64-linux-gnu (znver4)", "x86_64-linux-gnu (skylake)"}) {
      for (const DeviceClass* device_class : {&kEpyc, &other_class}) {
        for (int c = 0; c < 4; ++c) {
          Record r = make_record(workload, "c" + std::to_string(c), 1.0 + (n * 7 % 11), c != 3);
          r.target = tid(target);
          r.device_class = *device_class;
          r.time_unix_ms += n++;
          r.final_measurement = c >= 2;
          r.is_default = c == 2;
          r.session = c >= 2 ? "session-final" : "session-a";
          db.add(r);
        }
      }
    }
  }
  Record conv = make_record("A", "c1", 0.5);
  conv.op = "conv2d";
  db.add(conv);

  const auto everything = db.best();
  REQUIRE(everything.size() == 3 * 2 * 2 + 1);
  auto expect = [&](const kestrel::records::BestQuery& q) {
    std::vector<Best> wanted;
    for (const Best& b : everything) {
      if ((!q.op || b.op == *q.op) && (!q.workload || b.workload == *q.workload) && (!q.target || b.target == *q.target) &&
          (!q.device_class || b.device_class == *q.device_class)) {
        wanted.push_back(b);
      }
    }
    auto got = db.best(q);
    REQUIRE(got.size() == wanted.size());
    for (std::size_t i = 0; i < got.size(); ++i) require_same_best(got[i], wanted[i]);
    return got.size();
  };
  kestrel::records::BestQuery q;
  CHECK(expect(q) == everything.size());
  q.op = "gemm";
  CHECK(expect(q) == 12);
  q.workload = pairs("B");
  CHECK(expect(q) == 4);
  q.target = tid("x86_64-linux-gnu (skylake)");
  CHECK(expect(q) == 2);
  q.device_class = other_class;
  CHECK(expect(q) == 1);
  q.workload = pairs("nothing");
  CHECK(expect(q) == 0);
  kestrel::records::BestQuery conv_only;
  conv_only.op = "conv2d";
  CHECK(expect(conv_only) == 1);
}

TEST_CASE("records: an import is one transaction: a bad line anywhere adds nothing", "[records]") {
  TempDir dir;
  Stores stores(GENERATE(from_range(backends())), dir);
  INFO("backend: " << stores.backend());
  auto source_store = stores.open("source.db");
  auto& source = *source_store;
  for (int i = 0; i < 2500; ++i) {  // more than one batch of the PostgreSQL import
    Record r = make_record("W" + std::to_string(i % 5), "c" + std::to_string(i), 1e-3 * (i + 1), i % 9 != 0);
    r.time_unix_ms += i;
    source.add(r);
  }
  std::stringstream exported;
  source.export_jsonl(exported);
  auto db_store = stores.open("target.db");
  auto& db = *db_store;
  db.add(make_record("X", "c1", 1.0));
  std::istringstream bad(exported.str() + "{\"op\": 1}\n");
  CHECK_THROWS_WITH(db.import_jsonl(bad), Catch::Contains("line 2501"));
  CHECK(db.count() == 1);
  std::istringstream good(exported.str());
  CHECK(db.import_jsonl(good) == 2500);
  CHECK(db.count() == 2501);
  std::istringstream again(exported.str());
  CHECK(db.import_jsonl(again) == 0);
  // Read-only stores refuse.
  auto reader = stores.open("target.db", OpenMode::existing);
  std::istringstream more(exported.str());
  CHECK_THROWS_WITH(reader->import_jsonl(more), Catch::Contains("read-only"));
  CHECK_THROWS_WITH(reader->add(make_record("Y", "c1", 1.0)), Catch::Contains("read-only"));
  CHECK(reader->count() == 2501);
}

TEST_CASE("records: a database from a newer Kestrel is refused, read-only or not", "[records]") {
  TempDir dir;
  Stores stores(GENERATE(from_range(backends())), dir);
  INFO("backend: " << stores.backend());
  { stores.open("future.db")->add(make_record("W", "c1", 1.0)); }
  raw(stores, "future.db", "UPDATE meta SET value = '6' WHERE key = 'schema_version'");
  const std::string location = stores.location("future.db");
  for (OpenMode mode : {OpenMode::create, OpenMode::existing}) {
    std::string error = open_error(location, mode);
    CHECK_THAT(error, Catch::Contains("newer Kestrel") && Catch::Contains("schema version 6") &&
                          Catch::Contains("upgrade Kestrel"));
  }
}

TEST_CASE("records: OpenMode::existing on an empty PostgreSQL database creates nothing", "[records][postgres]") {
  auto& server = kestrel::test::postgres();
  const std::string uri = server.create_database();
  CHECK_THAT(open_error(uri, OpenMode::existing), Catch::Contains("no records database at '" + uri + "'"));
  CHECK_FALSE(kestrel::records::records_exist(uri));  // still no tables
  CHECK(kestrel::records::open_records(uri)->count() == 0);  // created for writing
  CHECK(kestrel::records::records_exist(uri));
  CHECK(kestrel::records::open_records(uri, OpenMode::existing)->count() == 0);

  // A database with a table named records that is not Kestrel's is left alone.
  const std::string other = server.create_database();
  raw_pg(other, "CREATE TABLE records(x INTEGER)");
  CHECK_THAT(open_error(other, OpenMode::create), Catch::Contains("not a Kestrel records database"));
  CHECK_THAT(open_error(other, OpenMode::existing), Catch::Contains("not a Kestrel records database"));
}

TEST_CASE("records: PostgreSQL errors name the URI without its password", "[records]") {
  using kestrel::records::without_password;
  CHECK(without_password("postgresql://kestrel:s3cret@db.example:5432/records") ==
        "postgresql://kestrel@db.example:5432/records");
  CHECK(without_password("postgres://u:p%40ss@h/d?sslmode=require&password=s3cret") ==
        "postgres://u@h/d?sslmode=require");
  CHECK(without_password("postgresql://h/d?password=s3cret&sslmode=disable") == "postgresql://h/d?sslmode=disable");
  CHECK(without_password("postgresql://kestrel@h/d") == "postgresql://kestrel@h/d");

  // Nothing listens on port 1 of the loopback.
  std::string error = open_error("postgresql://kestrel:s3cret@127.0.0.1:1/records", OpenMode::create);
  CHECK_THAT(error, Catch::Contains("cannot connect to records database 'postgresql://kestrel@127.0.0.1:1/records'") &&
                        Catch::Contains("check that the PostgreSQL server is running"));
  CHECK_THAT(error, !Catch::Contains("s3cret"));
  CHECK_THAT(open_error("postgresql://kestrel:s3cret@127.0.0.1:1/records", OpenMode::existing),
             !Catch::Contains("s3cret"));

}

TEST_CASE("records: a URI of another scheme is refused, never taken as a file name, and hides its password",
          "[records]") {
  TempDir dir;
  const auto cwd = std::filesystem::current_path();
  std::filesystem::current_path(dir.path());
  struct Back {
    std::filesystem::path to;
    ~Back() { std::filesystem::current_path(to); }
  } back{cwd};
  for (OpenMode mode : {OpenMode::create, OpenMode::existing}) {
    std::string error = open_error("postgresq://kestrel:s3cret@db.example/records", mode);
    CHECK_THAT(error, Catch::Contains("'postgresq://kestrel@db.example/records' has an unknown scheme 'postgresq'") &&
                          Catch::Contains("did you mean 'postgresql'?"));
    CHECK_THAT(error, !Catch::Contains("s3cret"));
  }
  CHECK_THROWS_WITH(kestrel::records::records_exist("mysql://u:pw@h/d"),
                    Catch::Contains("unknown scheme 'mysql'") && !Catch::Contains("pw@"));
  // Nothing was created where a file of that name would go ("postgresq:" as a directory).
  CHECK(std::filesystem::is_empty(dir.path()));
  // SQLite's own URIs and plain paths still open.
  CHECK_NOTHROW(kestrel::records::open_records("file:" + (dir.path() / "u.db").string()));
  CHECK_NOTHROW(kestrel::records::open_records((dir.path() / "p.db").string()));
}

TEST_CASE("records: a PostgreSQL store's location has no password", "[records][postgres]") {
  // The tests' server (trust: the password is not checked).
  auto& server = kestrel::test::postgres();
  std::string uri = server.create_database();
  std::string with_password = uri;
  with_password.replace(with_password.find("kestrel@"), 8, "kestrel:s3cret@");
  auto db = kestrel::records::open_records(with_password);
  CHECK(db->location() == uri);
}

TEST_CASE("records: concurrent writers on their own connections lose and duplicate nothing",
          "[records][concurrency]") {
  TempDir dir;
  Stores stores(GENERATE(from_range(backends())), dir);
  INFO("backend: " << stores.backend());
  const std::string location = stores.location("shared.db");
  constexpr int kWriters = 6, kAdds = 150;
  std::vector<std::vector<std::int64_t>> ids(kWriters);
  std::vector<std::string> errors(kWriters);
  std::vector<std::thread> writers;
  // They open a fresh database at the same moment: the schema is created once.
  for (int w = 0; w < kWriters; ++w) {
    writers.emplace_back([&, w] {
      try {
        auto db = kestrel::records::open_records(location);
        for (int i = 0; i < kAdds; ++i) {
          Record r = make_record("M=" + std::to_string(i), "tile=" + std::to_string(w), 1e-3 + i * 1e-6);
          r.session = "writer-" + std::to_string(w);
          r.time_unix_ms += i;
          ids[static_cast<std::size_t>(w)].push_back(db->add(r));
        }
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(w)] = e.what();
      }
    });
  }
  for (auto& t : writers) t.join();
  for (const auto& e : errors) CHECK(e == "");
  auto db = stores.open("shared.db", OpenMode::existing);
  CHECK(db->count() == static_cast<std::size_t>(kWriters * kAdds));
  std::set<std::int64_t> returned;
  for (const auto& one : ids) returned.insert(one.begin(), one.end());
  CHECK(returned.size() == static_cast<std::size_t>(kWriters * kAdds));
  std::set<std::int64_t> stored;
  std::map<std::string, int> per_session;
  for (const Record& r : db->all()) {
    stored.insert(r.id);
    ++per_session[r.session];
  }
  CHECK(stored == returned);
  for (int w = 0; w < kWriters; ++w) CHECK(per_session["writer-" + std::to_string(w)] == kAdds);
}

TEST_CASE("records: processes opening a fresh PostgreSQL database at the same moment create it once",
          "[records][postgres][concurrency]") {
  auto& server = kestrel::test::postgres();
  for (int round = 0; round < 5; ++round) {
    const std::string uri = server.create_database();
    constexpr int kOpeners = 8;
    std::vector<std::string> errors(kOpeners);
    std::atomic<int> ready{0};
    std::vector<std::thread> openers;
    for (int i = 0; i < kOpeners; ++i) {
      openers.emplace_back([&, i] {
        ready.fetch_add(1);
        while (ready.load() < kOpeners) std::this_thread::yield();  // start together
        try {
          kestrel::records::open_records(uri)->add(make_record("W", "c" + std::to_string(i), 1.0));
        } catch (const std::exception& e) {
          errors[static_cast<std::size_t>(i)] = e.what();
        }
      });
    }
    for (auto& t : openers) t.join();
    for (const auto& e : errors) CHECK(e == "");
    CHECK(kestrel::records::open_records(uri, OpenMode::existing)->count() == static_cast<std::size_t>(kOpeners));
  }
}

TEST_CASE("records: a PostgreSQL server that goes away mid-session makes add() and reads fail with a clear error",
          "[records][postgres]") {
  kestrel::test::postgres();  // skipped (77) where PostgreSQL is not installed
  // A server of this test's own, stopped under an open store.
  auto server = std::make_unique<kestrel::test::PostgresServer>(kestrel::test::postgres_bindir());
  const std::string uri = server->create_database();
  auto db = kestrel::records::open_records(uri);
  db->add(make_record("A", "c1", 1.0));
  db->add(make_record("A", "c2", 2.0));
  server.reset();  // fast shutdown: the store's connection is closed by the server

  std::string error;
  try {
    db->add(make_record("A", "c3", 3.0));
  } catch (const RecordsError& e) {
    error = e.what();
  }
  INFO(error);
  CHECK_THAT(error, Catch::Contains(uri) && Catch::Contains("connection to the server was lost") &&
                        Catch::Contains("every record added before this one is kept"));
  CHECK_THROWS_AS(db->count(), RecordsError);  // reads fail the same way, no crash
}

// --- Schema version 4: the machine state and the final round's recommendation ---

namespace {

using kestrel::records::kOwnRecommended;
using kestrel::records::kRecommended;

// One value of one SQL query on the PostgreSQL database at `uri` ("" for NULL).
std::string raw_pg_value(const std::string& uri, const std::string& sql) {
  PGconn* conn = PQconnectdb(uri.c_str());
  REQUIRE(PQstatus(conn) == CONNECTION_OK);
  PGresult* result = PQexec(conn, sql.c_str());
  const bool ok = PQresultStatus(result) == PGRES_TUPLES_OK;
  std::string message = PQresultErrorMessage(result);
  std::string value = ok && PQntuples(result) > 0 ? PQgetvalue(result, 0, 0) : "";
  PQclear(result);
  PQfinish(conn);
  INFO(message);
  REQUIRE(ok);
  return value;
}

// One value of one SQL query on the store called `name`, with the backend's own client.
std::string raw_text(Stores& stores, const std::string& name, const std::string& sql) {
  return stores.backend() == "sqlite" ? raw_value(stores.location(name), sql) : raw_pg_value(stores.location(name), sql);
}

kestrel::kernel::MachineState machine_of(double load1, double cpu_mhz, double temperature_c, bool throttled,
                                      double busy_cpus) {
  kestrel::kernel::MachineState m;
  m.load1 = load1;
  m.cpu_mhz = cpu_mhz;
  m.temperature_c = temperature_c;
  m.throttled = throttled;
  m.busy_cpus = busy_cpus;
  return m;
}

// A vendor library's final re-measurement in `session`.
Record vendor_final(const std::string& workload, double cost, const std::string& session, unsigned recommended = 0) {
  Record r = final_record(workload, "c1", cost, session);
  r.config.clear();  // a vendor library's record has no configuration
  r.implementation = "openblas";
  r.recommended = recommended;
  return r;
}

}  // namespace

TEST_CASE("records: the machine state and the recommendation round-trip through add, find, export and import",
          "[records][machine]") {
  TempDir dir;
  Stores stores(GENERATE(from_range(backends())), dir);
  INFO("backend: " << stores.backend());
  auto db = stores.open("records.db");
  Record full = final_record("M=64", "c1", 0.5, "s1");
  full.machine = machine_of(0.25, 3187.5, 61.0, true, 2.0);
  full.recommended = kRecommended | kOwnRecommended;
  Record partial = final_record("M=64", "c2", 0.6, "s1");  // only some fields exposed
  partial.machine = machine_of(1.5, -1, 0.0, false, -1);
  partial.recommended = kOwnRecommended;
  partial.time_unix_ms += 1;
  Record unknown = final_record("M=64", "c0", 0.7, "s1", true);  // no machine state, no flag
  unknown.time_unix_ms += 2;
  const std::int64_t id_full = db->add(full);
  const std::int64_t id_partial = db->add(partial);
  const std::int64_t id_unknown = db->add(unknown);

  auto check_all = [&](RecordStore& store) {
    auto found = store.find("gemm", pairs("M=64"), tid("x86_64-linux-gnu (znver4)"));
    REQUIRE(found.size() == 3);
    require_same(found[0], full);
    require_same(found[1], partial);
    require_same(found[2], unknown);
    CHECK(found[0].machine.cpu_mhz == 3187.5);
    CHECK(found[0].machine.throttled);
    CHECK(found[0].recommended == (kRecommended | kOwnRecommended));
    CHECK(found[1].machine.load1 == 1.5);
    CHECK(found[1].machine.cpu_mhz < 0);
    CHECK(found[1].machine.temperature_c == 0.0);
    CHECK(found[1].machine.busy_cpus < 0);
    CHECK(found[1].recommended == kOwnRecommended);
    CHECK(!found[2].machine.known());
    CHECK(found[2].recommended == 0);
  };
  check_all(*db);
  check_all(*stores.open("records.db", OpenMode::existing));

  // Stored as compact JSON of the known fields, NULL when nothing is known.
  auto stored = [&](std::int64_t id) {
    return raw_text(stores, "records.db",
                    "SELECT COALESCE(machine, 'NULL') || ' ' || CAST(recommended AS TEXT) FROM records WHERE id = " +
                        std::to_string(id));
  };
  CHECK(stored(id_full) ==
        R"({"load1":0.25,"cpu_mhz":3187.5,"temperature_c":61.0,"throttled":true,"busy_cpus":2.0} 3)");
  CHECK(stored(id_partial) == R"({"load1":1.5,"temperature_c":0.0,"throttled":false} 2)");
  CHECK(stored(id_unknown) == "NULL 0");

  std::stringstream exported;
  db->export_jsonl(exported);
  const std::string text = exported.str();
  CHECK_THAT(text, Catch::Contains(R"("machine":{"load1":0.25,"cpu_mhz":3187.5,"temperature_c":61.0,)"
                                   R"("throttled":true,"busy_cpus":2.0},"recommended":3)"));
  CHECK_THAT(text, Catch::Contains(R"("machine":null,"recommended":0)"));

  // Into a database of the same backend, and into an SQLite file (PostgreSQL -> SQLite).
  auto copy = stores.open("copy.db");
  std::istringstream in(text);
  CHECK(copy->import_jsonl(in) == 3);
  check_all(*copy);
  std::stringstream exported_again;
  copy->export_jsonl(exported_again);
  CHECK(exported_again.str() == text);
  RecordsDb file(dir.file("other.db"));
  std::istringstream in_file(text);
  CHECK(file.import_jsonl(in_file) == 3);
  check_all(file);
  std::istringstream again(text);
  CHECK(copy->import_jsonl(again) == 0);  // already present

  // A malformed machine state or recommendation is refused with its line.
  const std::string line = text.substr(0, text.find('\n'));
  std::string bad_machine = line;
  bad_machine.replace(bad_machine.find("\"machine\":"), 10, "\"machine\":\"fast\",\"x\":");
  std::istringstream bad_machine_in(bad_machine + "\n");
  CHECK_THROWS_WITH(copy->import_jsonl(bad_machine_in), Catch::Contains("line 1") && Catch::Contains("'machine'"));
  std::string bad_load = line;
  bad_load.replace(bad_load.find("\"load1\":"), 8, "\"load1\":\"high\",\"x\":");
  std::istringstream bad_load_in(bad_load + "\n");
  CHECK_THROWS_WITH(copy->import_jsonl(bad_load_in), Catch::Contains("line 1") && Catch::Contains("'load1'"));
  std::string bad_flags = line;
  bad_flags.replace(bad_flags.find("\"recommended\":"), 14, "\"recommended\":-1,\"x\":");
  std::istringstream bad_flags_in(bad_flags + "\n");
  CHECK_THROWS_WITH(copy->import_jsonl(bad_flags_in), Catch::Contains("line 1") && Catch::Contains("'recommended'"));
  CHECK(copy->count() == 3);
}

TEST_CASE("records: best takes the newest default round's recommendation over the lowest cost",
          "[records][best][recommended]") {
  TempDir dir;
  Stores stores(GENERATE(from_range(backends())), dir);
  INFO("backend: " << stores.backend());
  auto db_store = stores.open("records.db");
  auto& db = *db_store;
  auto flagged = [](Record r, unsigned recommended) {
    r.recommended = recommended;
    return r;
  };
  // A: the newest round recommends c2 although c1 measured lower in it; an older round's
  // recommendation (c1) does not count.
  db.add(flagged(final_record("A", "c1", 0.5, "s0"), kRecommended | kOwnRecommended));
  db.add(final_record("A", "c0", 1.0, "s0", true));
  db.add(final_record("A", "c1", 0.9, "s1"));
  db.add(flagged(final_record("A", "c2", 1.0, "s1"), kRecommended | kOwnRecommended));
  db.add(final_record("A", "c0", 1.2, "s1", true));
  // B: the round keeps the default (not faster with confidence) although c1 measured lower.
  db.add(final_record("B", "c1", 0.95, "s1"));
  db.add(flagged(final_record("B", "c0", 1.0, "s1", true), kRecommended | kOwnRecommended));
  // C: a vendor library is recommended; Kestrel's own recommendation is c1, not the
  // lower-cost c2.
  db.add(flagged(final_record("C", "c1", 1.3, "s1"), kOwnRecommended));
  db.add(final_record("C", "c2", 1.2, "s1"));
  db.add(final_record("C", "c0", 1.5, "s1", true));
  db.add(vendor_final("C", 1.1, "s1", kRecommended));
  // D: a round without flags (recorded before schema version 4) decides by cost.
  db.add(final_record("D", "c1", 0.8, "s1"));
  db.add(final_record("D", "c0", 1.0, "s1", true));
  // E: the newest round has no flags: it decides by cost, whatever an older round chose.
  db.add(final_record("E", "c1", 0.9, "s1"));
  db.add(flagged(final_record("E", "c0", 1.0, "s1", true), kRecommended | kOwnRecommended));
  db.add(final_record("E", "c1", 0.8, "s2"));
  db.add(final_record("E", "c0", 1.0, "s2", true));
  // F: without flags, a vendor that measured lowest wins and Kestrel's own is by cost.
  db.add(final_record("F", "c1", 1.3, "s1"));
  db.add(final_record("F", "c2", 1.2, "s1"));
  db.add(final_record("F", "c0", 1.5, "s1", true));
  db.add(vendor_final("F", 1.1, "s1"));

  auto best = db.best();
  REQUIRE(best.size() == 6);
  auto of = [&](const std::string& workload) -> const Best& {
    for (const auto& b : best) {
      if (b.workload == pairs(workload)) return b;
    }
    FAIL("no best for " << workload);
    return best.front();
  };
  const Best& a = of("A");
  CHECK(a.record.config == pairs("c2"));
  CHECK(a.record.session == "s1");
  CHECK(a.record.cost == 1.0);
  CHECK(!a.default_is_best);
  REQUIRE(a.default_record);
  CHECK(a.default_record->cost == 1.2);
  CHECK(a.own() == &a.record);
  CHECK(!a.own_record);

  const Best& b = of("B");
  CHECK(b.default_is_best);
  CHECK(b.record.is_default);
  CHECK(b.record.config == pairs("c0"));

  const Best& c = of("C");
  CHECK(c.record.implementation == "openblas");
  CHECK(c.record.cost == 1.1);
  CHECK(!c.default_is_best);
  REQUIRE(c.own_record);
  CHECK(c.own()->config == pairs("c1"));
  CHECK(c.own()->cost == 1.3);
  CHECK(c.own()->recommended == kOwnRecommended);

  const Best& d = of("D");
  CHECK(d.record.config == pairs("c1"));
  CHECK(d.record.cost == 0.8);

  const Best& e = of("E");
  CHECK(e.record.config == pairs("c1"));
  CHECK(e.record.session == "s2");
  CHECK(!e.default_is_best);

  const Best& f = of("F");
  CHECK(f.record.implementation == "openblas");
  REQUIRE(f.own_record);
  CHECK(f.own()->config == pairs("c2"));  // by cost
}

namespace {

// The version-3 schema, as Kestrel wrote it before machine states and recommendations
// were recorded: a final round where c1 measured lower than the default.
constexpr const char* kVersion3 = R"sql(
CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
INSERT INTO meta VALUES('schema_version', '3');
CREATE TABLE records(
  id INTEGER PRIMARY KEY, op TEXT NOT NULL, workload TEXT NOT NULL, target TEXT NOT NULL,
  device_key TEXT NOT NULL, device TEXT NOT NULL, device_fingerprint TEXT NOT NULL, config TEXT NOT NULL,
  status TEXT NOT NULL, message TEXT NOT NULL, round_seconds TEXT NOT NULL, cost REAL, gflops REAL,
  compile_ms REAL, tool_version TEXT NOT NULL, time_unix_ms INTEGER NOT NULL, session TEXT NOT NULL,
  final_measurement INTEGER NOT NULL, device_model TEXT NOT NULL DEFAULT '', is_default INTEGER NOT NULL DEFAULT 0,
  implementation TEXT NOT NULL DEFAULT 'kestrel');
CREATE INDEX records_by_workload ON records(op, workload, target);
CREATE INDEX records_by_target ON records(op, target);
CREATE INDEX records_by_session ON records(session, time_unix_ms);
INSERT INTO records VALUES(1, 'gemm', 'K=8,M=8,N=8', 'x86_64-linux-gnu (znver4)', 'local/0', 'cpu0',
  'x86_64-linux-gnu|AMD EPYC|16', 'mc=64', 'ok', '', '[0.002]', 0.002, 1.5, 12.0,
  '0.3.0', 1700000000000, 's-old', 1, 'AMD EPYC', 1, 'kestrel');
INSERT INTO records VALUES(2, 'gemm', 'K=8,M=8,N=8', 'x86_64-linux-gnu (znver4)', 'local/0', 'cpu0',
  'x86_64-linux-gnu|AMD EPYC|16', 'mc=32', 'ok', '', '[0.001]', 0.001, 3.0, 12.0,
  '0.3.0', 1700000000001, 's-old', 1, 'AMD EPYC', 0, 'kestrel');
INSERT INTO records VALUES(3, 'gemm', 'K=8,M=8,N=8', 'x86_64-linux-gnu (znver4)', 'local/0', 'cpu0',
  'x86_64-linux-gnu|AMD EPYC|16', '', 'ok', '', '[0.003]', 0.003, 1.0, 0.0,
  '0.3.0', 1700000000002, 's-old', 1, 'AMD EPYC', 0, 'openblas');
)sql";

// The version-3 records, as any version reads them: no machine state, no flags; best()
// decides the round by cost (mc=32).
void check_version3_records(RecordStore& store) {
  auto records = store.find("gemm", Params{{"K", 8}, {"M", 8}, {"N", 8}}, tid("x86_64-linux-gnu (znver4)"));
  REQUIRE(records.size() >= 3);
  for (std::size_t i = 0; i < 3; ++i) {
    CHECK(!records[i].machine.known());
    CHECK(records[i].recommended == 0);
  }
  CHECK(records[0].is_default);
  CHECK(records[2].implementation == "openblas");
}

const Params kV3Workload{{"K", 8}, {"M", 8}, {"N", 8}};

}  // namespace

TEST_CASE("records: a version-3 file is read as it is read-only and upgraded to version 5 when opened for writing",
          "[records][upgrade]") {
  TempDir dir;
  std::string path = dir.file("v3.db");
  raw_sql(path, kVersion3);
  const kestrel::ops::TargetId target = tid("x86_64-linux-gnu (znver4)");
  {
    RecordsDb reader(path, OpenMode::existing);
    check_version3_records(reader);
    CHECK(reader.count() == 3);
    auto best = reader.best();
    REQUIRE(best.size() == 1);
    CHECK(best[0].record.config == Config{{"mc", 32}});  // by cost: the round has no flags
    REQUIRE(best[0].default_record);
    CHECK(best[0].default_record->id == 1);
    std::stringstream exported;
    reader.export_jsonl(exported);
    CHECK_THAT(exported.str(), Catch::Contains(R"("machine":null,"recommended":0)"));
  }
  CHECK(raw_value(path, "SELECT value FROM meta WHERE key = 'schema_version'") == "3");  // untouched
  CHECK(raw_value(path, "SELECT COUNT(*) FROM pragma_table_info('records') WHERE name IN ('machine', 'recommended')") ==
        "0");

  // A reader opened before the upgrade goes on reading after it.
  RecordsDb early_reader(path, OpenMode::existing);
  {
    RecordsDb writer(path);
    check_version3_records(writer);
    Record r = final_record("K=8,M=8,N=8", "mc=16", 0.0015, "s-new");
    r.machine = machine_of(0.5, 2400, -1, false, 1);
    r.recommended = kRecommended | kOwnRecommended;
    r.time_unix_ms = 1800000000000;
    writer.add(r);
    Record d = final_record("K=8,M=8,N=8", "mc=64", 0.0012, "s-new", true);
    d.time_unix_ms = 1800000000001;
    writer.add(d);
    auto best = writer.best();
    REQUIRE(best.size() == 1);
    CHECK(best[0].record.config == Config{{"mc", 16}});  // the new round's recommendation, not its lowest cost
  }
  CHECK(raw_value(path, "SELECT value FROM meta WHERE key = 'schema_version'") == "5");
  CHECK(raw_value(path, "SELECT COUNT(*) FROM pragma_table_info('records') WHERE name IN ('machine', 'recommended')") ==
        "2");
  CHECK(raw_value(path, "SELECT COALESCE(machine, 'NULL') || ' ' || recommended FROM records WHERE id = 2") ==
        "NULL 0");
  CHECK(raw_value(path, "SELECT machine || ' ' || recommended FROM records WHERE id = 4") ==
        R"({"load1":0.5,"cpu_mhz":2400.0,"throttled":false,"busy_cpus":1.0} 3)");
  CHECK(early_reader.count() == 5);
  check_version3_records(early_reader);

  RecordsDb again(path, OpenMode::existing);  // version 5 now, read as it is
  check_version3_records(again);
  auto all = again.find("gemm", kV3Workload, target);
  REQUIRE(all.size() == 5);
  CHECK(all[3].machine == machine_of(0.5, 2400, -1, false, 1));
  CHECK(all[3].recommended == (kRecommended | kOwnRecommended));
  { RecordsDb writer_again(path); }  // a second writable open finds version 5 and changes nothing
  CHECK(raw_value(path, "SELECT value FROM meta WHERE key = 'schema_version'") == "5");
}

namespace {

// The version-3 schema of the PostgreSQL backend, with the records of kVersion3 (ids from
// the identity sequence).
constexpr const char* kPgVersion3 = R"sql(
CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
INSERT INTO meta VALUES('schema_version', '3');
CREATE TABLE records(
  id BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY, op TEXT NOT NULL, workload TEXT NOT NULL,
  target TEXT NOT NULL, device_key TEXT NOT NULL, device TEXT NOT NULL, device_fingerprint TEXT NOT NULL,
  config TEXT NOT NULL, status TEXT NOT NULL, message TEXT NOT NULL, round_seconds TEXT NOT NULL,
  cost DOUBLE PRECISION, gflops DOUBLE PRECISION, compile_ms DOUBLE PRECISION, tool_version TEXT NOT NULL,
  time_unix_ms BIGINT NOT NULL, session TEXT NOT NULL, final_measurement INTEGER NOT NULL,
  device_model TEXT NOT NULL DEFAULT '', is_default INTEGER NOT NULL DEFAULT 0,
  implementation TEXT NOT NULL DEFAULT 'kestrel');
CREATE INDEX records_by_workload ON records(op, workload, target);
CREATE INDEX records_by_target ON records(op, target);
CREATE INDEX records_by_session ON records(session, time_unix_ms);
INSERT INTO records(op, workload, target, device_key, device, device_fingerprint, config, status, message,
  round_seconds, cost, gflops, compile_ms, tool_version, time_unix_ms, session, final_measurement, device_model,
  is_default, implementation) VALUES
  ('gemm', 'K=8,M=8,N=8', 'x86_64-linux-gnu (znver4)', 'local/0', 'cpu0', 'x86_64-linux-gnu|AMD EPYC|16', 'mc=64',
   'ok', '', '[0.002]', 0.002, 1.5, 12.0, '0.3.0', 1700000000000, 's-old', 1, 'AMD EPYC', 1, 'kestrel'),
  ('gemm', 'K=8,M=8,N=8', 'x86_64-linux-gnu (znver4)', 'local/0', 'cpu0', 'x86_64-linux-gnu|AMD EPYC|16', 'mc=32',
   'ok', '', '[0.001]', 0.001, 3.0, 12.0, '0.3.0', 1700000000001, 's-old', 1, 'AMD EPYC', 0, 'kestrel'),
  ('gemm', 'K=8,M=8,N=8', 'x86_64-linux-gnu (znver4)', 'local/0', 'cpu0', 'x86_64-linux-gnu|AMD EPYC|16', '',
   'ok', '', '[0.003]', 0.003, 1.0, 0.0, '0.3.0', 1700000000002, 's-old', 1, 'AMD EPYC', 0, 'openblas');
)sql";

}  // namespace

TEST_CASE("records: a version-3 PostgreSQL database is read as it is read-only and upgraded once when opened for "
          "writing",
          "[records][postgres][upgrade]") {
  auto& server = kestrel::test::postgres();
  const std::string uri = server.create_database();
  raw_pg(uri, kPgVersion3);
  const std::string new_columns =
      "SELECT COUNT(*) FROM information_schema.columns WHERE table_name = 'records' AND column_name IN ('machine', "
      "'recommended')";
  {
    auto reader = kestrel::records::open_records(uri, OpenMode::existing);
    check_version3_records(*reader);
    CHECK(reader->count() == 3);
    auto best = reader->best();
    REQUIRE(best.size() == 1);
    CHECK(best[0].record.config == Config{{"mc", 32}});
    CHECK(reader->all().size() == 3);
    CHECK(reader->find_other_workloads("gemm", pairs("M=1"), tid("x86_64-linux-gnu (znver4)")).size() == 3);
    std::stringstream exported;
    reader->export_jsonl(exported);
    CHECK_THAT(exported.str(), Catch::Contains(R"("machine":null,"recommended":0)"));
  }
  CHECK(raw_pg_value(uri, "SELECT value FROM meta WHERE key = 'schema_version'") == "3");  // untouched
  CHECK(raw_pg_value(uri, new_columns) == "0");

  // A reader opened before the upgrade goes on reading after it; writers opening it at the
  // same moment upgrade it once.
  auto early_reader = kestrel::records::open_records(uri, OpenMode::existing);
  constexpr int kOpeners = 6;
  std::vector<std::string> errors(kOpeners);
  std::atomic<int> ready{0};
  std::vector<std::thread> openers;
  for (int i = 0; i < kOpeners; ++i) {
    openers.emplace_back([&, i] {
      ready.fetch_add(1);
      while (ready.load() < kOpeners) std::this_thread::yield();  // start together
      try {
        Record r = final_record("K=8,M=8,N=8", "mc=" + std::to_string(100 + i), 0.0015, "s-new");
        r.machine = machine_of(0.5, 2400, -1, false, 1);
        r.recommended = i == 0 ? kRecommended | kOwnRecommended : 0;
        r.time_unix_ms = 1800000000000 + i;
        kestrel::records::open_records(uri)->add(r);
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(i)] = e.what();
      }
    });
  }
  for (auto& t : openers) t.join();
  for (const auto& e : errors) CHECK(e == "");
  CHECK(raw_pg_value(uri, "SELECT value FROM meta WHERE key = 'schema_version'") == "5");
  CHECK(raw_pg_value(uri, new_columns) == "2");
  CHECK(early_reader->count() == 3 + kOpeners);
  check_version3_records(*early_reader);

  auto db = kestrel::records::open_records(uri);
  Record d = final_record("K=8,M=8,N=8", "mc=64", 0.0012, "s-new", true);
  d.time_unix_ms = 1900000000000;
  db->add(d);
  auto all = db->find("gemm", kV3Workload, tid("x86_64-linux-gnu (znver4)"));
  REQUIRE(all.size() == 3 + kOpeners + 1);
  check_version3_records(*db);
  for (std::size_t i = 3; i < 3 + kOpeners; ++i) CHECK(all[i].machine == machine_of(0.5, 2400, -1, false, 1));
  auto best = db->best();
  REQUIRE(best.size() == 1);
  CHECK(best[0].record.config == Config{{"mc", 100}});  // the recommendation of the new round
  CHECK(best[0].record.recommended == (kRecommended | kOwnRecommended));
}

// --- Schema version 5: the target's fields in columns of their own beside its text ---

namespace {

// The target's columns of record `id`, "backend|triple|cpu|features|gpu_arch|gpu_index"
// ("NULL" for NULL), the same SQL on both backends.
std::string target_columns_sql(std::int64_t id) {
  return "SELECT COALESCE(target_backend, 'NULL') || '|' || COALESCE(target_triple, 'NULL') || '|' || "
         "COALESCE(target_cpu, 'NULL') || '|' || COALESCE(target_features, 'NULL') || '|' || "
         "COALESCE(target_gpu_arch, 'NULL') || '|' || COALESCE(CAST(target_gpu_index AS TEXT), 'NULL') "
         "FROM records WHERE id = " +
         std::to_string(id);
}

constexpr const char* kAllTargetsNull = "NULL|NULL|NULL|NULL|NULL|NULL";

// How many of the target's columns the records table has.
constexpr const char* kSqliteTargetColumns =
    "SELECT COUNT(*) FROM pragma_table_info('records') WHERE name LIKE 'target\\_%' ESCAPE '\\'";
constexpr const char* kPgTargetColumns =
    "SELECT COUNT(*) FROM information_schema.columns WHERE table_name = 'records' AND column_name LIKE 'target\\_%'";

}  // namespace

TEST_CASE("records: the target's fields are stored in columns of their own beside its text", "[records][target]") {
  TempDir dir;
  Stores stores(GENERATE(from_range(backends())), dir);
  INFO("backend: " << stores.backend());
  auto db = stores.open("records.db");
  const std::vector<std::pair<std::string, std::string>> targets = {
      {"x86_64-linux-gnu (znver4, +avx2,+fma)", "cpu|x86_64-linux-gnu|znver4|+avx2,+fma||0"},
      {"aarch64-linux-gnu", "cpu|aarch64-linux-gnu||||0"},
      {"cuda sm_90 #1", "cuda||||sm_90|1"},
      {"opencl", "opencl|||||0"},
  };
  std::vector<std::int64_t> ids;
  for (const auto& [text, columns] : targets) {
    Record r = make_record("K=8,M=8,N=8", "c1", 0.001);
    r.target = tid(text);
    ids.push_back(db->add(r));
  }
  for (std::size_t i = 0; i < targets.size(); ++i) {
    INFO("target: " << targets[i].first);
    CHECK(raw_text(stores, "records.db", target_columns_sql(ids[i])) == targets[i].second);
    CHECK(raw_text(stores, "records.db", "SELECT target FROM records WHERE id = " + std::to_string(ids[i])) ==
          targets[i].first);  // the text beside them, as before
    auto found = db->find("gemm", pairs("K=8,M=8,N=8"), tid(targets[i].first));
    REQUIRE(found.size() == 1);
    CHECK(found[0].target == tid(targets[i].first));
  }
  CHECK(raw_text(stores, "records.db", "SELECT value FROM meta WHERE key = 'schema_version'") == "5");

  // The export keeps the text; an import fills the columns in.
  std::stringstream exported;
  db->export_jsonl(exported);
  CHECK_THAT(exported.str(), Catch::Contains(R"("target":"cuda sm_90 #1")"));
  auto copy = stores.open("copy.db");
  CHECK(copy->import_jsonl(exported) == targets.size());
  CHECK(raw_text(stores, "copy.db", target_columns_sql(3)) == "cuda||||sm_90|1");

  // The columns are read first: a row whose text says otherwise reads as its columns say.
  raw(stores, "records.db", "UPDATE records SET target_gpu_index = 2 WHERE id = " + std::to_string(ids[2]));
  auto gpu = db->find("gemm", pairs("K=8,M=8,N=8"), tid("cuda sm_90 #1"));
  REQUIRE(gpu.size() == 1);
  CHECK(gpu[0].target == tid("cuda sm_90 #2"));

  // A row whose columns are NULL (written by an older Kestrel into an upgraded database)
  // reads its target from the text.
  raw(stores, "records.db",
      "UPDATE records SET target_backend = NULL, target_triple = NULL, target_cpu = NULL, target_features = NULL, "
      "target_gpu_arch = NULL, target_gpu_index = NULL WHERE id IN (" +
          std::to_string(ids[0]) + ", " + std::to_string(ids[2]) + ")");
  CHECK(raw_text(stores, "records.db", target_columns_sql(ids[0])) == kAllTargetsNull);
  auto cpu = db->find("gemm", pairs("K=8,M=8,N=8"), tid(targets[0].first));
  REQUIRE(cpu.size() == 1);
  CHECK(cpu[0].target == tid(targets[0].first));
  gpu = db->find("gemm", pairs("K=8,M=8,N=8"), tid("cuda sm_90 #1"));
  REQUIRE(gpu.size() == 1);
  CHECK(gpu[0].target == tid("cuda sm_90 #1"));
  CHECK(db->best().size() == targets.size());

  // An unknown backend in the column is an error naming the record.
  raw(stores, "records.db", "UPDATE records SET target_backend = 'tpu' WHERE id = " + std::to_string(ids[1]));
  CHECK_THROWS_WITH(db->all(), Catch::Contains("record " + std::to_string(ids[1])) &&
                                   Catch::Contains("unreadable target_backend") && Catch::Contains("'tpu'"));
}

namespace {

// The version-4 schema (SQLite), as Kestrel wrote it before the target's fields had columns
// of their own: a CPU and a GPU target, and a record of another op whose target text does
// not parse.
constexpr const char* kVersion4 = R"sql(
CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
INSERT INTO meta VALUES('schema_version', '4');
CREATE TABLE records(
  id INTEGER PRIMARY KEY, op TEXT NOT NULL, workload TEXT NOT NULL, target TEXT NOT NULL,
  device_key TEXT NOT NULL, device TEXT NOT NULL, device_fingerprint TEXT NOT NULL, config TEXT NOT NULL,
  status TEXT NOT NULL, message TEXT NOT NULL, round_seconds TEXT NOT NULL, cost REAL, gflops REAL,
  compile_ms REAL, tool_version TEXT NOT NULL, time_unix_ms INTEGER NOT NULL, session TEXT NOT NULL,
  final_measurement INTEGER NOT NULL, device_model TEXT NOT NULL DEFAULT '', is_default INTEGER NOT NULL DEFAULT 0,
  implementation TEXT NOT NULL DEFAULT 'kestrel', machine TEXT, recommended INTEGER NOT NULL DEFAULT 0);
CREATE INDEX records_by_workload ON records(op, workload, target);
CREATE INDEX records_by_target ON records(op, target);
CREATE INDEX records_by_session ON records(session, time_unix_ms);
INSERT INTO records VALUES(1, 'gemm', 'K=8,M=8,N=8', 'x86_64-linux-gnu (znver4)', 'local/0', 'cpu0',
  'x86_64-linux-gnu|AMD EPYC|16', 'mc=64', 'ok', '', '[0.002]', 0.002, 1.5, 12.0,
  '0.4.0', 1700000000000, 's-old', 0, 'AMD EPYC', 1, 'kestrel', '{"load1":0.5}', 0);
INSERT INTO records VALUES(2, 'gemm', 'K=8,M=8,N=8', 'cuda sm_90 #1', 'local/0', 'gpu1',
  'x86_64-linux-gnu|NVIDIA H100|1', 'bm=32', 'ok', '', '[0.001]', 0.001, 3.0, 40.0,
  '0.4.0', 1700000000001, 's-old', 0, 'NVIDIA H100', 0, 'kestrel', NULL, 0);
INSERT INTO records VALUES(3, 'gemm', 'K=8,M=8,N=8', 'x86_64-linux-gnu (znver4)', 'local/0', 'cpu0',
  'x86_64-linux-gnu|AMD EPYC|16', 'mc=32', 'ok', '', '[0.003]', 0.003, 1.0, 12.0,
  '0.4.0', 1700000000002, 's-old', 0, 'AMD EPYC', 0, 'kestrel', NULL, 0);
INSERT INTO records VALUES(4, 'broken', 'K=8', 'x86_64 (unclosed', 'local/0', 'cpu0',
  'x86_64-linux-gnu|AMD EPYC|16', 'mc=32', 'ok', '', '[0.003]', 0.003, 1.0, 12.0,
  '0.4.0', 1700000000003, 's-old', 0, 'AMD EPYC', 0, 'kestrel', NULL, 0);
)sql";

// The version-4 records of op gemm, as any version reads them.
void check_version4_records(const RecordStore& store) {
  auto cpu = store.find("gemm", kV3Workload, tid("x86_64-linux-gnu (znver4)"));
  REQUIRE(cpu.size() >= 2);
  CHECK(cpu[0].id == 1);
  CHECK(cpu[0].target == tid("x86_64-linux-gnu (znver4)"));
  CHECK(cpu[0].target.cpu == "znver4");
  CHECK(cpu[0].machine.load1 == 0.5);
  CHECK(cpu[0].is_default);
  CHECK(cpu[1].id == 3);
  auto gpu = store.find("gemm", kV3Workload, tid("cuda sm_90 #1"));
  REQUIRE(gpu.size() >= 1);
  CHECK(gpu[0].id == 2);
  CHECK(gpu[0].target.backend == kestrel::ops::Backend::cuda);
  CHECK(gpu[0].target.gpu_arch == "sm_90");
  CHECK(gpu[0].target.gpu_index == 1);
  CHECK(gpu[0].config == Config{{"bm", 32}});
}

}  // namespace

TEST_CASE("records: a version-4 file is read as it is read-only and upgraded to version 5 when opened for writing",
          "[records][upgrade][target]") {
  TempDir dir;
  std::string path = dir.file("v4.db");
  raw_sql(path, kVersion4);
  {
    RecordsDb reader(path, OpenMode::existing);
    check_version4_records(reader);
    CHECK(reader.count() == 4);
    CHECK_THROWS_WITH(reader.all(), Catch::Contains("record 4") && Catch::Contains("unreadable target"));
    CHECK(reader.all("gemm").size() == 3);
    kestrel::records::BestQuery gemm;
    gemm.op = "gemm";
    auto best = reader.best(gemm);
    REQUIRE(best.size() == 2);  // ordered by target text
    CHECK(best[0].target == tid("cuda sm_90 #1"));
    CHECK(best[1].record.id == 1);  // the lowest cost of its target
    CHECK(best[1].trials == 2);
    CHECK(reader.find_other_workloads("gemm", pairs("M=1"), tid("cuda sm_90 #1")).size() == 1);
  }
  CHECK(raw_value(path, "SELECT value FROM meta WHERE key = 'schema_version'") == "4");  // untouched
  CHECK(raw_value(path, kSqliteTargetColumns) == "0");

  // A reader opened before the upgrade goes on reading after it.
  RecordsDb early_reader(path, OpenMode::existing);
  std::int64_t added = 0;
  {
    RecordsDb writer(path);
    check_version4_records(writer);
    Record r = make_record("K=8,M=8,N=8", "mc=16", 0.0005);
    r.target = tid("aarch64-linux-gnu (neoverse-v2, +sve2)");
    r.time_unix_ms = 1800000000000;
    added = writer.add(r);
  }
  CHECK(raw_value(path, "SELECT value FROM meta WHERE key = 'schema_version'") == "5");
  CHECK(raw_value(path, kSqliteTargetColumns) == "6");
  CHECK(raw_value(path, target_columns_sql(1)) == "cpu|x86_64-linux-gnu|znver4|||0");
  CHECK(raw_value(path, target_columns_sql(2)) == "cuda||||sm_90|1");
  CHECK(raw_value(path, target_columns_sql(3)) == "cpu|x86_64-linux-gnu|znver4|||0");
  CHECK(raw_value(path, target_columns_sql(4)) == kAllTargetsNull);  // does not parse: left as it was
  CHECK(raw_value(path, target_columns_sql(added)) == "cpu|aarch64-linux-gnu|neoverse-v2|+sve2||0");
  CHECK(raw_value(path, "SELECT target FROM records WHERE id = 2") == "cuda sm_90 #1");  // the text is kept
  CHECK(early_reader.count() == 5);
  check_version4_records(early_reader);

  RecordsDb again(path, OpenMode::existing);  // version 5 now, read as it is
  check_version4_records(again);
  auto arm = again.find("gemm", kV3Workload, tid("aarch64-linux-gnu (neoverse-v2, +sve2)"));
  REQUIRE(arm.size() == 1);
  CHECK(arm[0].target.features == "+sve2");
  CHECK_THROWS_WITH(again.all(), Catch::Contains("record 4") && Catch::Contains("unreadable target"));
  { RecordsDb writer_again(path); }  // a second writable open finds version 5 and changes nothing
  CHECK(raw_value(path, "SELECT value FROM meta WHERE key = 'schema_version'") == "5");

  // A version-3 file chains through version 4 to 5, its targets' columns filled in.
  std::string v3 = dir.file("v3.db");
  raw_sql(v3, kVersion3);
  { RecordsDb writer(v3); }
  CHECK(raw_value(v3, "SELECT value FROM meta WHERE key = 'schema_version'") == "5");
  CHECK(raw_value(v3, target_columns_sql(3)) == "cpu|x86_64-linux-gnu|znver4|||0");
  // And a version-1 file, from its first version.
  std::string v1 = dir.file("v1.db");
  raw_sql(v1, kVersion1);
  { RecordsDb writer(v1); }
  CHECK(raw_value(v1, "SELECT value FROM meta WHERE key = 'schema_version'") == "5");
  CHECK(raw_value(v1, target_columns_sql(3)) == "cuda||||sm_90|0");
}

namespace {

// The version-4 schema of the PostgreSQL backend: version 3's with the machine and
// recommended columns, and a GPU record beside version 3's.
std::string pg_version4() {
  return std::string(kPgVersion3) + R"sql(
ALTER TABLE records ADD COLUMN machine TEXT;
ALTER TABLE records ADD COLUMN recommended INTEGER NOT NULL DEFAULT 0;
UPDATE meta SET value = '4' WHERE key = 'schema_version';
INSERT INTO records(op, workload, target, device_key, device, device_fingerprint, config, status, message,
  round_seconds, cost, gflops, compile_ms, tool_version, time_unix_ms, session, final_measurement, device_model,
  is_default, implementation, machine, recommended) VALUES
  ('gemm', 'K=8,M=8,N=8', 'cuda sm_90 #1', 'local/0', 'gpu1', 'x86_64-linux-gnu|NVIDIA H100|1', 'bm=32',
   'ok', '', '[0.001]', 0.001, 3.0, 40.0, '0.4.0', 1700000000003, 's-old', 0, 'NVIDIA H100', 0, 'kestrel', NULL, 0);
)sql";
}

}  // namespace

TEST_CASE("records: a version-4 PostgreSQL database is read as it is read-only and upgraded once to version 5 when "
          "opened for writing",
          "[records][postgres][upgrade][target]") {
  auto& server = kestrel::test::postgres();
  const std::string uri = server.create_database();
  raw_pg(uri, pg_version4());
  auto check = [](RecordStore& store) {
    check_version3_records(store);
    auto gpu = store.find("gemm", kV3Workload, tid("cuda sm_90 #1"));
    REQUIRE(gpu.size() == 1);
    CHECK(gpu[0].id == 4);
    CHECK(gpu[0].target.gpu_arch == "sm_90");
    CHECK(gpu[0].target.gpu_index == 1);
  };
  {
    auto reader = kestrel::records::open_records(uri, OpenMode::existing);
    check(*reader);
    CHECK(reader->count() == 4);
    CHECK(reader->all().size() == 4);
    CHECK(reader->best().size() == 2);
    CHECK(reader->find_other_workloads("gemm", pairs("M=1"), tid("cuda sm_90 #1")).size() == 1);
    std::stringstream exported;
    reader->export_jsonl(exported);
    CHECK_THAT(exported.str(), Catch::Contains(R"("target":"cuda sm_90 #1")"));
  }
  CHECK(raw_pg_value(uri, "SELECT value FROM meta WHERE key = 'schema_version'") == "4");  // untouched
  CHECK(raw_pg_value(uri, kPgTargetColumns) == "0");

  // A reader opened before the upgrade goes on reading after it; writers opening it at the
  // same moment upgrade it once.
  auto early_reader = kestrel::records::open_records(uri, OpenMode::existing);
  constexpr int kOpeners = 6;
  std::vector<std::string> errors(kOpeners);
  std::vector<std::int64_t> ids(kOpeners);
  std::atomic<int> ready{0};
  std::vector<std::thread> openers;
  for (int i = 0; i < kOpeners; ++i) {
    openers.emplace_back([&, i] {
      ready.fetch_add(1);
      while (ready.load() < kOpeners) std::this_thread::yield();  // start together
      try {
        Record r = make_record("K=8,M=8,N=8", "mc=" + std::to_string(100 + i), 0.0015);
        r.target = tid("aarch64-linux-gnu (neoverse-v2, +sve2)");
        r.time_unix_ms = 1800000000000 + i;
        ids[static_cast<std::size_t>(i)] = kestrel::records::open_records(uri)->add(r);
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(i)] = e.what();
      }
    });
  }
  for (auto& t : openers) t.join();
  for (const auto& e : errors) CHECK(e == "");
  CHECK(raw_pg_value(uri, "SELECT value FROM meta WHERE key = 'schema_version'") == "5");
  CHECK(raw_pg_value(uri, kPgTargetColumns) == "6");
  CHECK(raw_pg_value(uri, target_columns_sql(1)) == "cpu|x86_64-linux-gnu|znver4|||0");
  CHECK(raw_pg_value(uri, target_columns_sql(4)) == "cuda||||sm_90|1");
  CHECK(raw_pg_value(uri, "SELECT COUNT(*) FROM records WHERE target_backend IS NULL") == "0");
  for (std::int64_t id : ids) {
    CHECK(raw_pg_value(uri, target_columns_sql(id)) == "cpu|aarch64-linux-gnu|neoverse-v2|+sve2||0");
  }
  CHECK(early_reader->count() == 4 + kOpeners);
  check(*early_reader);

  auto db = kestrel::records::open_records(uri);
  check(*db);
  auto arm = db->find("gemm", kV3Workload, tid("aarch64-linux-gnu (neoverse-v2, +sve2)"));
  REQUIRE(arm.size() == kOpeners);
  CHECK(arm[0].target.cpu == "neoverse-v2");
  CHECK(db->best().size() == 3);
  CHECK(kestrel::records::open_records(uri, OpenMode::existing)->count() == 4 + kOpeners);

  // A version-3 database chains through version 4 to 5, its targets' columns filled in.
  const std::string v3 = server.create_database();
  raw_pg(v3, kPgVersion3);
  kestrel::records::open_records(v3);
  CHECK(raw_pg_value(v3, "SELECT value FROM meta WHERE key = 'schema_version'") == "5");
  CHECK(raw_pg_value(v3, target_columns_sql(3)) == "cpu|x86_64-linux-gnu|znver4|||0");
}
