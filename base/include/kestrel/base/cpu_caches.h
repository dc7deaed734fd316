// The CPU's caches as Linux describes them in sysfs: what the device runtime registers
// and what the host's own (native) compile target is tuned for.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kestrel {

struct CpuCache {
  unsigned level = 0;
  std::string kind;  // "data", "instruction", "unified"
  std::uint64_t size_bytes = 0;
  unsigned line_bytes = 0;
};

// Sizes as sysfs writes them: "32K", "1024K", "8M", "512" (bytes); 0 when empty.
std::uint64_t parse_cache_size(const std::string& text);

// cpu0's caches from `dir` (default /sys/devices/system/cpu/cpu0/cache: index0, index1, ...
// until one is missing); empty where sysfs has none.
std::vector<CpuCache> read_cpu_caches(const std::string& dir = "/sys/devices/system/cpu/cpu0/cache");

}  // namespace kestrel
