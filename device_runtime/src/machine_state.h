// What the machine is doing while candidates run, as Linux exposes it (/proc, /sys): the
// load average, the frequency of the CPU the runtime runs on, the hottest thermal zone,
// the Raspberry Pi firmware's throttling flags, and how many CPUs were busy over an
// interval. Recorded beside each measurement so that a figure taken on a loaded or hot
// board can be told from one taken on a quiet one. Reads only; absent files give -1.
#pragma once

#include <cstdint>

#include "kestrel/rpc/measure.h"

namespace kestrel::device {

// Cumulative CPU time of the whole machine (/proc/stat's first line), in clock ticks.
struct CpuTimes {
  std::uint64_t busy = 0;
  std::uint64_t total = 0;
};
CpuTimes read_cpu_times();

// The machine now; busy_cpus from the interval since `since` (-1 when unknown).
kernel::MachineState sample_machine_state(const CpuTimes& since);

}  // namespace kestrel::device
