// What is tuned, and for which devices a measurement holds.
#pragma once

#include <string>

#include "kestrel/host/target.h"
#include "kestrel/rpc/device_info.h"

namespace kestrel::tuner {

// Which devices a measurement is valid for: the pool key, the hardware model (CPU model
// name, or GPU name for GPU targets), and the fingerprint (host::device_fingerprint:
// triple|cpu model|cores). Two devices of one class are interchangeable for tuning.
struct DeviceClass {
  std::string key;
  std::string model;
  std::string fingerprint;
  friend bool operator==(const DeviceClass&, const DeviceClass&) = default;
};

// The class of `device`, leased under `key`, when it runs code compiled for `target`:
// the model is the name of the target's GPU (its backend and index on the device) for a
// GPU target, else the device's CPU model. A GPU the device did not register leaves the
// model empty.
DeviceClass device_class_of(const std::string& key, const rpc::DeviceInfo& device, const host::Target& target);

}  // namespace kestrel::tuner
