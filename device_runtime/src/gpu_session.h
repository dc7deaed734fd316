// A worker's use of one GPU: a context created in the worker (never before a fork),
// device copies of the batch's arguments, and per candidate: load the module, run it
// once for the correctness check (outputs copied back), and time rounds of launches
// with device events (CUDA events, OpenCL profiling events).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kestrel/kernel/gpu_module.h"
#include "kestrel/kernel/status.h"

namespace kestrel::device::gpu {

using Status = kernel::Status;

// A host argument of the batch; the session keeps a device copy of each.
struct HostArg {
  float* data = nullptr;
  std::int64_t elements = 0;
  bool is_output = false;
};

// Every call returns Status::ok or the candidate's failure with `message` set.
class Session {
 public:
  virtual ~Session() = default;
  // Allocates device buffers and uploads the inputs (once per batch).
  virtual Status upload(const std::vector<HostArg>& args, std::string& message) = 0;
  // Builds (OpenCL) or loads (CUDA) the module and finds its entry point; replaces the
  // previous one. device_compile_error carries the driver's build log.
  virtual Status load(const kernel::GpuModule& module, const std::string& hash, std::string& message) = 0;
  // Outputs set to NaN, one launch, outputs copied back into the HostArgs.
  virtual Status run_once(std::string& message) = 0;
  // `number` back-to-back launches; `seconds` is the per-launch device time. With
  // `flush`, the device's L2 is overwritten first (outside the timed span).
  virtual Status time_round(std::uint32_t number, bool flush, double& seconds, std::string& message) = 0;
};

// Null with `error` set when the backend or the device index is not available.
std::unique_ptr<Session> open_opencl(unsigned device_index, std::string& error);
std::unique_ptr<Session> open_cuda(unsigned device_index, std::string& error);

}  // namespace kestrel::device::gpu
