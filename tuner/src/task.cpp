// Task and DeviceClass.
#include "kestrel/tuner/task.h"

#include "kestrel/host/measure_client.h"

namespace kestrel::tuner {

DeviceClass device_class_of(const std::string& key, const rpc::DeviceInfo& device, const host::Target& target) {
  DeviceClass out;
  out.key = key;
  out.model = device.cpu_model;
  if (target.is_gpu()) {
    const std::string backend(ops::to_string(target.backend));
    for (const auto& gpu : device.gpus) {
      if (gpu.backend == backend && gpu.index == target.gpu_index) out.model = gpu.name;
    }
  }
  out.fingerprint = host::device_fingerprint(device);
  return out;
}

std::string Task::op_name() const { return std::string(op->name()); }
std::string Task::workload() const { return ops::format_params(params); }
std::string Task::target_name() const { return target.to_string(); }
std::string Task::key() const { return op_name() + "/" + workload() + "/" + target_name(); }
double Task::flops() const { return op->flops(params); }

}  // namespace kestrel::tuner
