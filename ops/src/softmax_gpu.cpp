// softmax for GPUs (CUDA and OpenCL): a variant of the CPU softmax op, one block /
// work-group per row with a threads knob. Workload, tensors, FLOPs, reference kernel and
// tolerance are those of the CPU op. Kernels: ops/gpu/softmax.cu, ops/gpu/softmax.cl.
#include "builtin_ops.h"
#include "glue_gpu.h"

namespace kestrel::ops {
namespace {

class SoftmaxGpuOp final : public detail::RowReductionGpuOp {
 public:
  SoftmaxGpuOp() : RowReductionGpuOp(make_softmax_op()) {}

  std::string_view description() const override {
    return "softmax of each row of an fp32 matrix for CUDA and OpenCL: one block / work-group per row, its "
           "maximum and sum by tree reductions in shared / local memory";
  }

  std::string check(const Params& p, const Config& c, const TargetTraits& traits) const override {
    // softmax.cu / softmax.cl write NaN as it comes: the fused Where(IsNaN) is the CPU op's.
    if (detail::param_or(p, "nan_zero", 0) != 0) return "the CUDA/OpenCL softmax has no nan_zero (CPU only)";
    return RowReductionGpuOp::check(p, c, traits);
  }

 protected:
  KernelSource row_source(Backend backend, const Params& p, const Config& c) const override {
    KernelSource out = detail::gpu_source("softmax", backend, embedded::softmax_cu(), embedded::softmax_cl());
    detail::add_defines(out.defines, "SOFTMAX_", p);
    detail::add_defines(out.defines, "SOFTMAX_", c);
    return out;
  }
};

}  // namespace

std::unique_ptr<Op> make_softmax_gpu_op() { return std::make_unique<SoftmaxGpuOp>(); }

}  // namespace kestrel::ops
