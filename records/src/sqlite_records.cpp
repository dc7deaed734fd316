// The records database: an SQLite file in WAL mode, one autocommitted INSERT per
// measurement, so a tuning session killed at any point loses nothing it had added and
// several sessions can share one file. Workloads, configurations and statuses are stored
// as text (ops::format_params / format_config, kernel::to_string) and parsed back in one
// place, shared with the PostgreSQL backend (rows.h: read_record, from_json_line,
// and best()'s queries and rules). JSONL export/import moves records between databases.
#include "kestrel/records/sqlite_records.h"

#include <sqlite3.h>

#include <cctype>
#include <chrono>
#include <cstdint>
#include <cmath>
#include <filesystem>
#include <istream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <ostream>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "kestrel/base/log.h"
#include "rows.h"

namespace kestrel::records {
namespace {

using detail::in_quotes;
using detail::kColumns;
using detail::kInsert;
using detail::bind_record;
using detail::read_record;

// How long a writer waits for another process's transaction before giving up.
constexpr int kBusyTimeoutMs = 30000;

constexpr const char* kSchema = R"sql(
CREATE TABLE IF NOT EXISTS meta(
  key   TEXT PRIMARY KEY,
  value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS records(
  id                 INTEGER PRIMARY KEY,
  op                 TEXT    NOT NULL,
  workload           TEXT    NOT NULL,
  target             TEXT    NOT NULL,
  device_key         TEXT    NOT NULL,
  device             TEXT    NOT NULL,
  device_fingerprint TEXT    NOT NULL,
  config             TEXT    NOT NULL,
  status             TEXT    NOT NULL,
  message            TEXT    NOT NULL,
  round_seconds      TEXT    NOT NULL,  -- JSON array of seconds
  cost               REAL,              -- NULL: +infinity (not ok)
  gflops             REAL,
  compile_ms         REAL,
  tool_version       TEXT    NOT NULL,
  time_unix_ms       INTEGER NOT NULL,
  session            TEXT    NOT NULL,
  final_measurement  INTEGER NOT NULL,
  device_model       TEXT    NOT NULL DEFAULT '',  -- version 2
  is_default         INTEGER NOT NULL DEFAULT 0,   -- version 2
  implementation     TEXT    NOT NULL DEFAULT 'kestrel',  -- version 3
  machine            TEXT,                        -- version 4: JSON object; NULL: unknown
  recommended        INTEGER NOT NULL DEFAULT 0,  -- version 4: kRecommended | kOwnRecommended
  target_backend     TEXT,     -- version 5: the target's fields beside its text ("cpu", "cuda", "opencl");
  target_triple      TEXT,     --   NULL in a record written before (read from the text)
  target_cpu         TEXT,
  target_features    TEXT,
  target_gpu_arch    TEXT,
  target_gpu_index   INTEGER
);
CREATE INDEX IF NOT EXISTS records_by_workload ON records(op, workload, target);
CREATE INDEX IF NOT EXISTS records_by_target ON records(op, target);
CREATE INDEX IF NOT EXISTS records_by_session ON records(session, time_unix_ms);
)sql";

// The device model of a version-1 record: the CPU model inside its fingerprint
// ("triple|cpu model|cores") for CPU targets, unknown ('') for GPU targets.
constexpr const char* kModelFromFingerprint =
    "CASE WHEN target LIKE 'cuda%' OR target LIKE 'opencl%' OR instr(device_fingerprint, '|') = 0 "
    "THEN '' ELSE substr(substr(device_fingerprint, instr(device_fingerprint, '|') + 1), 1, "
    "instr(substr(device_fingerprint, instr(device_fingerprint, '|') + 1), '|') - 1) END";

// Version 1 -> 2, inside a transaction.
std::string upgrade_from_1() {
  return std::string("ALTER TABLE records ADD COLUMN device_model TEXT NOT NULL DEFAULT '';"
                     "ALTER TABLE records ADD COLUMN is_default INTEGER NOT NULL DEFAULT 0;"
                     "UPDATE records SET device_model = ") +
         kModelFromFingerprint + "; UPDATE meta SET value = '2' WHERE key = 'schema_version';";
}

// Version 2 -> 3, inside a transaction: every earlier record is one of Kestrel's own kernels.
constexpr const char* kUpgradeFrom2 =
    "ALTER TABLE records ADD COLUMN implementation TEXT NOT NULL DEFAULT 'kestrel';"
    "UPDATE meta SET value = '3' WHERE key = 'schema_version';";

// Version 3 -> 4, inside a transaction: earlier records have no machine state and no
// recommendation (their rounds decide by cost).
constexpr const char* kUpgradeFrom3 =
    "ALTER TABLE records ADD COLUMN machine TEXT;"
    "ALTER TABLE records ADD COLUMN recommended INTEGER NOT NULL DEFAULT 0;"
    "UPDATE meta SET value = '4' WHERE key = 'schema_version';";

// Version 4 -> 5 (its columns; upgrade_from_4 fills them in), inside a transaction.
constexpr const char* kUpgradeFrom4 =
    "ALTER TABLE records ADD COLUMN target_backend TEXT;"
    "ALTER TABLE records ADD COLUMN target_triple TEXT;"
    "ALTER TABLE records ADD COLUMN target_cpu TEXT;"
    "ALTER TABLE records ADD COLUMN target_features TEXT;"
    "ALTER TABLE records ADD COLUMN target_gpu_arch TEXT;"
    "ALTER TABLE records ADD COLUMN target_gpu_index INTEGER;";

// What queries read from: the table, or for an older file opened read-only the same rows
// with the newer columns computed.
constexpr const char* kRecordsCurrent = "records";
std::string records_of_version(std::int64_t version) {
  using detail::kVersion4Computed;
  using detail::kVersion5Computed;
  if (version == 1) {
    return std::string("(SELECT *, ") + kModelFromFingerprint +
           " AS device_model, 0 AS is_default, 'kestrel' AS implementation, " + kVersion4Computed + ", " +
           kVersion5Computed + " FROM records) AS records";
  }
  if (version == 2) {
    return std::string("(SELECT *, 'kestrel' AS implementation, ") + kVersion4Computed + ", " + kVersion5Computed +
           " FROM records) AS records";
  }
  if (version == 3) return detail::records_of_version3();
  return detail::records_of_version4();
}

std::string advice_for(int rc) {
  switch (rc & 0xff) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      return " (another process kept the database locked; retry, or check for a stuck session)";
    case SQLITE_FULL:
      return " (the disk is full; free some space)";
    case SQLITE_IOERR:
      return " (I/O error; check the disk and the file system)";
    case SQLITE_READONLY:
    case SQLITE_PERM:
    case SQLITE_CANTOPEN:
      return " (check that the file and its directory are writable)";
    case SQLITE_CORRUPT:
      return " (the file is damaged; restore it from an export or start a new one)";
    default:
      return "";
  }
}

// The error of a failed call on `db`, naming the file and the operation.
[[noreturn]] void fail(sqlite3* db, int rc, const std::string& path, const std::string& what) {
  std::string message = "records database " + in_quotes(path) + ": " + what + " failed: ";
  message += db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
  if ((rc & 0xff) == SQLITE_NOTADB) {
    throw RecordsError(in_quotes(path) + " is not a Kestrel records database (file is not a database): "
                       "use another records path, or move this file away");
  }
  throw RecordsError(message + advice_for(rc));
}

// A file name as an SQLite URI ("file:" + the path, percent-encoded), for URI parameters.
std::string file_uri(const std::string& path) {
  static const char* hex = "0123456789ABCDEF";
  std::string uri = "file:";
  for (unsigned char c : path) {
    if (std::isalnum(c) || c == '/' || c == '.' || c == '_' || c == '-' || c == '~') {
      uri += static_cast<char>(c);
    } else {
      uri += '%';
      uri += hex[c >> 4];
      uri += hex[c & 0xf];
    }
  }
  return uri;
}

// Whether the database can be read through `db`. A WAL-mode file whose directory cannot
// hold its -wal and -shm files (read-only mount, no write permission) fails here with
// SQLITE_CANTOPEN or SQLITE_READONLY_CANTINIT, not at open.
int probe_read(sqlite3* db) {
  return sqlite3_exec(db, "SELECT count(*) FROM sqlite_master", nullptr, nullptr, nullptr);
}

// Owns one connection.
class Database {
 public:
  Database() = default;
  explicit Database(sqlite3* db) : db_(db) {}
  ~Database() { sqlite3_close_v2(db_); }
  Database(Database&& other) noexcept : db_(std::exchange(other.db_, nullptr)) {}
  Database& operator=(Database&& other) noexcept {
    std::swap(db_, other.db_);
    return *this;
  }
  Database(const Database&) = delete;
  Database& operator=(const Database&) = delete;

  sqlite3* get() const { return db_; }

 private:
  sqlite3* db_ = nullptr;
};

// Owns one prepared statement; errors name the database file.
class Statement final : public detail::Row {
 public:
  Statement(sqlite3* db, const std::string& path, const std::string& sql) : db_(db), path_(&path) {
    int rc = sqlite3_prepare_v2(db, sql.c_str(), static_cast<int>(sql.size()), &stmt_, nullptr);
    if (rc != SQLITE_OK) fail(db_, rc, *path_, "preparing a query");
  }
  ~Statement() { sqlite3_finalize(stmt_); }
  Statement(Statement&& other) noexcept
      : db_(other.db_), path_(other.path_), stmt_(std::exchange(other.stmt_, nullptr)) {}
  Statement& operator=(Statement&&) = delete;
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;

  void bind(int index, const std::string& value) {
    check(sqlite3_bind_text(stmt_, index, value.data(), static_cast<int>(value.size()), SQLITE_TRANSIENT));
  }
  void bind(int index, std::int64_t value) { check(sqlite3_bind_int64(stmt_, index, value)); }
  void bind(int index, double value) { check(sqlite3_bind_double(stmt_, index, value)); }
  void bind_null(int index) { check(sqlite3_bind_null(stmt_, index)); }

  // Steps once: true while a row is available, false when done.
  bool step(const char* what) {
    int rc = sqlite3_step(stmt_);
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    sqlite3_reset(stmt_);
    fail(db_, rc, *path_, what);
  }
  // Makes the statement ready to run again with new bindings.
  void reset() {
    sqlite3_reset(stmt_);
    sqlite3_clear_bindings(stmt_);
  }

  std::string text(int column) const override {
    auto* data = reinterpret_cast<const char*>(sqlite3_column_text(stmt_, column));
    if (data == nullptr) return {};
    return std::string(data, static_cast<std::size_t>(sqlite3_column_bytes(stmt_, column)));
  }
  std::int64_t int64(int column) const override { return sqlite3_column_int64(stmt_, column); }
  bool is_null(int column) const override { return sqlite3_column_type(stmt_, column) == SQLITE_NULL; }
  double real(int column, double if_null) const override {
    return is_null(column) ? if_null : sqlite3_column_double(stmt_, column);
  }

 private:
  void check(int rc) {
    if (rc != SQLITE_OK) fail(db_, rc, *path_, "binding a value");
  }

  sqlite3* db_;
  const std::string* path_;
  sqlite3_stmt* stmt_ = nullptr;
};

// BEGIN IMMEDIATE ... COMMIT, rolled back when left without commit().
// Switching a rollback-journal file to WAL needs its exclusive lock. When several
// processes open a fresh file at the same moment, SQLite sees two connections each
// wanting to upgrade a shared lock and answers SQLITE_BUSY at once, without calling the
// busy handler (waiting could deadlock). Each tries again after a short, uneven pause
// until the busy timeout: one of them wins, and the others find the file in WAL mode.
void switch_to_wal(sqlite3* db, const std::string& path) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kBusyTimeoutMs);
  std::minstd_rand jitter(static_cast<unsigned>(reinterpret_cast<std::uintptr_t>(db)));
  for (;;) {
    int rc = sqlite3_exec(db, "PRAGMA journal_mode=WAL", nullptr, nullptr, nullptr);
    if (rc == SQLITE_OK) return;
    const int primary = rc & 0xff;
    if ((primary != SQLITE_BUSY && primary != SQLITE_LOCKED) || std::chrono::steady_clock::now() >= deadline) {
      fail(db, rc, path, "switching to WAL mode");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2 + jitter() % 20));
  }
}

class Transaction {
 public:
  Transaction(sqlite3* db, const std::string& path) : db_(db), path_(path) {
    int rc = sqlite3_exec(db_, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr);
    if (rc != SQLITE_OK) fail(db_, rc, path_, "starting a transaction");
  }
  ~Transaction() {
    if (open_) sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
  }
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;

  void commit() {
    int rc = sqlite3_exec(db_, "COMMIT", nullptr, nullptr, nullptr);
    if (rc != SQLITE_OK) fail(db_, rc, path_, "committing");
    open_ = false;
  }

 private:
  sqlite3* db_;
  const std::string& path_;
  bool open_ = true;
};

// What a file holds before we touch it.
enum class Contents { empty, ours, foreign };

struct Classification {
  Contents contents = Contents::empty;
  std::int64_t version = 0;  // meta.schema_version when ours
  bool has_records = false;
};

Classification classify(sqlite3* db, const std::string& path) {
  Classification c;
  bool has_meta = false, has_other = false;
  Statement tables(db, path, "SELECT name FROM sqlite_master WHERE type = 'table'");
  while (tables.step("reading the schema")) {
    std::string name = tables.text(0);
    if (name == "meta") {
      has_meta = true;
    } else if (name == "records") {
      c.has_records = true;
    } else if (name.rfind("sqlite_", 0) != 0) {
      has_other = true;
    }
  }
  if (!has_meta) {
    c.contents = has_other || c.has_records ? Contents::foreign : Contents::empty;
    return c;
  }
  c.contents = Contents::ours;
  Statement version(db, path, "SELECT value FROM meta WHERE key = 'schema_version'");
  if (version.step("reading the schema version")) c.version = version.int64(0);
  return c;
}

// Throws unless `c` describes a database this Kestrel can use (or an empty one).
void require_usable(const Classification& c, const std::string& path) {
  if (c.contents == Contents::foreign) {
    throw RecordsError(in_quotes(path) +
                       " is not a Kestrel records database (an SQLite database with other tables and no "
                       "Kestrel meta table): use another records path");
  }
  if (c.contents != Contents::ours) return;
  if (c.version > SqliteRecords::kSchemaVersion) {
    throw RecordsError(in_quotes(path) + " was written by a newer Kestrel (records schema version " +
                       std::to_string(c.version) + "; this Kestrel reads version " +
                       std::to_string(SqliteRecords::kSchemaVersion) + "): upgrade Kestrel to use it");
  }
  if (c.version < 1) {
    throw RecordsError(in_quotes(path) + " is not a usable Kestrel records database (missing or invalid "
                       "schema_version " + std::to_string(c.version) + "): use another records path");
  }
}

void exec(sqlite3* db, const std::string& path, const char* sql, const char* what) {
  int rc = sqlite3_exec(db, sql, nullptr, nullptr, nullptr);
  if (rc != SQLITE_OK) fail(db, rc, path, what);
}

// Version 4 -> 5, inside a transaction: the target's columns, filled in for the records
// there, once per distinct target text (parsed here, in C++). A text that does not parse
// is left NULL: reading that record reports it, as before.
void upgrade_from_4(sqlite3* db, const std::string& path) {
  exec(db, path, kUpgradeFrom4, "upgrading the schema from version 4 to 5");
  std::vector<std::string> targets;
  {
    Statement distinct(db, path, detail::kTargetsToFill);
    while (distinct.step("upgrading the schema from version 4 to 5")) targets.push_back(distinct.text(0));
  }
  Statement update(db, path, detail::kSetTargetColumns);
  for (const std::string& text : targets) {
    auto target = ops::TargetId::parse(text);
    if (!target) continue;
    update.reset();
    detail::bind_target(update, *target, 0);
    update.bind(7, text);
    update.step("upgrading the schema from version 4 to 5");
  }
  exec(db, path, "UPDATE meta SET value = '5' WHERE key = 'schema_version'",
       "upgrading the schema from version 4 to 5");
}

}  // namespace

struct SqliteRecords::Impl {
  Database db;
  OpenMode mode = OpenMode::create;
  std::string source = kRecordsCurrent;  // what queries read FROM
  std::optional<Statement> insert;  // prepared once, reused by add(); none when read-only

  // The rows of a SELECT of kColumns.
  std::vector<Record> read_all(Statement& s, const std::string& path, const char* what) const {
    std::vector<Record> out;
    while (s.step(what)) out.push_back(read_record(s, path));
    return out;
  }
  std::string select(const std::string& rest) const {
    return std::string("SELECT ") + kColumns + " FROM " + source + " " + rest;
  }
};

SqliteRecords::SqliteRecords(const std::string& path, OpenMode mode)
    : impl_(std::make_unique<Impl>()), path_(path) {
  namespace fs = std::filesystem;
  impl_->mode = mode;
  const bool writing = mode == OpenMode::create;
  bool special = path == ":memory:" || path.rfind("file:", 0) == 0;
  if (!special) {
    std::error_code ec;
    fs::path parent = fs::path(path).parent_path();
    if (!writing && !fs::exists(path, ec)) {
      throw RecordsError("no records database at " + in_quotes(path) +
                         " (check the path, or run kestrel tune to create one)");
    }
    if (!parent.empty() && !fs::is_directory(parent, ec)) {
      throw RecordsError("cannot open records database " + in_quotes(path) + ": directory " +
                         in_quotes(parent.string()) + " does not exist (create it, or use another path)");
    }
    if (fs::is_directory(path, ec)) {
      throw RecordsError("cannot open records database " + in_quotes(path) + ": it is a directory (give a file path)");
    }
  }

  // Read-only use opens read-write without CREATE (SQLite falls back to read-only for a
  // write-protected file) and then refuses writes with query_only: a read-only connection
  // could not remove the WAL files it creates when it closes. In a directory it cannot
  // write to, it reads the file as immutable instead (see probe_read).
  sqlite3* raw = nullptr;
  int flags = SQLITE_OPEN_READWRITE | (writing ? SQLITE_OPEN_CREATE : 0) | (special ? SQLITE_OPEN_URI : 0);
  int rc = sqlite3_open_v2(path.c_str(), &raw, flags, nullptr);
  impl_->db = Database(raw);
  if (rc != SQLITE_OK) fail(raw, rc, path, "opening");
  if (!writing && !special) {
    int probe = probe_read(raw);
    if ((probe & 0xff) == SQLITE_CANTOPEN || (probe & 0xff) == SQLITE_READONLY) {
      // The directory cannot hold the -wal/-shm files a WAL reader needs. With no
      // write-ahead log beside the file, the file alone holds every committed record (a
      // writer checkpoints and removes its log when it closes) and no writer can be active
      // (it could not create one either): read it as immutable, without locks or -shm.
      std::error_code ec;
      const std::string wal = path + "-wal";
      if (std::filesystem::exists(wal, ec) && std::filesystem::file_size(wal, ec) > 0) {
        throw RecordsError("cannot read records database " + in_quotes(path) + ": its write-ahead log " +
                           in_quotes(wal) + " needs a " + in_quotes(path + "-shm") +
                           " file that this directory cannot hold (read-only); open it once where the "
                           "directory is writable (kestrel best), or copy the three files elsewhere");
      }
      log::debug("records", path, ": the directory is read-only (", sqlite3_errstr(probe),
                 "); reading the file as immutable");
      raw = nullptr;
      rc = sqlite3_open_v2((file_uri(path) + "?immutable=1").c_str(), &raw, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI,
                           nullptr);
      impl_->db = Database(raw);
      if (rc != SQLITE_OK) fail(raw, rc, path, "opening read-only");
    }
  }
  sqlite3* db = impl_->db.get();
  if (writing && sqlite3_db_readonly(db, "main") == 1) {
    throw RecordsError("cannot open records database " + in_quotes(path) +
                       " for writing: check the permissions of the file and its directory");
  }
  sqlite3_busy_timeout(db, kBusyTimeoutMs);

  // Look before writing anything: a foreign or newer file is left untouched.
  Classification c = classify(db, path);
  require_usable(c, path);

  if (!writing) {
    exec(db, path, "PRAGMA query_only = ON", "opening read-only");
    if (c.contents != Contents::ours || !c.has_records) {
      throw RecordsError(in_quotes(path) + " holds no Kestrel records (an empty file or database): "
                         "check the path, or run kestrel tune to record into it");
    }
    if (c.version < kSchemaVersion) impl_->source = records_of_version(c.version);  // read as it is
    return;
  }

  // WAL: readers and the one writer do not block each other; a commit is one append to
  // the log. NORMAL: no fsync per commit; a killed process loses nothing committed (only
  // a power cut can lose the last commits).
  switch_to_wal(db, path);
  exec(db, path, "PRAGMA synchronous=NORMAL", "setting synchronous=NORMAL");

  if (c.contents == Contents::empty || !c.has_records || c.version < kSchemaVersion) {
    Transaction tx(db, path);
    // Another process may have created or upgraded the schema (or something else) meanwhile.
    Classification now = classify(db, path);
    require_usable(now, path);
    if (now.contents == Contents::ours && now.has_records && now.version == 1) {
      exec(db, path, upgrade_from_1().c_str(), "upgrading the schema from version 1 to 2");
    }
    if (now.contents == Contents::ours && now.has_records && now.version >= 1 && now.version <= 2) {
      exec(db, path, kUpgradeFrom2, "upgrading the schema from version 2 to 3");
    }
    if (now.contents == Contents::ours && now.has_records && now.version >= 1 && now.version <= 3) {
      exec(db, path, kUpgradeFrom3, "upgrading the schema from version 3 to 4");
    }
    if (now.contents == Contents::ours && now.has_records && now.version >= 1 && now.version <= 4) {
      upgrade_from_4(db, path);
    }
    exec(db, path, kSchema, "creating the schema");
    if (now.contents == Contents::empty || !now.has_records) {
      // A new records table has every column of this version (a meta table left without
      // one is brought to it too).
      std::string sql = "INSERT OR REPLACE INTO meta(key, value) VALUES('schema_version', '" +
                        std::to_string(kSchemaVersion) + "')";
      exec(db, path, sql.c_str(), "writing the schema version");
    }
    tx.commit();
  }
  impl_->insert.emplace(db, path_, kInsert);
}

SqliteRecords::~SqliteRecords() = default;

namespace {
[[noreturn]] void read_only(const std::string& path, const std::string& what) {
  throw RecordsError("records database " + in_quotes(path) + " was opened read-only: cannot " + what);
}
}  // namespace

std::int64_t SqliteRecords::add(const Record& record) {
  if (!impl_->insert) read_only(path_, "add a record");
  Statement& insert = *impl_->insert;
  insert.reset();
  bind_record(insert, record);
  insert.step("adding a record");  // autocommit: durable once this returns
  std::int64_t id = sqlite3_last_insert_rowid(impl_->db.get());
  insert.reset();
  return id;
}

std::vector<Record> SqliteRecords::find(const std::string& op, const ops::Params& workload, const ops::TargetId& target,
                                        const DeviceClass* device_class) const {
  std::string where = "WHERE op = ?1 AND workload = ?2 AND target = ?3";
  if (device_class != nullptr) where += " AND device_key = ?4 AND device_model = ?5 AND device_fingerprint = ?6";
  Statement s(impl_->db.get(), path_, impl_->select(where + " ORDER BY time_unix_ms, id"));
  s.bind(1, op);
  s.bind(2, ops::format_params(workload));
  s.bind(3, target.to_string());
  if (device_class != nullptr) {
    s.bind(4, device_class->key);
    s.bind(5, device_class->model);
    s.bind(6, device_class->fingerprint);
  }
  return impl_->read_all(s, path_, "finding records");
}

std::vector<Record> SqliteRecords::find_other_workloads(const std::string& op, const ops::Params& workload,
                                                        const ops::TargetId& target, std::size_t limit) const {
  // The newest `limit` records, returned oldest first.
  Statement s(impl_->db.get(), path_,
              "SELECT * FROM (" +
                  impl_->select("WHERE op = ?1 AND target = ?2 AND workload <> ?3"
                                " ORDER BY time_unix_ms DESC, id DESC LIMIT ?4") +
                  ") ORDER BY time_unix_ms, id");
  s.bind(1, op);
  s.bind(2, target.to_string());
  s.bind(3, ops::format_params(workload));
  constexpr auto kMax = static_cast<std::size_t>(std::numeric_limits<std::int64_t>::max());
  s.bind(4, static_cast<std::int64_t>(limit > kMax ? kMax : limit));
  return impl_->read_all(s, path_, "finding records of other workloads");
}

std::vector<Record> SqliteRecords::all(const std::string& op) const {
  Statement s(impl_->db.get(), path_,
              impl_->select(op.empty() ? "ORDER BY time_unix_ms, id" : "WHERE op = ?1 ORDER BY time_unix_ms, id"));
  if (!op.empty()) s.bind(1, op);
  return impl_->read_all(s, path_, "reading records");
}

std::vector<Best> SqliteRecords::best(const BestQuery& q) const {
  sqlite3* db = impl_->db.get();
  auto query = [&](const std::string& sql, const std::vector<std::string>& params,
                   const std::function<void(const detail::Row&)>& each) {
    Statement s(db, path_, sql);
    for (std::size_t i = 0; i < params.size(); ++i) s.bind(static_cast<int>(i + 1), params[i]);
    while (s.step("selecting the best records")) each(s);
  };
  return detail::select_best(query, impl_->source, q, path_);
}

std::size_t SqliteRecords::count() const {
  Statement s(impl_->db.get(), path_, std::string("SELECT COUNT(*) FROM ") + impl_->source);
  s.step("counting records");
  return static_cast<std::size_t>(s.int64(0));
}

void SqliteRecords::export_jsonl(std::ostream& out) const {
  Statement s(impl_->db.get(), path_, impl_->select("ORDER BY id"));
  while (s.step("exporting records")) detail::write_json_line(out, read_record(s, path_), path_);
}

std::size_t SqliteRecords::import_jsonl(std::istream& in) {
  if (!impl_->insert) read_only(path_, "import records");
  // Parse everything first: a malformed line adds nothing.
  std::vector<Record> records = detail::read_json_lines(in, path_);

  sqlite3* db = impl_->db.get();
  Transaction tx(db, path_);
  // Duplicates are judged against the records present before this import, so an export
  // that itself holds look-alike records still round-trips exactly.
  Statement max_id(db, path_, "SELECT COALESCE(MAX(id), 0) FROM records");
  max_id.step("importing records");
  std::int64_t before = max_id.int64(0);
  Statement present(db, path_,
                    "SELECT 1 FROM records WHERE session = ?1 AND time_unix_ms = ?2 AND config = ?3"
                    " AND op = ?4 AND workload = ?5 AND target = ?6 AND final_measurement = ?7"
                    " AND implementation = ?9 AND id <= ?8 LIMIT 1");
  Statement& insert = *impl_->insert;
  std::size_t added = 0;
  for (const Record& r : records) {
    present.reset();
    present.bind(1, r.session);
    present.bind(2, r.time_unix_ms);
    present.bind(3, ops::format_config(r.config));
    present.bind(4, r.op);
    present.bind(5, ops::format_params(r.workload));
    present.bind(6, r.target.to_string());
    present.bind(7, static_cast<std::int64_t>(r.final_measurement ? 1 : 0));
    present.bind(8, before);
    present.bind(9, r.implementation);
    if (present.step("importing records")) continue;
    insert.reset();
    bind_record(insert, r);
    insert.step("importing records");
    insert.reset();
    ++added;
  }
  tx.commit();
  return added;
}

}  // namespace kestrel::records
