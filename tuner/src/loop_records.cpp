// Reading and writing the records of a tuning loop (see loop_records.h).
#include "loop_records.h"

#include <chrono>
#include <cmath>
#include <limits>

#include "kestrel/base/version.h"

namespace kestrel::tuner::loop_records {
namespace {

std::int64_t now_unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

std::vector<Past> of_task(const records::RecordStore& db, const Task& task, const std::optional<records::DeviceClass>& device_class) {
  std::vector<Past> out;
  for (const records::Record& r : db.find(task.op_name(), task.params, task.target.id(),
                                 device_class ? &*device_class : nullptr)) {
    if (r.implementation != records::kKestrelImplementation) continue;  // a vendor library: not a point of the space
    Past p;
    p.config = r.config;
    p.status = r.status;
    p.cost = p.ok() ? r.cost : std::numeric_limits<double>::infinity();
    p.final_measurement = r.final_measurement;
    out.push_back(std::move(p));
  }
  return out;
}

std::vector<Other> of_other_workloads(const records::RecordStore& db, const Task& task) {
  std::vector<Other> out;
  for (const records::Record& r : db.find_other_workloads(task.op_name(), task.params, task.target.id())) {
    if (r.workload.empty() || r.config.empty() || r.implementation != records::kKestrelImplementation) continue;
    Other o;
    o.params = r.workload;
    o.config = r.config;
    o.ok = r.ok();
    o.cost = o.ok ? r.cost : std::numeric_limits<double>::infinity();
    out.push_back(std::move(o));
  }
  return out;
}

void add(records::RecordStore& db, const Task& task, const Evaluation& e, const Context& context, bool final_measurement,
         unsigned recommended) {
  records::Record r;
  r.op = task.op_name();
  r.workload = task.params;
  r.target = task.target.id();
  r.device_class = e.device_class;
  if (r.device_class.fingerprint.empty() && context.device_class) r.device_class = *context.device_class;
  if (r.device_class.key.empty()) r.device_class.key = context.device_key;
  r.device = e.device;
  r.config = e.config;
  r.is_default = e.implementation == records::kKestrelImplementation &&
                 e.config == context.default_config;
  r.status = e.status;
  r.message = e.message;
  r.round_seconds = e.round_seconds;
  r.cost = e.ok() ? e.cost : std::numeric_limits<double>::infinity();
  double flops = task.flops();
  r.gflops = std::isfinite(r.cost) && r.cost > 0 ? flops / r.cost / 1e9 : 0;
  r.compile_ms = e.compile_ms;
  r.tool_version = std::string(software_version());
  r.time_unix_ms = now_unix_ms();
  r.session = context.session;
  r.final_measurement = final_measurement;
  r.implementation = e.implementation;
  r.machine = e.machine;
  r.recommended = recommended;
  db.add(r);
}

}  // namespace kestrel::tuner::loop_records
