// The records backends' shared code: row <-> Record, JSON lines, best() (records_rows.h).
#include "rows.h"

#include <istream>
#include <map>
#include <optional>
#include <ostream>
#include <tuple>
#include <utility>

namespace kestrel::records::detail {
namespace {

std::vector<double> parse_round_seconds(const nlohmann::json& array) {
  std::vector<double> seconds;
  seconds.reserve(array.size());
  for (const auto& value : array) {
    // Non-finite values are written as null by the JSON library.
    seconds.push_back(value.is_null() ? kInf : value.get<double>());
  }
  return seconds;
}

// Parses stored workload or configuration text; nullopt (and `why`) when malformed.
std::optional<ops::Config> parse_map(const std::string& text, std::string& why) {
  try {
    return ops::parse_pairs(text);
  } catch (const ops::OpError& e) {
    why = e.what();
    return std::nullopt;
  }
}

[[noreturn]] void bad_line(std::size_t line, const std::string& why) {
  throw RecordsError("records import: line " + std::to_string(line) + ": " + why);
}

class LineReader {
 public:
  LineReader(const nlohmann::json& j, std::size_t line) : j_(j), line_(line) {}

  const nlohmann::json* field(const char* name, bool required) const {
    auto it = j_.find(name);
    if (it == j_.end()) {
      if (required) bad_line(line_, std::string("missing required field '") + name + "'");
      return nullptr;
    }
    return &*it;
  }
  std::string string(const char* name, bool required) const {
    const auto* v = field(name, required);
    if (v == nullptr) return {};
    if (!v->is_string()) bad_line(line_, std::string("field '") + name + "' must be a string");
    return v->get<std::string>();
  }
  // A number; null stands for `if_null` (how non-finite values are exported).
  double number(const char* name, bool required, double if_null) const {
    const auto* v = field(name, required);
    if (v == nullptr || v->is_null()) return v == nullptr ? 0.0 : if_null;
    if (!v->is_number()) bad_line(line_, std::string("field '") + name + "' must be a number or null");
    return v->get<double>();
  }
  std::int64_t integer(const char* name, bool required) const {
    const auto* v = field(name, required);
    if (v == nullptr) return 0;
    if (!v->is_number_integer()) bad_line(line_, std::string("field '") + name + "' must be an integer");
    return v->get<std::int64_t>();
  }
  bool boolean(const char* name, bool required) const {
    const auto* v = field(name, required);
    if (v == nullptr) return false;
    if (!v->is_boolean()) bad_line(line_, std::string("field '") + name + "' must be true or false");
    return v->get<bool>();
  }
  std::vector<double> seconds(const char* name, bool required) const {
    const auto* v = field(name, required);
    if (v == nullptr) return {};
    if (!v->is_array()) bad_line(line_, std::string("field '") + name + "' must be an array of numbers");
    for (const auto& x : *v) {
      if (!x.is_number() && !x.is_null()) {
        bad_line(line_, std::string("field '") + name + "' must be an array of numbers");
      }
    }
    return parse_round_seconds(*v);
  }

 private:
  const nlohmann::json& j_;
  std::size_t line_;
};

// The target of a row from its columns (kTargetColumns from `first` on).
template <typename Unreadable>
ops::TargetId read_target(const Row& row, int first, const Unreadable& unreadable) {
  ops::TargetId t;
  const std::string backend = row.text(first);
  bool known = false;
  for (ops::Backend b : {ops::Backend::cpu, ops::Backend::cuda, ops::Backend::opencl}) {
    if (ops::to_string(b) == backend) {
      t.backend = b;
      known = true;
    }
  }
  if (!known) throw unreadable("target_backend", "'" + backend + "'");
  t.triple = row.text(first + 1);
  t.cpu = row.text(first + 2);
  t.features = row.text(first + 3);
  t.gpu_arch = row.text(first + 4);
  const std::int64_t index = row.int64(first + 5);
  if (index < 0 || index > std::numeric_limits<unsigned>::max()) {
    throw unreadable("target_gpu_index", std::to_string(index));
  }
  t.gpu_index = static_cast<unsigned>(index);
  return t;
}

}  // namespace

std::string round_seconds_json(const std::vector<double>& seconds) {
  return nlohmann::json(seconds).dump();
}

std::string ok_text() { return std::string(kernel::to_string(kernel::Status::ok)); }

nlohmann::ordered_json machine_json(const kernel::MachineState& m) {
  if (!m.known()) return nullptr;
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  auto known = [&](const char* name, double value) {
    if (std::isfinite(value) && value >= 0) j[name] = value;
  };
  known("load1", m.load1);
  known("cpu_mhz", m.cpu_mhz);
  known("temperature_c", m.temperature_c);
  j["throttled"] = m.throttled;
  known("busy_cpus", m.busy_cpus);
  return j;
}

std::string machine_text(const kernel::MachineState& machine) {
  nlohmann::ordered_json j = machine_json(machine);
  return j.is_null() ? std::string() : j.dump();
}

std::optional<kernel::MachineState> parse_machine(const nlohmann::json& j, std::string& why) {
  if (!j.is_object()) {
    why = "expected a JSON object";
    return std::nullopt;
  }
  kernel::MachineState m;
  for (auto [name, field] : {std::pair{"load1", &m.load1}, std::pair{"cpu_mhz", &m.cpu_mhz},
                             std::pair{"temperature_c", &m.temperature_c}, std::pair{"busy_cpus", &m.busy_cpus}}) {
    auto it = j.find(name);
    if (it == j.end() || it->is_null()) continue;  // unknown
    if (!it->is_number()) {
      why = std::string("'") + name + "' must be a number or null";
      return std::nullopt;
    }
    *field = it->get<double>();
  }
  if (auto it = j.find("throttled"); it != j.end() && !it->is_null()) {
    if (!it->is_boolean()) {
      why = "'throttled' must be true or false";
      return std::nullopt;
    }
    m.throttled = it->get<bool>();
  }
  return m;
}

// Reads a row selected with kColumns.
Record read_record(const Row& row, const std::string& path) {
  Record r;
  r.id = row.int64(0);
  auto unreadable = [&](const std::string& field, const std::string& why) {
    return RecordsError("records database " + in_quotes(path) + ": record " + std::to_string(r.id) +
                        " has an unreadable " + field + " (" + why + ")");
  };
  r.op = row.text(1);
  std::string why;
  auto workload = parse_map(row.text(2), why);
  if (!workload) throw unreadable("workload", why);
  r.workload = std::move(*workload);
  if (row.is_null(kTargetFields + 1)) {  // written before version 5: its text
    auto target = ops::TargetId::parse(row.text(3));
    if (!target) throw unreadable("target", "'" + row.text(3) + "'");
    r.target = std::move(*target);
  } else {
    r.target = read_target(row, kTargetFields + 1, unreadable);
  }
  r.device_class.key = row.text(4);
  r.device = row.text(5);
  r.device_class.fingerprint = row.text(6);
  auto config = parse_map(row.text(7), why);
  if (!config) throw unreadable("config", why);
  r.config = std::move(*config);
  if (!kernel::parse_status(row.text(8), r.status)) throw unreadable("status", "'" + row.text(8) + "'");
  r.message = row.text(9);
  try {
    r.round_seconds = parse_round_seconds(nlohmann::json::parse(row.text(10)));
  } catch (const nlohmann::json::exception& e) {
    throw unreadable("round_seconds", e.what());
  }
  r.cost = row.real(11, kInf);
  r.gflops = row.real(12, std::numeric_limits<double>::quiet_NaN());
  r.compile_ms = row.real(13, std::numeric_limits<double>::quiet_NaN());
  r.tool_version = row.text(14);
  r.time_unix_ms = row.int64(15);
  r.session = row.text(16);
  r.final_measurement = row.int64(17) != 0;
  r.device_class.model = row.text(18);
  r.is_default = row.int64(19) != 0;
  r.implementation = row.text(20);
  if (const std::string machine = row.text(21); !machine.empty()) {  // NULL: unknown
    std::optional<kernel::MachineState> parsed;
    try {
      parsed = parse_machine(nlohmann::json::parse(machine), why);
    } catch (const nlohmann::json::exception& e) {
      why = e.what();
    }
    if (!parsed) throw unreadable("machine", why);
    r.machine = *parsed;
  }
  r.recommended = static_cast<unsigned>(row.int64(22));
  return r;
}

Record from_json_line(const std::string& text, std::size_t line) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    bad_line(line, std::string("malformed JSON (") + e.what() + ")");
  }
  if (!j.is_object()) bad_line(line, "expected a JSON object");
  LineReader in(j, line);
  constexpr bool required = true, optional = false;
  Record r;
  r.op = in.string("op", required);
  const std::string workload_text = in.string("workload", required);
  const std::string target_text = in.string("target", required);
  auto target = ops::TargetId::parse(target_text);
  if (!target) bad_line(line, "'target' is not a target such as \"x86_64-linux-gnu (znver4)\": '" + target_text + "'");
  r.target = std::move(*target);
  r.device_class.key = in.string("device_key", optional);
  r.device_class.model = in.string("device_model", optional);  // absent before schema version 2
  r.device = in.string("device", optional);
  r.device_class.fingerprint = in.string("device_fingerprint", optional);
  const std::string config_text = in.string("config", required);
  const std::string status = in.string("status", required);
  r.message = in.string("message", optional);
  r.round_seconds = in.seconds("round_seconds", required);
  r.cost = in.number("cost", required, kInf);
  r.gflops = in.number("gflops", optional, std::numeric_limits<double>::quiet_NaN());
  r.compile_ms = in.number("compile_ms", optional, std::numeric_limits<double>::quiet_NaN());
  r.tool_version = in.string("tool_version", optional);
  r.time_unix_ms = in.integer("time_unix_ms", required);
  r.session = in.string("session", required);
  r.final_measurement = in.boolean("final_measurement", optional);
  r.is_default = in.boolean("is_default", optional);
  r.implementation = in.string("implementation", optional);  // absent before schema version 3
  if (r.implementation.empty()) r.implementation = kKestrelImplementation;
  // absent before schema version 4
  if (const auto* machine = in.field("machine", optional); machine != nullptr && !machine->is_null()) {
    std::string why;
    auto parsed = parse_machine(*machine, why);
    if (!parsed) bad_line(line, "field 'machine': " + why);
    r.machine = *parsed;
  }
  const std::int64_t recommended = in.integer("recommended", optional);
  if (recommended < 0 || recommended > std::numeric_limits<unsigned>::max()) {
    bad_line(line, "field 'recommended' must be a small non-negative integer (flags)");
  }
  r.recommended = static_cast<unsigned>(recommended);
  // The typed fields, once every field is known to be there.
  std::string why;
  auto workload = parse_map(workload_text, why);
  if (!workload) bad_line(line, "field 'workload': " + why);
  r.workload = std::move(*workload);
  auto config = parse_map(config_text, why);
  if (!config) bad_line(line, "field 'config': " + why);
  r.config = std::move(*config);
  if (!kernel::parse_status(status, r.status)) bad_line(line, "field 'status': unknown status '" + status + "'");
  return r;
}

std::vector<Record> read_json_lines(std::istream& in, const std::string& location) {
  std::vector<Record> records;
  std::string text;
  for (std::size_t line = 1; std::getline(in, text); ++line) {
    if (text.find_first_not_of(" \t\r") == std::string::npos) continue;
    records.push_back(from_json_line(text, line));
  }
  if (in.bad()) throw RecordsError("records import into " + in_quotes(location) + ": reading the input failed");
  return records;
}

void write_json_line(std::ostream& out, const Record& r, const std::string& location) {
  // Invalid UTF-8 (e.g. in a compiler message) is replaced rather than failing the export.
  out << to_json(r).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << '\n';
  if (!out) throw RecordsError("records export from " + in_quotes(location) + ": writing the output failed");
}

namespace {

// What the queries found for one task on one device class.
struct Found {
  std::size_t trials = 0;
  std::optional<Record> best_ok;       // lowest cost, final re-measurements preferred
  std::optional<Record> best_default;  // the same among the default configuration's records
  std::optional<Record> best_own;      // the same among Kestrel's own kernels' records
  std::vector<Record> finals;          // ok final re-measurements, oldest first
};

// The selection rules of RecordStore::best over one group; nullopt without an ok record.
std::optional<Best> decide(Found& found) {
  if (!found.best_ok) return std::nullopt;
  Best b;
  b.record = std::move(*found.best_ok);
  b.default_record = std::move(found.best_default);
  // The newest session whose final round re-measured the default decides, within that
  // round: the configurations ran interleaved, under the same conditions.
  std::string round;
  for (const Record& r : found.finals) {
    if (r.is_default) round = r.session;  // finals are oldest first: the last one is the newest
  }
  std::optional<Record> own = std::move(found.best_own);
  if (!round.empty()) {
    const Record* winner = nullptr;
    const Record* own_winner = nullptr;
    const Record* baseline = nullptr;
    // What the round's statistics chose (schema version 4): kRecommended, and
    // kOwnRecommended among Kestrel's own kernels. Rounds recorded before have no flags.
    const Record* recommended = nullptr;
    const Record* own_recommended = nullptr;
    auto better = [](const Record& r, const Record* than) {
      return than == nullptr || r.cost < than->cost || (r.cost == than->cost && r.is_default && !than->is_default);
    };
    for (const Record& r : found.finals) {
      if (r.session != round) continue;
      if (r.is_default && (baseline == nullptr || r.id > baseline->id)) baseline = &r;
      if (better(r, winner)) winner = &r;
      if (r.implementation == kKestrelImplementation && better(r, own_winner)) own_winner = &r;
      if ((r.recommended & kRecommended) != 0 && better(r, recommended)) recommended = &r;
      if ((r.recommended & kOwnRecommended) != 0 && r.implementation == kKestrelImplementation &&
          better(r, own_recommended)) {
        own_recommended = &r;
      }
    }
    // The round's choice over the lowest median: the statistics keep the default unless a
    // configuration is faster with confidence. Without one, by cost, as before.
    if (recommended) winner = recommended;
    if (own_recommended) own_winner = own_recommended;
    b.record = *winner;
    b.default_record = *baseline;
    if (own_winner) own = *own_winner;
  }
  if (b.record.implementation != kKestrelImplementation) b.own_record = std::move(own);
  b.default_is_best = b.record.is_default;
  b.op = b.record.op;
  b.workload = b.record.workload;
  b.target = b.record.target;
  b.device_class = b.record.device_class;
  b.trials = found.trials;
  return b;
}

// " AND op = ?k ..." for the fields `q` sets, parameters from ?first on.
std::string filter_of(const BestQuery& q, std::vector<std::string>& params) {
  std::string sql;
  auto add = [&](const char* column, std::string value) {
    params.push_back(std::move(value));
    sql += std::string(" AND ") + column + " = ?" + std::to_string(params.size());
  };
  if (q.op) add("op", *q.op);
  if (q.workload) add("workload", ops::format_params(*q.workload));
  if (q.target) add("target", q.target->to_string());
  if (q.device_class) {
    add("device_key", q.device_class->key);
    add("device_model", q.device_class->model);
    add("device_fingerprint", q.device_class->fingerprint);
  }
  return sql;
}

}  // namespace

std::vector<Best> select_best(const Query& query, const std::string& source, const BestQuery& q,
                              const std::string& location) {
  // (op, workload text, target, key, model, fingerprint): a task on a device class.
  using Group = std::tuple<std::string, std::string, std::string, std::string, std::string, std::string>;
  auto group_of = [](const Record& r) {
    return Group{r.op, ops::format_params(r.workload), r.target.to_string(), r.device_class.key, r.device_class.model,
                 r.device_class.fingerprint};
  };
  std::map<Group, Found> groups;
  std::vector<std::string> params;
  const std::string filter = filter_of(q, params);
  query(std::string("SELECT ") + kGroup + ", COUNT(*) FROM " + source + " WHERE 1 = 1" + filter + " GROUP BY " +
            kGroup,
        params, [&](const Row& row) {
          Group g{row.text(0), row.text(1), row.text(2), row.text(3), row.text(4), row.text(5)};
          groups[g].trials = static_cast<std::size_t>(row.int64(6));
        });
  std::vector<std::string> with_ok = params;
  with_ok.push_back(ok_text());
  const std::string ok = "?" + std::to_string(with_ok.size());
  // The first ok record of each group in the order final first, cost, id; among all
  // records, among the default configuration's, and among Kestrel's own kernels'.
  enum class Among { all, defaults, own };
  for (Among among : {Among::all, Among::defaults, Among::own}) {
    const char* only = among == Among::defaults ? " AND is_default = 1"
                       : among == Among::own    ? " AND implementation = 'kestrel'"
                                                : "";
    query(std::string("SELECT * FROM (SELECT ") + kColumns + ", ROW_NUMBER() OVER (PARTITION BY " + kGroup +
              " ORDER BY final_measurement DESC, cost ASC, id ASC) AS position FROM " + source +
              " WHERE status = " + ok + " AND cost IS NOT NULL" + filter + only + ") AS ranked WHERE position = 1",
          with_ok, [&](const Row& row) {
            Record r = read_record(row, location);
            Found& f = groups[group_of(r)];
            (among == Among::defaults ? f.best_default : among == Among::own ? f.best_own : f.best_ok) = std::move(r);
          });
  }
  query(std::string("SELECT ") + kColumns + " FROM " + source + " WHERE final_measurement = 1 AND status = " + ok +
            " AND cost IS NOT NULL" + filter + " ORDER BY id",
        with_ok, [&](const Row& row) {
          Record r = read_record(row, location);
          groups[group_of(r)].finals.push_back(std::move(r));
        });

  std::vector<Best> out;
  for (auto& [group, found] : groups) {
    if (auto b = decide(found)) out.push_back(std::move(*b));
  }
  return out;
}

}  // namespace kestrel::records::detail

namespace kestrel::records {

nlohmann::ordered_json to_json(const Record& r) {
  nlohmann::ordered_json j;
  j["id"] = r.id;
  j["op"] = r.op;
  j["workload"] = ops::format_params(r.workload);
  j["target"] = r.target.to_string();
  j["device_key"] = r.device_class.key;
  j["device_model"] = r.device_class.model;
  j["device"] = r.device;
  j["device_fingerprint"] = r.device_class.fingerprint;
  j["config"] = ops::format_config(r.config);
  j["status"] = std::string(kernel::to_string(r.status));
  j["message"] = r.message;
  j["round_seconds"] = r.round_seconds;
  j["cost"] = std::isfinite(r.cost) ? nlohmann::ordered_json(r.cost) : nlohmann::ordered_json(nullptr);
  j["gflops"] = r.gflops;            // non-finite: null
  j["compile_ms"] = r.compile_ms;    // non-finite: null
  j["tool_version"] = r.tool_version;
  j["time_unix_ms"] = r.time_unix_ms;
  j["session"] = r.session;
  j["final_measurement"] = r.final_measurement;
  j["is_default"] = r.is_default;
  j["implementation"] = r.implementation;
  j["machine"] = detail::machine_json(r.machine);  // null: unknown
  j["recommended"] = r.recommended;
  return j;
}

}  // namespace kestrel::records
