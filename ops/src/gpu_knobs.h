// Helpers shared by the GPU variants of the built-in ops: launch limits every GPU of
// interest satisfies, used before the device's own limits are known, and the base class
// that gives a variant its CPU op's workload (parameters, tensors, FLOPs, reference).
#pragma once

#include <cstdint>
#include <memory>
#include <utility>

#include "kestrel/ops/op.h"

namespace kestrel::ops::detail {

// Threads per block / work-items per work-group that CUDA devices and most OpenCL GPUs
// accept; a device's own (possibly lower) limit is checked by the host against what it
// registered.
constexpr std::int64_t kMaxGpuThreads = 1024;
// Static shared / local memory per block that CUDA allows without opting in, and that
// OpenCL guarantees at least (32 KiB) rounded up to what current GPUs have.
constexpr std::int64_t kMaxGpuSharedBytes = 48 * 1024;

// A GPU variant of a CPU op: same name, parameters, tensors, FLOP count, reference kernel
// and tolerance (all taken from the CPU op), its own knobs, checks and kernels.
class GpuVariant : public Op {
 public:
  explicit GpuVariant(std::unique_ptr<Op> cpu) : cpu_(std::move(cpu)) {}

  std::string_view name() const override { return cpu_->name(); }
  std::vector<ParamSpec> params() const override { return cpu_->params(); }
  void validate(const Params& p) const override { cpu_->validate(p); }
  std::vector<TensorSpec> tensors(const Params& p) const override { return cpu_->tensors(p); }
  double flops(const Params& p) const override { return cpu_->flops(p); }
  KernelSource reference(const Params& p) const override { return cpu_->reference(p); }
  double tolerance(const Params& p) const override { return cpu_->tolerance(p); }
  std::vector<Backend> backends() const override { return {Backend::cuda, Backend::opencl}; }

 private:
  std::unique_ptr<Op> cpu_;
};

}  // namespace kestrel::ops::detail
