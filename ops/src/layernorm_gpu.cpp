// layernorm for GPUs (CUDA and OpenCL): a variant of the CPU layernorm op, one block /
// work-group per row with a threads knob. Workload, tensors, FLOPs, reference kernel and
// tolerance are those of the CPU op. Kernels: ops/gpu/layernorm.cu, ops/gpu/layernorm.cl.
#include "builtin_ops.h"
#include "glue_gpu.h"
#include "glue_util.h"

namespace kestrel::ops {
namespace {

class LayernormGpuOp final : public detail::GpuVariant {
 public:
  LayernormGpuOp() : GpuVariant(make_layernorm_op()) {}

  std::string_view description() const override {
    return "layer normalisation of each row of an fp32 matrix (with an optional residual added first) for CUDA "
           "and OpenCL: one block / work-group per row, its sum and squared deviations by tree reductions in "
           "shared / local memory";
  }

  std::vector<Knob> knobs(const Params&) const override {
    return {{"threads", detail::kRowThreads, "threads per block / work-items per work-group (one row each)"}};
  }

  std::string check(const Params& p, const Config& c, const TargetTraits&) const override {
    return detail::check_domains(knobs(p), c);
  }

  // Enough threads for one column each, between 64 and 256.
  Config default_config(const Params& p, const TargetTraits&) const override {
    return {{"threads", std::clamp<std::int64_t>(detail::largest_at_most(detail::kRowThreads, p.at("cols")), 64, 256)}};
  }

  KernelSource source(Backend backend, const Params& p, const Config& c) const override {
    KernelSource out = detail::gpu_source("layernorm", backend, embedded::layernorm_cu(), embedded::layernorm_cl());
    if (auto reason = detail::check_domains(knobs(p), c); !reason.empty()) {
      throw OpError("invalid layernorm configuration: " + reason);
    }
    detail::add_layernorm_defines(out.defines, params(), p);
    detail::add_defines(out.defines, "LAYERNORM_", c);
    out.launch.grid = {p.at("rows"), 1, 1};
    out.launch.block = {c.at("threads"), 1, 1};
    out.launch.shared_bytes = c.at("threads") * 4;
    return out;
  }

  std::vector<std::pair<std::string, double>> features(const Params& p, const Config& c) const override {
    auto out = Op::features(p, c);
    const double cols = static_cast<double>(p.at("cols")), threads = static_cast<double>(c.at("threads"));
    out.emplace_back("layernorm_gpu.columns_per_thread", std::ceil(cols / threads));
    out.emplace_back("layernorm_gpu.idle_threads", threads > cols ? (threads - cols) / threads : 0.0);
    return out;
  }
};

}  // namespace

std::unique_ptr<Op> make_layernorm_gpu_op() { return std::make_unique<LayernormGpuOp>(); }

}  // namespace kestrel::ops
