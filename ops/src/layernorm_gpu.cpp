// layernorm for GPUs (CUDA and OpenCL): a variant of the CPU layernorm op, one block /
// work-group per row with a threads knob. Workload, tensors, FLOPs, reference kernel and
// tolerance are those of the CPU op. Kernels: ops/gpu/layernorm.cu, ops/gpu/layernorm.cl.
#include "builtin_ops.h"
#include "glue_gpu.h"
#include "glue_util.h"

namespace kestrel::ops {
namespace {

class LayernormGpuOp final : public detail::RowReductionGpuOp {
 public:
  LayernormGpuOp() : RowReductionGpuOp(make_layernorm_op()) {}

  std::string_view description() const override {
    return "layer normalisation of each row of an fp32 matrix (with an optional residual added first) for CUDA "
           "and OpenCL: one block / work-group per row, its sum and squared deviations by tree reductions in "
           "shared / local memory";
  }

 protected:
  KernelSource row_source(Backend backend, const Params& p, const Config& c) const override {
    KernelSource out = detail::gpu_source("layernorm", backend, embedded::layernorm_cu(), embedded::layernorm_cl());
    detail::add_layernorm_defines(out.defines, params(), p);
    detail::add_defines(out.defines, "LAYERNORM_", c);
    return out;
  }
};

}  // namespace

std::unique_ptr<Op> make_layernorm_gpu_op() { return std::make_unique<LayernormGpuOp>(); }

}  // namespace kestrel::ops
