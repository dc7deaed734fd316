// Plain C++ views of what the tracker knows: a device's capabilities and the pool
// summary. Converted to and from the wire types in one place (device_info.cpp).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kestrel/base/cpu_caches.h"
#include "kestrel/base/ids.h"
#include "kestrel/wire/tracker.capnp.h"

namespace kestrel::rpc {

using CacheInfo = CpuCache;  // one cache of the device's CPU (base/cpu_caches.h)

// A CUDA or OpenCL device found by the device runtime (tracker.capnp's GpuInfo).
struct GpuInfo {
  std::string backend;  // "cuda" or "opencl"
  unsigned index = 0;   // among the runtime's devices of that backend
  std::string name;
  std::string vendor;
  std::string version;  // CUDA: "sm_90"; OpenCL: "OpenCL C 1.2"
  std::string driver;
  std::uint64_t memory_bytes = 0;
  unsigned compute_units = 0;
  unsigned max_threads_per_group = 0;
  std::uint64_t max_shared_bytes = 0;
  std::uint64_t l2_bytes = 0;
};

struct DeviceInfo {
  std::string name;
  std::string hostname;
  std::string os;
  std::string arch;
  std::string triple;
  std::string cpu_model;
  unsigned cores = 0;
  std::vector<CacheInfo> caches;
  std::uint64_t memory_bytes = 0;
  std::vector<std::string> cpu_features;
  std::string runtime_version;
  unsigned abi_version = 0;
  std::vector<GpuInfo> gpus;
  std::vector<std::string> gpu_notes;  // why a backend found nothing
  // ARM: the CPU implementer and part numbers ("0x41:0xd08"), which the host maps to the
  // -mcpu it compiles for; empty elsewhere.
  std::string cpu_part;
};

void to_wire(const DeviceInfo& info, wire::DeviceInfo::Builder out);
DeviceInfo from_wire(wire::DeviceInfo::Reader in);

struct KeySummary {
  std::string key;
  unsigned free = 0;
  unsigned busy = 0;
  unsigned queued = 0;
};

struct DeviceSummary {
  DeviceId id;
  std::string key;
  DeviceInfo info;
  std::string address;
  bool busy = false;
  LeaseId lease;
  std::string lease_holder;
  std::uint64_t connected_ms = 0;
};

struct TrackerSummary {
  std::string tracker_version;
  std::uint64_t uptime_ms = 0;
  unsigned clients = 0;
  std::vector<KeySummary> keys;        // sorted by key
  std::vector<DeviceSummary> devices;  // sorted by key, then name
};

TrackerSummary from_wire(wire::Summary::Reader in);

}  // namespace kestrel::rpc
