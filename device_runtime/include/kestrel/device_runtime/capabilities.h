// What this device is: read from uname, /proc/cpuinfo, /sys and sysconf at startup.
// Registered with the tracker so the host can pick the right compile target.
#pragma once

#include <chrono>
#include <string>

#include "kestrel/rpc/device_info.h"

namespace kestrel::device {

// The target triple this runtime binary was compiled for.
std::string_view build_triple();

// Detects the capabilities of the machine this runs on. `name` identifies this device
// instance in the pool; empty means "<hostname>-<pid>". Never fails: fields that
// cannot be read stay empty or zero.
rpc::DeviceInfo detect_device_info(const std::string& name);

// Appends the CUDA and OpenCL devices found to info.gpus and, for a backend that found
// none, the reason to info.gpu_notes ("no CUDA driver (...)", "no OpenCL platform").
// The drivers are loaded in a child process (killed after `timeout`), never in this one:
// a GPU context must not exist before the runtime forks its workers. Never fails.
// detect_device_info() calls it.
void detect_gpus(rpc::DeviceInfo& info, std::chrono::milliseconds timeout = std::chrono::milliseconds(30'000));

// Parses the GPU probe child's report into info.gpus / info.gpu_notes (for tests).
void parse_gpu_probe(const std::string& text, rpc::DeviceInfo& info);

// The CPUs this process may run on (its affinity mask; all online CPUs when the mask
// cannot be read): what kernels get for "all cores" and what the device registers.
unsigned usable_cpus();
// Restricts this process (and the workers and kernel threads it starts) to `cpus`, a
// list such as "2,3" or "0-3,6" (kestrel-device --cpus): on a dedicated board, kernels
// then never share a core with the runtime's other work. Returns an empty string, or why
// the list was refused.
std::string pin_to_cpus(const std::string& cpus);

// Parsing helpers, exposed for tests on recorded /proc and /sys contents.
std::string cpu_model_from_cpuinfo(const std::string& cpuinfo);
std::vector<std::string> cpu_features_from_cpuinfo(const std::string& cpuinfo);
// ARM: "implementer:part" of the first CPU ("0x41:0xd08"); empty when cpuinfo has neither.
std::string cpu_part_from_cpuinfo(const std::string& cpuinfo);


}  // namespace kestrel::device
