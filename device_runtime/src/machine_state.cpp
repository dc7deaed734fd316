// Machine state from /proc and /sys (see machine_state.h).
#include "machine_state.h"

#include <dirent.h>
#include <sched.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>

namespace kestrel::device {
namespace {

// The first number in a small text file; false when it is absent or holds none.
bool read_number(const char* path, double& out) {
  std::FILE* f = std::fopen(path, "re");
  if (!f) return false;
  bool ok = std::fscanf(f, "%lf", &out) == 1;
  std::fclose(f);
  return ok;
}

double hottest_zone_celsius() {
  DIR* dir = ::opendir("/sys/class/thermal");
  if (!dir) return -1;
  double hottest = -1;
  while (dirent* entry = ::readdir(dir)) {
    if (std::strncmp(entry->d_name, "thermal_zone", 12) != 0) continue;
    std::string path = std::string("/sys/class/thermal/") + entry->d_name + "/temp";
    double millis = 0;
    if (read_number(path.c_str(), millis) && millis / 1000.0 > hottest) hottest = millis / 1000.0;
  }
  ::closedir(dir);
  return hottest;
}

bool firmware_throttled() {
  // Raspberry Pi firmware: a hexadecimal bit set; bits 0-3 are "now" (under-voltage,
  // frequency capped, throttled, soft temperature limit).
  std::FILE* f = std::fopen("/sys/devices/platform/soc/soc:firmware/get_throttled", "re");
  if (!f) return false;
  unsigned long flags = 0;
  bool ok = std::fscanf(f, "%lx", &flags) == 1;
  std::fclose(f);
  return ok && (flags & 0xf) != 0;
}

}  // namespace

CpuTimes read_cpu_times() {
  CpuTimes t;
  std::FILE* f = std::fopen("/proc/stat", "re");
  if (!f) return t;
  unsigned long long v[8] = {};
  if (std::fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6],
                  &v[7]) == 8) {
    for (unsigned long long x : v) t.total += x;
    t.busy = t.total - v[3] - v[4];  // all but idle and iowait
  }
  std::fclose(f);
  return t;
}

kernel::MachineState sample_machine_state(const CpuTimes& since) {
  kernel::MachineState state;
  double load = 0;
  if (read_number("/proc/loadavg", load)) state.load1 = load;
  const int cpu = ::sched_getcpu();
  if (cpu >= 0) {
    std::string base = "/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/cpufreq/";
    double khz = 0;
    if (read_number((base + "scaling_cur_freq").c_str(), khz)) state.cpu_mhz = khz / 1000.0;
  }
  state.temperature_c = hottest_zone_celsius();
  state.throttled = firmware_throttled();
  CpuTimes now = read_cpu_times();
  const long cpus = ::sysconf(_SC_NPROCESSORS_ONLN);
  if (since.total > 0 && now.total > since.total && cpus > 0) {
    state.busy_cpus = static_cast<double>(now.busy - since.busy) / static_cast<double>(now.total - since.total) *
                      static_cast<double>(cpus);
  }
  return state;
}

}  // namespace kestrel::device
