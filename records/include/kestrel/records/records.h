// The records: every measurement of every tuning session, failures included, typed
// (workload, configuration and status are values, not text), behind a small database
// interface with two implementations: an SQLite file (WAL mode) and a PostgreSQL
// database (pg_records.h) that several hosts share. Both commit each record as it
// arrives, so a killed session loses nothing and the next one resumes. Schema versioned;
// a database from a newer Kestrel is refused.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <limits>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "kestrel/kernel/machine_state.h"
#include "kestrel/kernel/status.h"
#include "kestrel/ops/op.h"
#include "kestrel/records/device_class.h"
#include "kestrel/ops/target_id.h"

namespace kestrel::records {

// A database that cannot be used: missing (read-only commands), not a database, newer
// schema, I/O error. The message names the file and says what to do.
struct RecordsError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Record {
  std::int64_t id = 0;               // assigned by the database
  std::string op;                    // "gemm"
  ops::Params workload;              // stored as ops::format_params text
  ops::TargetId target;              // stored as its text, e.g. "x86_64-linux-gnu (znver4)" (the key of
                                     // queries), and since schema version 5 as its fields beside it
  DeviceClass device_class;          // key, model, fingerprint of the device that measured it
  std::string device;                // device name
  ops::Config config;                // stored as ops::format_config text
  kernel::Status status = kernel::Status::ok;  // stored as kernel::to_string text
  std::string message;
  std::vector<double> round_seconds;
  double cost = std::numeric_limits<double>::infinity();  // median of round_seconds; +inf unless ok
  double gflops = 0;
  double compile_ms = 0;
  std::string tool_version;
  std::int64_t time_unix_ms = 0;
  std::string session;               // id of the tuning session that measured it
  // Part of the session's final re-measurement round (the finalists and the default
  // configuration, measured again, interleaved, with more repeats).
  bool final_measurement = false;
  // The configuration is the op's default_config(workload), set by the writer (best()
  // has no op to ask). The default's record in a final round is the baseline best()
  // must beat.
  bool is_default = false;
  // Who made the kernel: kKestrelImplementation, or the vendor library whose shim was
  // measured (its config is then empty: not a point of the op's space, never used for
  // resuming a search or training a cost model).
  std::string implementation = kKestrelImplementation;
  // The device's machine when the measurement was taken (load, CPU frequency,
  // temperature, busy CPUs; negative where the board does not expose it). Schema
  // version 4; unknown in older records.
  kernel::MachineState machine;
  // Final rounds only: what the round's statistics chose (tuning_loop.h). kRecommended:
  // the round's recommendation (faster than the default with confidence, or the default
  // itself; vendors included); kOwnRecommended: the same among Kestrel's own kernels.
  // best() takes the newest round's choice instead of the lowest median. Schema version 4;
  // 0 in older records (their rounds decide by cost, as before).
  unsigned recommended = 0;

  bool ok() const { return status == kernel::Status::ok; }
};

inline constexpr unsigned kRecommended = 1;
inline constexpr unsigned kOwnRecommended = 2;

// The best record of one (op, workload, target, device class).
struct Best {
  std::string op;
  ops::Params workload;
  ops::TargetId target;
  DeviceClass device_class;
  Record record;
  std::size_t trials = 0;               // records of that (op, workload, target, device class)
  std::optional<Record> default_record;  // the default configuration's record that `record` was compared with
  bool default_is_best = false;         // `record` is the default configuration's
  // When `record` is a vendor library's: the best of Kestrel's own kernels, chosen the same
  // way among them (none when Kestrel has no ok record), what a Kestrel kernel is built from.
  std::optional<Record> own_record;
  // The best record of Kestrel's own kernels: `record` or `own_record`.
  const Record* own() const {
    return record.implementation == kKestrelImplementation ? &record : own_record ? &*own_record : nullptr;
  }
};

// Which tasks best(BestQuery) answers for: every field set must match (all unset: every
// task, as best()).
struct BestQuery {
  std::optional<std::string> op;
  std::optional<ops::Params> workload;
  std::optional<ops::TargetId> target;
  std::optional<DeviceClass> device_class;
};

enum class OpenMode {
  create,    // opens or creates; upgrades an older schema in place
  existing,  // read-only: never creates a file, never changes one (read-only commands)
};

// The small database interface.
class RecordStore {
 public:
  virtual ~RecordStore() = default;

  // Inserts and commits at once; returns the new id. Throws RecordsError (an I/O error,
  // a store opened read-only).
  virtual std::int64_t add(const Record& record) = 0;
  // Records of one task, oldest first; with a device class, only those measured on that
  // class (key, model and fingerprint all equal).
  virtual std::vector<Record> find(const std::string& op, const ops::Params& workload, const ops::TargetId& target,
                                   const DeviceClass* device_class = nullptr) const = 0;
  // Records of an op on a target for other workloads (transfer), the newest `limit`,
  // oldest first.
  virtual std::vector<Record> find_other_workloads(const std::string& op, const ops::Params& workload,
                                                   const ops::TargetId& target, std::size_t limit = 5000) const = 0;
  // The best valid configuration per (op, workload, target, device class), ordered by
  // those. Never a configuration that measured slower than the op's default in the same
  // final round: when a session's final round holds an ok record of the default
  // configuration (is_default), the newest such round decides among its ok records: its
  // kRecommended record when it has one (and its kOwnRecommended one as Best::own_record),
  // else by cost (the default wins ties; rounds recorded before schema version 4).
  // Otherwise the lowest-cost ok record, final re-measurements preferred. Vendor
  // libraries' records compete like any other: the fastest implementation wins. Tasks
  // with no ok record have no entry.
  std::vector<Best> best() const { return best(BestQuery{}); }
  // The same for the tasks `q` selects, from an index on (op, workload, target): what
  // `kestrel best --op --shape` asks for one task of a large database.
  virtual std::vector<Best> best(const BestQuery& q) const = 0;
  // Every record of `op` (every op when empty), any workload, target and class, oldest
  // first: what datasets and cross-workload models read.
  virtual std::vector<Record> all(const std::string& op = "") const = 0;
  virtual std::size_t count() const = 0;

  // One JSON object per line; import skips records already present (same session,
  // config, time) and returns how many it added. Throws RecordsError on a malformed
  // line, naming its number; a refused import adds nothing.
  virtual void export_jsonl(std::ostream& out) const = 0;
  virtual std::size_t import_jsonl(std::istream& in) = 0;

  // Where the records are (the file path, or the URI without its password), for messages.
  virtual const std::string& location() const = 0;
};

// Opens the records at `path`: a PostgreSQL URI ("postgresql://..." or "postgres://...",
// see is_postgres_uri) gives PgRecords (pg_records.h), anything else an SQLite file
// (SqliteRecords, sqlite_records.h). Throws RecordsError
// for a database that is not a records database, has a newer schema or cannot be opened
// or reached, and in OpenMode::existing where there are no records ("no records database
// at ...").
std::unique_ptr<RecordStore> open_records(const std::string& path, OpenMode mode = OpenMode::create);

// Whether `location` is a PostgreSQL URI rather than a file path.
bool is_postgres_uri(const std::string& location);

// `location` as messages show it: a URI without its password (user:PASSWORD@ and a
// password=... parameter removed); a file path as it is.
std::string without_password(const std::string& location);

// Whether there is a records database at `location` that OpenMode::existing would open
// (a file that exists; a PostgreSQL database with Kestrel's tables). Throws RecordsError
// when a PostgreSQL server cannot be reached.
bool records_exist(const std::string& location);

}  // namespace kestrel::records
