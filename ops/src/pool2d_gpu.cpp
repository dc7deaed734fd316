// pool2d for GPUs (CUDA and OpenCL): a variant of the CPU pool2d op, one thread per
// output element with a threads knob. Workload, tensors, FLOPs, reference kernel and
// tolerance are those of the CPU op. Kernels: ops/gpu/pool2d.cu, ops/gpu/pool2d.cl.
#include "builtin_ops.h"
#include "glue_gpu.h"

namespace kestrel::ops {
namespace {

const std::vector<std::int64_t> kThreads = {64, 128, 256, 512};

class Pool2dGpuOp final : public detail::GpuVariant {
 public:
  Pool2dGpuOp() : GpuVariant(make_pool2d_op()) {}

  std::string_view description() const override {
    return "2-D max or average pooling in NCHWc (block 1: NCHW) for CUDA and OpenCL: one thread per output "
           "element, in memory order";
  }

  std::vector<Knob> knobs(const Params&) const override {
    return {{"threads", kThreads, "threads per block / work-items per work-group"}};
  }

  std::string check(const Params& p, const Config& c, const TargetTraits&) const override {
    return detail::check_domains(knobs(p), c);
  }

  Config default_config(const Params&, const TargetTraits&) const override { return {{"threads", 256}}; }

  KernelSource source(Backend backend, const Params& p, const Config& c) const override {
    KernelSource out = detail::gpu_source("pool2d", backend, embedded::pool2d_cu(), embedded::pool2d_cl());
    if (auto reason = detail::check_domains(knobs(p), c); !reason.empty()) {
      throw OpError("invalid pool2d configuration: " + reason);
    }
    detail::add_defines(out.defines, "POOL_", detail::with_fallbacks(params(), p));
    detail::add_defines(out.defines, "POOL_", c);
    out.launch.grid = {detail::ceil_div(tensors(p).back().elements(), c.at("threads")), 1, 1};
    out.launch.block = {c.at("threads"), 1, 1};
    return out;
  }

  std::vector<std::pair<std::string, double>> features(const Params& p, const Config& c) const override {
    auto out = Op::features(p, c);
    const double outputs = static_cast<double>(tensors(p).back().elements());
    const double threads = static_cast<double>(c.at("threads"));
    out.emplace_back("pool2d_gpu.blocks", std::ceil(outputs / threads));
    out.emplace_back("pool2d_gpu.window", cpu_flops_per_output(p));
    return out;
  }

 private:
  double cpu_flops_per_output(const Params& p) const {
    const double outputs = static_cast<double>(tensors(p).back().elements());
    return outputs > 0 ? flops(p) / outputs : 0.0;
  }
};

}  // namespace

std::unique_ptr<Op> make_pool2d_gpu_op() { return std::make_unique<Pool2dGpuOp>(); }

}  // namespace kestrel::ops
