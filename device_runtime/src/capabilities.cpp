// Capability detection from the running system.
#include "kestrel/device_runtime/capabilities.h"

#include <sys/utsname.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <set>

#include "kestrel/base/cpu_caches.h"
#include "kestrel/base/file.h"
#include "kestrel/kernel/abi.h"
#include "kestrel/rpc/handshake.h"
#include "kestrel/base/log.h"

namespace kestrel::device {
namespace {

std::string read_text(const std::string& path) { return kestrel::read_file(path).value_or(""); }

// Splits text into lines / whitespace-separated words without iostreams.
std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::size_t start = 0;
  while (start < text.size()) {
    auto end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    lines.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return lines;
}

std::vector<std::string> split_words(const std::string& text) {
  std::vector<std::string> words;
  std::size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && (text[i] == ' ' || text[i] == '\t')) ++i;
    std::size_t start = i;
    while (i < text.size() && text[i] != ' ' && text[i] != '\t') ++i;
    if (i > start) words.push_back(text.substr(start, i - start));
  }
  return words;
}

std::string trim(std::string s) {
  auto first = s.find_first_not_of(" \t\r\n");
  auto last = s.find_last_not_of(" \t\r\n");
  return first == std::string::npos ? std::string() : s.substr(first, last - first + 1);
}

// The value of the first "field : value" line of /proc/cpuinfo with this field name.
std::string cpuinfo_field(const std::string& cpuinfo, std::string_view field) {
  for (const std::string& line : split_lines(cpuinfo)) {
    auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    if (trim(line.substr(0, colon)) == field) return trim(line.substr(colon + 1));
  }
  return {};
}

// x86 flags that matter for kernel code generation (the full list is ~150 entries).
const std::set<std::string>& x86_relevant_flags() {
  static const std::set<std::string> flags = {
      "sse2", "ssse3", "sse4_1", "sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512dq", "avx512cd",
      "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16", "avx512_fp16", "avx512ifma", "avx512vbmi",
      "amx_tile", "amx_bf16", "amx_int8", "avx_vnni"};
  return flags;
}

}  // namespace

std::string_view build_triple() {
#if defined(__x86_64__)
  return "x86_64-linux-gnu";
#elif defined(__aarch64__)
  return "aarch64-linux-gnu";
#elif defined(__arm__) && defined(__ARM_PCS_VFP)
  return "armv7a-linux-gnueabihf";
#elif defined(__arm__)
  return "armv7a-linux-gnueabi";
#elif defined(__riscv) && __riscv_xlen == 64
  return "riscv64-linux-gnu";
#else
  return "unknown-linux-gnu";
#endif
}

std::string cpu_model_from_cpuinfo(const std::string& cpuinfo) {
  for (std::string_view field : {"model name", "Model", "Hardware", "uarch", "cpu model"}) {
    std::string value = cpuinfo_field(cpuinfo, field);
    if (!value.empty()) return value;
  }
  // ARM kernels often give only implementer/part numbers.
  std::string implementer = cpuinfo_field(cpuinfo, "CPU implementer");
  std::string part = cpuinfo_field(cpuinfo, "CPU part");
  if (!implementer.empty()) return "implementer " + implementer + " part " + part;
  return {};
}

std::string cpu_part_from_cpuinfo(const std::string& cpuinfo) {
  std::string implementer = cpuinfo_field(cpuinfo, "CPU implementer");
  std::string part = cpuinfo_field(cpuinfo, "CPU part");
  if (implementer.empty() || part.empty()) return {};
  return implementer + ":" + part;
}

std::vector<std::string> cpu_features_from_cpuinfo(const std::string& cpuinfo) {
  std::string x86 = cpuinfo_field(cpuinfo, "flags");
  std::string arm = cpuinfo_field(cpuinfo, "Features");
  std::string riscv = cpuinfo_field(cpuinfo, "isa");
  std::vector<std::string> features;
  if (!x86.empty()) {
    for (const auto& word : split_words(x86)) {
      if (x86_relevant_flags().contains(word)) features.push_back(word);
    }
  } else if (!arm.empty()) {
    for (const auto& word : split_words(arm)) features.push_back(word);
  } else if (!riscv.empty()) {
    features.push_back(riscv);
  }
  std::sort(features.begin(), features.end());
  features.erase(std::unique(features.begin(), features.end()), features.end());
  return features;
}

rpc::DeviceInfo detect_device_info(const std::string& name) {
  rpc::DeviceInfo info;
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) == 0) info.hostname = host;
  info.name = name.empty() ? info.hostname + "-" + std::to_string(::getpid()) : name;
  struct utsname uts {};
  if (::uname(&uts) == 0) {
    info.os = std::string(uts.sysname) + " " + uts.release;
    info.arch = uts.machine;
  }
  info.triple = std::string(build_triple());
  std::string cpuinfo = read_text("/proc/cpuinfo");
  info.cpu_model = cpu_model_from_cpuinfo(cpuinfo);
  info.cpu_features = cpu_features_from_cpuinfo(cpuinfo);
  info.cpu_part = cpu_part_from_cpuinfo(cpuinfo);
  info.cores = usable_cpus();
  long pages = ::sysconf(_SC_PHYS_PAGES);
  long page_size = ::sysconf(_SC_PAGESIZE);
  if (pages > 0 && page_size > 0) info.memory_bytes = static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page_size);
  info.caches = read_cpu_caches();
  info.runtime_version = std::string(software_version());
  info.abi_version = KESTREL_KERNEL_ABI_VERSION;
  detect_gpus(info);
  return info;
}

unsigned usable_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return static_cast<unsigned>(CPU_COUNT(&set));
  long cores = ::sysconf(_SC_NPROCESSORS_ONLN);
  return cores > 0 ? static_cast<unsigned>(cores) : 1;
}

std::string pin_to_cpus(const std::string& cpus) {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::size_t at = 0;
  while (at <= cpus.size()) {
    std::size_t comma = cpus.find(',', at);
    std::string item = cpus.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    at = comma == std::string::npos ? cpus.size() + 1 : comma + 1;
    unsigned first = 0, last = 0;
    char extra = 0;
    if (std::sscanf(item.c_str(), "%u-%u%c", &first, &last, &extra) == 2) {
    } else if (std::sscanf(item.c_str(), "%u%c", &first, &extra) == 1) {
      last = first;
    } else {
      return "'" + item + "' is not a CPU number or range (e.g. 2,3 or 0-3)";
    }
    if (first > last || last >= CPU_SETSIZE) return "'" + item + "' is not a valid CPU range";
    for (unsigned c = first; c <= last; ++c) CPU_SET(c, &set);
  }
  if (::sched_setaffinity(0, sizeof set, &set) != 0) {
    return "cannot run on CPUs " + cpus + ": " + std::strerror(errno) + " (offline or outside this process's set?)";
  }
  return {};
}

}  // namespace kestrel::device
