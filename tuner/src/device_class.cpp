// DeviceClass: which devices a measurement holds for.
#include "kestrel/host/measure_client.h"
#include "kestrel/tuner/task.h"

namespace kestrel::tuner {

records::DeviceClass device_class_of(const std::string& key, const rpc::DeviceInfo& device, const host::Target& target) {
  records::DeviceClass c;
  c.key = key;
  c.fingerprint = host::device_fingerprint(device);
  if (!target.is_gpu()) {
    c.model = device.cpu_model;
    return c;
  }
  const std::string backend(ops::to_string(target.backend));
  for (const auto& gpu : device.gpus) {
    if (gpu.backend == backend && gpu.index == target.gpu_index) {
      c.model = gpu.name;
      break;
    }
  }
  return c;
}

}  // namespace kestrel::tuner
