// Task and DeviceClass.
#include "kestrel/tuner/task.h"

#include "kestrel/host/measure_client.h"

namespace kestrel::tuner {

std::string Task::op_name() const { return std::string(op->name()); }
std::string Task::workload() const { return ops::format_params(params); }
std::string Task::target_name() const { return target.to_string(); }
std::string Task::key() const { return op_name() + "/" + workload() + "/" + target_name(); }
double Task::flops() const { return op->flops(params); }

}  // namespace kestrel::tuner
