// Discovery of the CUDA and OpenCL devices this runtime can use, for registration.
#pragma once

#include <chrono>
#include <string>

#include "kestrel/rpc/device_info.h"

namespace kestrel::device {

// Appends the GPUs found to info.gpus and, for a backend that found none, the reason to
// info.gpu_notes ("no CUDA driver (...)", "no OpenCL platform"). Runs the drivers in a
// child process, killed after `timeout`; never fails.
void detect_gpus(rpc::DeviceInfo& info, std::chrono::milliseconds timeout = std::chrono::milliseconds(30'000));

// Parses the probe child's report (exposed for tests).
void parse_gpu_probe(const std::string& text, rpc::DeviceInfo& info);

}  // namespace kestrel::device
