// The records database: every measurement of every tuning session, failures included,
// committed as it arrives (SQLite in WAL mode), so a killed session loses nothing and
// the next one resumes. Schema versioned; a file from a newer Kestrel is refused.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace kestrel::tuner {

// A database that cannot be used: not a database, newer schema, I/O error. The message
// names the file and says what to do.
struct RecordsError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Record {
  std::int64_t id = 0;               // assigned by the database
  std::string op;                    // "gemm"
  std::string workload;              // ops::format_params, e.g. "K=512,M=512,N=512"
  std::string target;                // host::Target::to_string(), e.g. "x86_64-linux-gnu (znver4)"
  std::string device_key;            // pool key
  std::string device;                // device name
  std::string device_fingerprint;    // triple, CPU model, cores: identifies the hardware
  std::string config;                // ops::format_config
  std::string status;                // host::to_string(Status): "ok", "wrong answer", ...
  std::string message;
  std::vector<double> round_seconds;
  double cost = 0;                   // median of round_seconds; +inf unless ok
  double gflops = 0;
  double compile_ms = 0;
  std::string tool_version;
  std::int64_t time_unix_ms = 0;
  std::string session;               // id of the tuning session that measured it
  bool final_measurement = false;    // re-measurement of a best config at the end of a session
};

// The best record of one (op, workload, target).
struct Best {
  std::string op, workload, target;
  Record record;
  std::size_t trials = 0;  // records of that (op, workload, target)
};

class RecordsDb {
 public:
  static constexpr int kSchemaVersion = 1;

  // Opens or creates the database. Throws RecordsError for a file that is not a
  // database, has a newer schema, or cannot be opened.
  explicit RecordsDb(const std::string& path);
  ~RecordsDb();
  RecordsDb(const RecordsDb&) = delete;
  RecordsDb& operator=(const RecordsDb&) = delete;

  // Inserts and commits at once; returns the new id.
  std::int64_t add(const Record& record);
  // Records of one (op, workload, target), oldest first.
  std::vector<Record> find(const std::string& op, const std::string& workload, const std::string& target) const;
  // Records of an op on a target for other workloads (transfer), at most `limit`.
  std::vector<Record> find_other_workloads(const std::string& op, const std::string& workload,
                                           const std::string& target, std::size_t limit = 5000) const;
  // Best ok record per (op, workload, target); final re-measurements preferred.
  std::vector<Best> best() const;
  std::size_t count() const;

  // One JSON object per line; import skips records already present (same session,
  // config, time) and returns how many it added. Throws RecordsError on a malformed
  // line, naming its number.
  void export_jsonl(std::ostream& out) const;
  std::size_t import_jsonl(std::istream& in);

  const std::string& path() const { return path_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::string path_;
};

}  // namespace kestrel::tuner
