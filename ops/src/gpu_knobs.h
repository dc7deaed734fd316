// Helpers shared by the GPU variants of the built-in ops: launch limits every GPU of
// interest satisfies, used before the device's own limits are known.
#pragma once

#include <cstdint>

namespace kestrel::ops::detail {

// Threads per block / work-items per work-group that CUDA devices and most OpenCL GPUs
// accept; a device's own (possibly lower) limit is checked by the host against what it
// registered.
constexpr std::int64_t kMaxGpuThreads = 1024;
// Static shared / local memory per block that CUDA allows without opting in, and that
// OpenCL guarantees at least (32 KiB) rounded up to what current GPUs have.
constexpr std::int64_t kMaxGpuSharedBytes = 48 * 1024;

}  // namespace kestrel::ops::detail
