// elementwise for GPUs (CUDA and OpenCL): a variant of the CPU elementwise op, each block
// / work-group covering threads x items consecutive elements. Workload, tensors, FLOPs,
// reference kernel and tolerance are those of the CPU op. Kernels:
// ops/gpu/elementwise.cu, ops/gpu/elementwise.cl.
#include "builtin_ops.h"
#include "glue_gpu.h"
#include "glue_util.h"

namespace kestrel::ops {
namespace {

const std::vector<std::int64_t> kThreads = {64, 128, 256, 512, 1024};
const std::vector<std::int64_t> kItems = {1, 2, 4, 8};

class ElementwiseGpuOp final : public detail::GpuVariant {
 public:
  ElementwiseGpuOp() : GpuVariant(make_elementwise_op()) {}

  std::string_view description() const override {
    return "one elementwise operation over n fp32 elements for CUDA and OpenCL: each block / work-group covers "
           "threads x items consecutive elements, neighbouring threads on neighbouring floats";
  }

  std::vector<Knob> knobs(const Params&) const override {
    return {
        {"threads", kThreads, "threads per block / work-items per work-group"},
        {"items", kItems, "elements per thread, THREADS apart"},
    };
  }

  std::string check(const Params& p, const Config& c, const TargetTraits&) const override {
    return detail::check_domains(knobs(p), c);
  }

  Config default_config(const Params&, const TargetTraits&) const override { return {{"threads", 256}, {"items", 4}}; }

  KernelSource source(Backend backend, const Params& p, const Config& c) const override {
    KernelSource out = detail::gpu_source("elementwise", backend, embedded::elementwise_cu(), embedded::elementwise_cl());
    if (auto reason = detail::check_domains(knobs(p), c); !reason.empty()) {
      throw OpError("invalid elementwise configuration: " + reason);
    }
    detail::add_defines(out.defines, "ELEMENTWISE_", detail::with_fallbacks(params(), p));
    detail::add_defines(out.defines, "ELEMENTWISE_", c);
    out.launch.grid = {detail::ceil_div(p.at("n"), c.at("threads") * c.at("items")), 1, 1};
    out.launch.block = {c.at("threads"), 1, 1};
    return out;
  }

  std::vector<std::pair<std::string, double>> features(const Params& p, const Config& c) const override {
    auto out = Op::features(p, c);
    const double n = static_cast<double>(p.at("n"));
    const double per_block = static_cast<double>(c.at("threads") * c.at("items"));
    out.emplace_back("elementwise_gpu.blocks", std::ceil(n / per_block));
    out.emplace_back("elementwise_gpu.waste", 1.0 - n / (std::ceil(n / per_block) * per_block));
    return out;
  }
};

}  // namespace

std::unique_ptr<Op> make_elementwise_gpu_op() { return std::make_unique<ElementwiseGpuOp>(); }

}  // namespace kestrel::ops
