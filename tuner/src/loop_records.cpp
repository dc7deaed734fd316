// Reading and writing the records of a tuning loop (see loop_records.h).
#include "loop_records.h"

#include <chrono>
#include <cmath>
#include <limits>

#include "kestrel/base/version.h"

namespace kestrel::tuner::loop_records {
namespace {

// Parses "A=1,B=2" back into a map; empty on malformed text.
std::map<std::string, std::int64_t> parse_pairs(const std::string& text) {
  std::map<std::string, std::int64_t> out;
  std::size_t start = 0;
  while (start < text.size()) {
    auto end = text.find(',', start);
    if (end == std::string::npos) end = text.size();
    std::string item = text.substr(start, end - start);
    auto eq = item.find('=');
    if (eq == std::string::npos) return {};
    try {
      out[item.substr(0, eq)] = std::stoll(item.substr(eq + 1));
    } catch (const std::exception&) {
      return {};
    }
    start = end + 1;
  }
  return out;
}

std::int64_t now_unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

std::vector<Past> of_task(const RecordsDb& db, const Task& task) {
  std::vector<Past> out;
  for (const Record& r : db.find(task.op_name(), task.workload(), task.target_name())) {
    Past p;
    p.config = parse_pairs(r.config);
    if (!kernel::parse_status(r.status, p.status)) continue;
    p.cost = p.ok() ? r.cost : std::numeric_limits<double>::infinity();
    p.final_measurement = r.final_measurement;
    out.push_back(std::move(p));
  }
  return out;
}

std::vector<Other> of_other_workloads(const RecordsDb& db, const Task& task) {
  std::vector<Other> out;
  for (const Record& r : db.find_other_workloads(task.op_name(), task.workload(), task.target_name())) {
    Other o;
    o.params = parse_pairs(r.workload);
    o.config = parse_pairs(r.config);
    if (o.params.empty() || o.config.empty()) continue;
    o.ok = r.status == kernel::to_string(kernel::Status::ok);
    o.cost = o.ok ? r.cost : std::numeric_limits<double>::infinity();
    out.push_back(std::move(o));
  }
  return out;
}

void add(RecordsDb& db, const Task& task, const Evaluation& e, const Context& context, bool final_measurement,
         bool is_default) {
  Record r;
  r.op = task.op_name();
  r.workload = task.workload();
  r.target = task.target_name();
  r.device_key = context.device_key;
  r.device = e.device;
  r.device_fingerprint = e.device_class.fingerprint;
  r.config = ops::format_config(e.config);
  r.status = std::string(kernel::to_string(e.status));
  r.message = e.message;
  if (final_measurement && is_default && r.message.empty()) r.message = "default";
  r.round_seconds = e.round_seconds;
  r.cost = e.ok() ? e.cost : std::numeric_limits<double>::infinity();
  double flops = task.flops();
  r.gflops = std::isfinite(r.cost) && r.cost > 0 ? flops / r.cost / 1e9 : 0;
  r.compile_ms = e.compile_ms;
  r.tool_version = std::string(software_version());
  r.time_unix_ms = now_unix_ms();
  r.session = context.session;
  r.final_measurement = final_measurement;
  db.add(r);
}

}  // namespace kestrel::tuner::loop_records
