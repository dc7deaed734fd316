// conv2d for GPUs (CUDA and OpenCL): a variant of the CPU conv2d op with its own knob
// space (block tile of output columns x channels, thread tile, weights staged in
// shared/local memory per input-channel chunk, unrolling) and a launch geometry computed
// from the knobs. Workload, tensors, FLOPs, reference kernel and tolerance are those of
// the CPU op. Kernels: ops/gpu/conv2d.cu, ops/gpu/conv2d.cl.
#include "builtin_ops.h"
#include "gpu_knobs.h"
#include "knob_util.h"

namespace kestrel::ops {
namespace {

using detail::ceil_div;
using detail::tiles_for;

const std::vector<std::int64_t> kBq = {8, 16, 32, 64};
const std::vector<std::int64_t> kBk = {4, 8, 16, 32, 64};
const std::vector<std::int64_t> kTq = {1, 2, 4};
const std::vector<std::int64_t> kTk = {1, 2, 4, 8};
const std::vector<std::int64_t> kCc = {1, 2, 4, 8, 16};

// Output rows and columns of a workload (the CPU op validates that both are >= 1).
std::int64_t out_size(const Params& p, const char* in, const char* filter) {
  std::int64_t span = p.at(in) + 2 * p.at("pad") - p.at("dilation") * (p.at(filter) - 1) - 1;
  return span < 0 ? 0 : span / p.at("stride") + 1;
}

class Conv2dGpuOp final : public detail::GpuVariant {
 public:
  Conv2dGpuOp() : GpuVariant(make_conv2d_op()) {}

  std::string_view description() const override {
    return "fp32 NCHW direct convolution with stride, zero padding and dilation, for CUDA and OpenCL: blocks of "
           "bq output columns x bk output channels of one output row, tq x tk thread tiles, optional weights staged "
           "in shared/local memory cc input channels at a time";
  }

  std::vector<Knob> knobs(const Params& p) const override {
    return {
        {"bq", tiles_for(kBq, out_size(p, "W", "S")), "output columns per block / work-group"},
        {"bk", tiles_for(kBk, p.at("K")), "output channels per block / work-group"},
        {"tq", kTq, "output columns per thread"},
        {"tk", kTk, "output channels per thread"},
        {"cc", tiles_for(kCc, p.at("C")), "input channels whose weights are staged per step (with stage=1)"},
        {"stage", {0, 1}, "1 = stage the block's weights in shared/local memory, 0 = read them from global memory"},
        {"unroll", {1, 2, 4}, "unroll count of the filter column loop"},
    };
  }

  std::string check(const Params& p, const Config& c, const TargetTraits&) const override {
    if (auto reason = detail::check_domains(knobs(p), c); !reason.empty()) return reason;
    std::int64_t bq = c.at("bq"), bk = c.at("bk"), tq = c.at("tq"), tk = c.at("tk");
    if (bq % tq != 0) return "bq=" + std::to_string(bq) + " is not a multiple of tq=" + std::to_string(tq);
    if (bk % tk != 0) return "bk=" + std::to_string(bk) + " is not a multiple of tk=" + std::to_string(tk);
    std::int64_t threads = (bq / tq) * (bk / tk);
    if (threads > detail::kMaxGpuThreads) {
      return "block of " + std::to_string(threads) + " threads ((bq/tq)*(bk/tk)) exceeds " +
             std::to_string(detail::kMaxGpuThreads);
    }
    if (shared_bytes(p, c) > detail::kMaxGpuSharedBytes) {
      return "staged weights need " + std::to_string(shared_bytes(p, c)) + " bytes of shared memory (bk*cc*R*S*4), "
             "more than " + std::to_string(detail::kMaxGpuSharedBytes);
    }
    if (blocks_x(p, c) > (std::int64_t{1} << 31) - 1 || ceil_div(p.at("K"), bk) > 65535) {
      return "the launch grid exceeds the GPU grid limits";
    }
    return {};
  }

  Config default_config(const Params& p, const TargetTraits&) const override {
    auto k = knobs(p);
    Config config{{"bq", detail::largest_at_most(k[0].values, 32)},
                  {"bk", detail::largest_at_most(k[1].values, 16)},
                  {"cc", detail::largest_at_most(k[4].values, 4)},
                  {"stage", 1},
                  {"unroll", 1}};
    config["tq"] = std::min<std::int64_t>(2, config["bq"]);
    config["tk"] = std::min<std::int64_t>(4, config["bk"]);
    // Large filters: fewer staged channels until the weights fit, else no staging.
    while (shared_bytes(p, config) > detail::kMaxGpuSharedBytes && config["cc"] > 1) config["cc"] /= 2;
    if (shared_bytes(p, config) > detail::kMaxGpuSharedBytes) config["stage"] = 0;
    return config;
  }

  KernelSource source(Backend backend, const Params& p, const Config& c) const override {
    if (backend != Backend::cuda && backend != Backend::opencl) {
      throw OpError("this conv2d variant has no " + std::string(to_string(backend)) +
                    " kernel (backends: cuda, opencl)");
    }
    if (auto reason = check(p, c, detail::any_target()); !reason.empty()) throw OpError("invalid conv2d configuration: " + reason);
    KernelSource out;
    out.backend = backend;
    out.file_name = backend == Backend::cuda ? "conv2d.cu" : "conv2d.cl";
    out.text = std::string(backend == Backend::cuda ? embedded::conv2d_cu() : embedded::conv2d_cl());
    detail::add_defines(out.defines, "CONV_", p);
    detail::add_defines(out.defines, "CONV_", c);
    out.launch.entry = "conv2d";
    out.launch.grid = {blocks_x(p, c), ceil_div(p.at("K"), c.at("bk")), 1};
    out.launch.block = {c.at("bq") / c.at("tq"), c.at("bk") / c.at("tk"), 1};
    out.launch.shared_bytes = shared_bytes(p, c);
    return out;
  }

  std::vector<std::pair<std::string, double>> features(const Params& p, const Config& c) const override {
    auto out = Op::features(p, c);
    auto add = [&out](const char* name, double value) { out.emplace_back(std::string("conv2d_gpu.") + name, value); };
    const double q = static_cast<double>(out_size(p, "W", "S")), k = static_cast<double>(p.at("K"));
    const double bq = static_cast<double>(c.at("bq")), bk = static_cast<double>(c.at("bk"));
    const double tq = static_cast<double>(c.at("tq")), tk = static_cast<double>(c.at("tk"));
    add("threads_per_block", (bq / tq) * (bk / tk));
    add("blocks", static_cast<double>(blocks_x(p, c)) * std::ceil(k / bk));
    add("accumulators", tq * tk);
    add("shared_bytes", static_cast<double>(shared_bytes(p, c)));
    add("waste_q", 1.0 - q / (std::ceil(q / bq) * bq));
    add("waste_k", 1.0 - k / (std::ceil(k / bk) * bk));
    add("thread_intensity", 2.0 * tq * tk / (tq + tk));
    return out;
  }

 private:
  static std::int64_t shared_bytes(const Params& p, const Config& c) {
    return c.at("stage") == 1 ? c.at("bk") * c.at("cc") * p.at("R") * p.at("S") * 4 : 0;
  }
  static std::int64_t blocks_x(const Params& p, const Config& c) {
    return ceil_div(out_size(p, "W", "S"), c.at("bq")) * p.at("N") * out_size(p, "H", "R");
  }
};

}  // namespace

std::unique_ptr<Op> make_conv2d_gpu_op() { return std::make_unique<Conv2dGpuOp>(); }

}  // namespace kestrel::ops
