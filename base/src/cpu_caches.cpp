// Reading cpu0's caches from sysfs.
#include "kestrel/base/cpu_caches.h"

#include "kestrel/base/file.h"

namespace kestrel {
namespace {

std::string trim(const std::string& s) {
  const auto first = s.find_first_not_of(" \t\r\n");
  const auto last = s.find_last_not_of(" \t\r\n");
  return first == std::string::npos ? std::string() : s.substr(first, last - first + 1);
}

// The digits at the start of `text`; 0 when there are none.
std::uint64_t leading_number(const std::string& text) {
  std::uint64_t value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') break;
    value = value * 10 + static_cast<std::uint64_t>(c - '0');
  }
  return value;
}

}  // namespace

std::uint64_t parse_cache_size(const std::string& text) {
  const std::string t = trim(text);
  std::uint64_t value = leading_number(t);
  const auto suffix = t.find_first_not_of("0123456789");
  if (suffix != std::string::npos) {
    switch (t[suffix]) {
      case 'K': case 'k': value <<= 10; break;
      case 'M': case 'm': value <<= 20; break;
      case 'G': case 'g': value <<= 30; break;
      default: break;
    }
  }
  return value;
}

std::vector<CpuCache> read_cpu_caches(const std::string& dir) {
  std::vector<CpuCache> caches;
  for (int index = 0; index < 8; ++index) {
    const std::string base = dir + "/index" + std::to_string(index) + "/";
    const std::string level = trim(read_file(base + "level").value_or(""));
    if (level.empty()) break;
    CpuCache cache;
    cache.level = static_cast<unsigned>(leading_number(level));
    const std::string type = trim(read_file(base + "type").value_or(""));
    cache.kind = type == "Data" ? "data" : type == "Instruction" ? "instruction" : "unified";
    cache.size_bytes = parse_cache_size(read_file(base + "size").value_or(""));
    cache.line_bytes = static_cast<unsigned>(leading_number(trim(read_file(base + "coherency_line_size").value_or(""))));
    caches.push_back(cache);
  }
  return caches;
}

}  // namespace kestrel
