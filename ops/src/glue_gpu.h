// The GPU variants of the glue ops (pool2d, softmax, layernorm, elementwise) share one
// shape: a work-group size knob (and for elementwise, items per work-item), a kernel per
// backend embedded at build time and a one-dimensional launch. ops/src/*_gpu.cpp fill it
// in.
#pragma once

#include <algorithm>
#include <cmath>
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

// A row-reduction kernel (softmax, layernorm): one block / work-group of `threads` per row
// of `rows` x `cols`, a float of shared / local memory per thread. Subclasses give the
// description and the kernel source with its #defines (row_source); the knob, its check,
// default, launch and features are shared.
class RowReductionGpuOp : public GpuVariant {
 public:
  using GpuVariant::GpuVariant;

  std::vector<Knob> knobs(const Params&) const override {
    return {{"threads", kRowThreads, "threads per block / work-items per work-group (one row each)"}};
  }

  std::string check(const Params& p, const Config& c, const TargetTraits&) const override {
    return check_domains(knobs(p), c);
  }

  // Enough threads for one column each, between 64 and 256.
  Config default_config(const Params& p, const TargetTraits&) const override {
    return {{"threads", std::clamp<std::int64_t>(largest_at_most(kRowThreads, p.at("cols")), 64, 256)}};
  }

  KernelSource source(Backend backend, const Params& p, const Config& c) const override {
    KernelSource out = row_source(backend, p, c);
    if (auto reason = check_domains(knobs(p), c); !reason.empty()) {
      throw OpError("invalid " + std::string(name()) + " configuration: " + reason);
    }
    out.launch.grid = {p.at("rows"), 1, 1};
    out.launch.block = {c.at("threads"), 1, 1};
    out.launch.shared_bytes = c.at("threads") * 4;
    return out;
  }

  std::vector<std::pair<std::string, double>> features(const Params& p, const Config& c) const override {
    auto out = Op::features(p, c);
    const std::string prefix = std::string(name()) + "_gpu.";
    const double cols = static_cast<double>(p.at("cols")), threads = static_cast<double>(c.at("threads"));
    out.emplace_back(prefix + "columns_per_thread", std::ceil(cols / threads));
    out.emplace_back(prefix + "idle_threads", threads > cols ? (threads - cols) / threads : 0.0);
    return out;
  }

 protected:
  // The kernel for `backend` with the workload's and the configuration's #defines.
  virtual KernelSource row_source(Backend backend, const Params& p, const Config& c) const = 0;
};

}  // namespace kestrel::ops::detail
