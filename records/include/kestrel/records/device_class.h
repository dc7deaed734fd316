// Which devices a measurement holds for (a DeviceClass), and who made a measured kernel.
#pragma once

#include <string>

namespace kestrel::records {

// The implementation of Kestrel's own kernels (a configuration of the op's space); any
// other is a vendor library measured as a contender ("openblas", "onednn").
inline constexpr const char* kKestrelImplementation = "kestrel";

// Which devices a measurement is valid for: the pool key, the hardware model (CPU model
// name, or GPU name for GPU targets), and the fingerprint (host::device_fingerprint:
// triple|cpu model|cores). Two devices of one class are interchangeable for tuning
// (tuner::device_class_of gives a leased device's).
struct DeviceClass {
  std::string key;
  std::string model;
  std::string fingerprint;
  friend bool operator==(const DeviceClass&, const DeviceClass&) = default;
};

}  // namespace kestrel::records
