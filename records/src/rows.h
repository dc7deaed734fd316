// What the two records backends (SQLite, PostgreSQL) share: the columns and the INSERT,
// a row <-> Record conversion (the stored text parsed back in one place), the JSON lines
// of export/import, and best(): the same SQL (placeholders ?N, rewritten to $N for
// PostgreSQL) and the same selection rules in C++, so both give identical answers.
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kestrel/records/json.h"
#include "kestrel/records/records.h"

namespace kestrel::records::detail {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Columns in the order read_record reads them.
constexpr const char* kColumns =
    "id, op, workload, target, device_key, device, device_fingerprint, config, status, message, "
    "round_seconds, cost, gflops, compile_ms, tool_version, time_unix_ms, session, final_measurement, "
    "device_model, is_default, implementation, machine, recommended, target_backend, target_triple, target_cpu, "
    "target_features, target_gpu_arch, target_gpu_index";
// The columns a version-4 table has: kColumns without those of version 5.
constexpr const char* kColumnsOfVersion4 =
    "id, op, workload, target, device_key, device, device_fingerprint, config, status, message, "
    "round_seconds, cost, gflops, compile_ms, tool_version, time_unix_ms, session, final_measurement, "
    "device_model, is_default, implementation, machine, recommended";
// The columns a version-3 table has: kColumns without those of version 4.
constexpr const char* kColumnsOfVersion3 =
    "id, op, workload, target, device_key, device, device_fingerprint, config, status, message, "
    "round_seconds, cost, gflops, compile_ms, tool_version, time_unix_ms, session, final_measurement, "
    "device_model, is_default, implementation";
// Version 4's columns as an older record has them (machine unknown, no recommendation):
// how a database of an older version opened read-only is read as it is.
constexpr const char* kVersion4Computed = "CAST(NULL AS TEXT) AS machine, 0 AS recommended";
// Version 5's columns as an older record has them (the target's fields unknown: read_record
// parses its text).
constexpr const char* kVersion5Computed =
    "CAST(NULL AS TEXT) AS target_backend, CAST(NULL AS TEXT) AS target_triple, CAST(NULL AS TEXT) AS target_cpu, "
    "CAST(NULL AS TEXT) AS target_features, CAST(NULL AS TEXT) AS target_gpu_arch, "
    "CAST(NULL AS INTEGER) AS target_gpu_index";
// The target's columns (version 5), in bind_target's order.
constexpr const char* kTargetColumns =
    "target_backend, target_triple, target_cpu, target_features, target_gpu_arch, target_gpu_index";
// The columns kInsert sets (kColumns without id), in bind_record's order.
constexpr const char* kInsertColumns =
    "op, workload, target, device_key, device, device_fingerprint, config, status, message, round_seconds, "
    "cost, gflops, compile_ms, tool_version, time_unix_ms, session, final_measurement, device_model, "
    "is_default, implementation, machine, recommended, target_backend, target_triple, target_cpu, target_features, "
    "target_gpu_arch, target_gpu_index";
constexpr int kInsertFields = 28;  // parameters of kInsert
constexpr int kTargetFields = 22;  // the parameter before the target's columns (23..28)
static_assert(std::string_view(kColumns).starts_with(kColumnsOfVersion4));
static_assert(std::string_view(kColumnsOfVersion4).starts_with(kColumnsOfVersion3));
static_assert(std::string_view(kColumns).ends_with(kTargetColumns));
static_assert(std::string_view(kColumns).substr(4) == kInsertColumns);

// A task and device class: the columns best() groups by.
constexpr const char* kGroup = "op, workload, target, device_key, device_model, device_fingerprint";

// Parameters ?1..?28 in bind_record's order.
constexpr const char* kInsert =
    "INSERT INTO records(op, workload, target, device_key, device, device_fingerprint, config, status, "
    "message, round_seconds, cost, gflops, compile_ms, tool_version, time_unix_ms, session, "
    "final_measurement, device_model, is_default, implementation, machine, recommended, target_backend, "
    "target_triple, target_cpu, target_features, target_gpu_arch, target_gpu_index) "
    "VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21, "
    "?22, ?23, ?24, ?25, ?26, ?27, ?28)";

// The upgrade to version 5: the target's columns (parameters ?1..?6, bind_target's order)
// of the records whose target text is ?7 and whose columns are not set yet.
constexpr const char* kSetTargetColumns =
    "UPDATE records SET target_backend = ?1, target_triple = ?2, target_cpu = ?3, target_features = ?4, "
    "target_gpu_arch = ?5, target_gpu_index = ?6 WHERE target = ?7 AND target_backend IS NULL";
// The target texts whose columns the upgrade to version 5 fills in.
constexpr const char* kTargetsToFill = "SELECT DISTINCT target FROM records WHERE target_backend IS NULL";

inline std::string in_quotes(const std::string& location) { return "'" + location + "'"; }

// What queries read FROM in a version-3 database opened read-only: its rows with version
// 4's columns computed. Its columns by name, so that a writer upgrading the database
// meanwhile changes nothing here.
inline std::string records_of_version3() {
  return std::string("(SELECT ") + kColumnsOfVersion3 + ", " + kVersion4Computed + ", " + kVersion5Computed +
         " FROM records) AS records";
}
// The same for a version-4 database: its rows with version 5's columns computed (NULL).
inline std::string records_of_version4() {
  return std::string("(SELECT ") + kColumnsOfVersion4 + ", " + kVersion5Computed + " FROM records) AS records";
}

std::string ok_text();
std::string round_seconds_json(const std::vector<double>& seconds);

// A machine state as a compact JSON object of its known fields ({"load1":..,"cpu_mhz":..,
// "temperature_c":..,"throttled":..,"busy_cpus":..}, in that order; throttled whenever
// any other is known); null when !machine.known().
nlohmann::ordered_json machine_json(const kernel::MachineState& machine);
// The same as stored text (the `machine` column); empty when !machine.known() (NULL).
std::string machine_text(const kernel::MachineState& machine);
// Parses machine_json's object (fields absent or null: unknown; others ignored); nullopt
// (and `why`) when it is not such an object.
std::optional<kernel::MachineState> parse_machine(const nlohmann::json& j, std::string& why);

// One result row of a SELECT of kColumns (or any columns), as a backend gives it.
class Row {
 public:
  virtual std::string text(int column) const = 0;
  virtual std::int64_t int64(int column) const = 0;
  virtual double real(int column, double if_null) const = 0;
  virtual bool is_null(int column) const = 0;

 protected:
  ~Row() = default;
};

// Reads a row selected with kColumns: the target from its columns, or where they are NULL
// (a record written before version 5) from its text. Throws RecordsError naming the
// record and `location` when stored text does not parse.
Record read_record(const Row& row, const std::string& location);

// Binds a target's fields as parameters first + 1..first + 6 (kTargetColumns' order).
template <typename Binder>
void bind_target(Binder& s, const ops::TargetId& t, int first) {
  s.bind(first + 1, std::string(ops::to_string(t.backend)));
  s.bind(first + 2, t.triple);
  s.bind(first + 3, t.cpu);
  s.bind(first + 4, t.features);
  s.bind(first + 5, t.gpu_arch);
  s.bind(first + 6, static_cast<std::int64_t>(t.gpu_index));
}

// Binds a record's fields as parameters 1..28 of kInsert. `Binder` has bind(int,
// std::string), bind(int, std::int64_t), bind(int, double) and bind_null(int).
template <typename Binder>
void bind_record(Binder& s, const Record& r) {
  s.bind(1, r.op);
  s.bind(2, ops::format_params(r.workload));
  s.bind(3, r.target.to_string());
  s.bind(4, r.device_class.key);
  s.bind(5, r.device);
  s.bind(6, r.device_class.fingerprint);
  s.bind(7, ops::format_config(r.config));
  s.bind(8, std::string(kernel::to_string(r.status)));
  s.bind(9, r.message);
  s.bind(10, round_seconds_json(r.round_seconds));
  if (r.cost == kInf || std::isnan(r.cost)) {
    s.bind_null(11);  // +infinity: not ok
  } else {
    s.bind(11, r.cost);
  }
  s.bind(12, r.gflops);
  s.bind(13, r.compile_ms);
  s.bind(14, r.tool_version);
  s.bind(15, r.time_unix_ms);
  s.bind(16, r.session);
  s.bind(17, static_cast<std::int64_t>(r.final_measurement ? 1 : 0));
  s.bind(18, r.device_class.model);
  s.bind(19, static_cast<std::int64_t>(r.is_default ? 1 : 0));
  s.bind(20, r.implementation);
  if (std::string machine = machine_text(r.machine); machine.empty()) {
    s.bind_null(21);  // unknown
  } else {
    s.bind(21, machine);
  }
  s.bind(22, static_cast<std::int64_t>(r.recommended));
  bind_target(s, r.target, kTargetFields);  // 23..28, beside its text (3)
}

// --- JSON lines (a record's form: records::to_json, json.h) ---
// Parses line `line` of an import; throws RecordsError naming the line.
Record from_json_line(const std::string& text, std::size_t line);
// Reads every non-blank line of `in` (nothing is added when one is malformed).
std::vector<Record> read_json_lines(std::istream& in, const std::string& location);
// Writes one record as a line; throws RecordsError when `out` fails.
void write_json_line(std::ostream& out, const Record& r, const std::string& location);

// --- best() ---

// Runs `sql` (placeholders ?1..?N, every parameter text) and calls `each` per row.
using Query = std::function<void(const std::string& sql, const std::vector<std::string>& params,
                                 const std::function<void(const Row&)>& each)>;

// best(q) of a store: the queries over `source` (what the store reads FROM), then the
// selection rules of RecordStore::best.
std::vector<Best> select_best(const Query& query, const std::string& source, const BestQuery& q,
                              const std::string& location);

}  // namespace kestrel::records::detail
