// GPU kernels on the host: OpenCL C is shipped as source (the device's driver compiles
// it); CUDA C is compiled in-process with NVRTC to a cubin (sm_XX) or PTX (compute_XX).
// Either way the result is a GPU module image (rpc/gpu_module.h) carrying the launch
// geometry.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kestrel/host/target.h"
#include "kestrel/ops/op.h"

namespace kestrel::host::detail {

struct GpuBuild {
  bool ok = false;
  std::vector<std::uint8_t> image;  // GPU module image when ok
  std::string diagnostics;          // NVRTC's log, or why the module cannot be built
};

// `source.backend` must match `target.backend` (a mismatch is a failed build).
GpuBuild build_gpu_module(const ops::KernelSource& source, const Target& target);

// The source with its #defines prepended as #define lines (OpenCL modules, NVRTC input).
std::string with_defines(const ops::KernelSource& source);

// "nvrtc 13.0", or "" when kestrel was built without NVRTC. Part of every cache key.
std::string nvrtc_version();

}  // namespace kestrel::host::detail
