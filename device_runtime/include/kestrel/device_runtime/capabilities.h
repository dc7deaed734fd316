// What this device is: read from uname, /proc/cpuinfo, /sys and sysconf at startup.
// Registered with the tracker so the host can pick the right compile target.
#pragma once

#include <string>

#include "kestrel/rpc/device_info.h"

namespace kestrel::device {

// The target triple this runtime binary was compiled for.
std::string_view build_triple();

// Detects the capabilities of the machine this runs on. `name` identifies this device
// instance in the pool; empty means "<hostname>-<pid>". Never fails: fields that
// cannot be read stay empty or zero.
rpc::DeviceInfo detect_device_info(const std::string& name);

// Parsing helpers, exposed for tests on recorded /proc and /sys contents.
std::string cpu_model_from_cpuinfo(const std::string& cpuinfo);
std::vector<std::string> cpu_features_from_cpuinfo(const std::string& cpuinfo);
// Parses sizes such as "32K", "1024K", "8M", "512".
std::uint64_t parse_cache_size(const std::string& text);

}  // namespace kestrel::device
