// The GPU variants of the glue ops (pool2d, softmax, layernorm, elementwise) share one
// shape: a work-group size knob (and for elementwise, items per work-item), a kernel per
// backend embedded at build time and a one-dimensional launch. ops/src/*_gpu.cpp fill it
// in.
#pragma once

#include <string>
#include <string_view>

#include "glue_util.h"
#include "gpu_knobs.h"

namespace kestrel::ops::detail {

// Threads per block / work-items per work-group of the row-reduction kernels (softmax,
// layernorm): powers of two for the tree reductions.
inline const std::vector<std::int64_t> kRowThreads = {32, 64, 128, 256, 512, 1024};

// A kernel source for `backend` (cuda or opencl) from the embedded .cu / .cl texts, or
// OpError naming the op when the backend has none.
inline KernelSource gpu_source(std::string_view op, Backend backend, std::string_view cu, std::string_view cl) {
  if (backend != Backend::cuda && backend != Backend::opencl) {
    throw OpError("this " + std::string(op) + " variant has no " + std::string(to_string(backend)) +
                  " kernel (backends: cuda, opencl)");
  }
  KernelSource out;
  out.backend = backend;
  out.file_name = std::string(op) + (backend == Backend::cuda ? ".cu" : ".cl");
  out.text = std::string(backend == Backend::cuda ? cu : cl);
  out.launch.entry = std::string(op);
  return out;
}

}  // namespace kestrel::ops::detail
