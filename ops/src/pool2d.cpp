// pool2d: 2-D max or average pooling (windowed or global) of an fp32 tensor in the
// blocked-channel layout NCHWc of conv2d_nchwc (block 1: plain NCHW). The op's knob space,
// constraints and default; the kernel is ops/glue/pool2d.c, the reference
// ops/glue/pool2d_ref.c.
#include "builtin_ops.h"
#include "glue_util.h"

namespace kestrel::ops {
namespace {

using detail::ceil_div;
using detail::param_or;
using detail::tiles_for;

const std::vector<std::int64_t> kTw = {1, 2, 4, 8};

// The output size of one spatial dimension.
std::int64_t out_size(std::int64_t in, std::int64_t window, std::int64_t stride, std::int64_t pad) {
  return (in + 2 * pad - window) / stride + 1;
}

class Pool2dOp final : public Op {
 public:
  std::string_view name() const override { return "pool2d"; }

  std::string_view description() const override {
    return "2-D max or average pooling of an fp32 tensor in blocked channels NCHWc (block 1: NCHW): "
           "out[N][C/B][P][Q][B]; padding never counts (max ignores it, average divides by the positions in the "
           "image, ONNX count_include_pad=0); global=1 pools the whole H x W; counts one FLOP per window element";
  }

  std::vector<ParamSpec> params() const override {
    auto optional = [](ParamSpec spec) {
      spec.optional = true;
      return spec;
    };
    return {
        {"N", "batch size", 1, 65536, 1},
        {"C", "channels", 1, 65536, 0},
        {"H", "input height", 1, 65536, 0},
        {"W", "input width", 1, 65536, 0},
        optional({"R", "window height", 1, 64, 1}),
        optional({"S", "window width", 1, 64, 1}),
        optional({"stride", "stride in both dimensions", 1, 64, 1}),
        optional({"pad", "zero padding on each side, less than the window", 0, 63, 0}),
        {"kind", "0 max, 1 average", 0, 1, 0},
        optional({"global", "1: the window is the whole H x W plane, output 1 x 1", 0, 1, 0}),
        {"block", "channels per block: 1 (NCHW), 4, 8 or 16", 1, 16, 1},
    };
  }

  void validate(const Params& p) const override {
    detail::validate_specs("pool2d", params(), p);
    const std::int64_t block = p.at("block");
    if (block != 1 && block != 4 && block != 8 && block != 16) {
      throw OpError("pool2d: parameter block=" + std::to_string(block) + " is not 1, 4, 8 or 16");
    }
    const std::int64_t r = param_or(p, "R", 1), s = param_or(p, "S", 1), pad = param_or(p, "pad", 0);
    if (param_or(p, "global", 0) != 0) {
      if (r != 1 || s != 1 || param_or(p, "stride", 1) != 1 || pad != 0) {
        throw OpError("pool2d: global pooling takes the whole plane; leave out R, S, stride and pad");
      }
    } else {
      if (pad >= r || pad >= s) {
        throw OpError("pool2d: pad=" + std::to_string(pad) + " must be less than the window " + std::to_string(r) +
                      "x" + std::to_string(s) + " (a window entirely in the padding has no value)");
      }
      if (p.at("H") + 2 * pad < r || p.at("W") + 2 * pad < s) {
        throw OpError("pool2d: the window " + std::to_string(r) + "x" + std::to_string(s) +
                      " is larger than the padded input " + std::to_string(p.at("H") + 2 * pad) + "x" +
                      std::to_string(p.at("W") + 2 * pad));
      }
    }
    detail::check_tensor_sizes("pool2d", tensors(p));
  }

  std::vector<TensorSpec> tensors(const Params& p) const override {
    const std::int64_t n = p.at("N"), b = p.at("block"), cb = ceil_div(p.at("C"), b);
    return {
        {"input", DType::f32, Role::input, {n, cb, p.at("H"), p.at("W"), b}},
        {"output", DType::f32, Role::output, {n, cb, out_p(p), out_q(p), b}},
    };
  }

  double flops(const Params& p) const override {
    const double window = global(p) ? static_cast<double>(p.at("H") * p.at("W"))
                                    : static_cast<double>(param_or(p, "R", 1) * param_or(p, "S", 1));
    return static_cast<double>(p.at("N") * p.at("C") * out_p(p) * out_q(p)) * window;
  }

  std::vector<Knob> knobs(const Params& p) const override {
    return {
        {"tw", tiles_for(kTw, out_q(p)), "output columns computed together (independent accumulators)"},
        {"split", {0, 1}, "threads take: 0 = (image, channel block) planes, 1 = output rows"},
    };
  }

  std::string check(const Params& p, const Config& c, const TargetTraits& traits) const override {
    if (auto reason = detail::check_domains(knobs(p), c); !reason.empty()) return reason;
    // One column at a time is always allowed: the block is the workload's, not a knob.
    if (std::int64_t registers = live_registers(p, c.at("tw"), traits);
        c.at("tw") > 1 && registers > traits.vector_registers) {
      return "tw=" + std::to_string(c.at("tw")) + " accumulators of block=" + std::to_string(p.at("block")) +
             " lanes need " + std::to_string(registers) + " vector registers, more than the " +
             std::to_string(traits.vector_registers) + " of " + std::string(to_string(traits.isa));
    }
    return {};
  }

  // Up to 4 columns at once (fewer where the blocks take several registers each); planes
  // per thread when there are at least 4 per core, rows otherwise.
  Config default_config(const Params& p, const TargetTraits& traits) const override {
    std::int64_t tw = 1;
    for (auto v : tiles_for(kTw, out_q(p))) {
      if (v <= 4 && live_registers(p, v, traits) <= traits.vector_registers) tw = v;
    }
    const std::int64_t planes = p.at("N") * ceil_div(p.at("C"), p.at("block"));
    return {{"tw", tw}, {"split", planes >= 4 * std::max(traits.cores, 1) ? 0 : 1}};
  }

  std::vector<Backend> backends() const override { return {Backend::cpu}; }

  KernelSource source(Backend backend, const Params& p, const Config& c) const override {
    if (backend != Backend::cpu) {
      throw OpError("pool2d has no " + std::string(to_string(backend)) + " kernel (backends: cpu)");
    }
    if (auto reason = check(p, c, detail::any_target()); !reason.empty()) {
      throw OpError("invalid pool2d configuration: " + reason);
    }
    KernelSource out{Backend::cpu, "pool2d.c", std::string(embedded::pool2d_c()), {}};
    detail::add_defines(out.defines, "POOL_", detail::with_fallbacks(params(), p));
    detail::add_defines(out.defines, "POOL_", c);
    return out;
  }

  KernelSource reference(const Params& p) const override {
    KernelSource out{Backend::cpu, "pool2d_ref.c", std::string(embedded::pool2d_ref_c()), {}};
    detail::add_defines(out.defines, "POOL_", detail::with_fallbacks(params(), p));
    return out;
  }

  // A maximum is exact. A mean of k window values in [-1, 1] accumulated in fp32 and
  // scaled by 1/k: the error of a k-term sum (detail::dot_tolerance); one value too many
  // or too few, or a count that includes the padding, is off by ~1/k, far more.
  double tolerance(const Params& p) const override {
    if (p.at("kind") == 0) return 0.0;
    const std::int64_t window = global(p) ? p.at("H") * p.at("W") : param_or(p, "R", 1) * param_or(p, "S", 1);
    return detail::dot_tolerance(static_cast<double>(window));
  }

  std::vector<std::pair<std::string, double>> features(const Params& p, const Config& c) const override {
    auto out = Op::features(p, c);
    const auto d = [](std::int64_t v) { return static_cast<double>(v); };
    const double b = d(p.at("block")), ch = d(p.at("C")), padded = std::ceil(ch / b) * b;
    out.emplace_back("pool2d.global", d(param_or(p, "global", 0)));
    out.emplace_back("pool2d.window", flops(p) / std::max(1.0, d(p.at("N")) * ch * d(out_p(p) * out_q(p))));
    out.emplace_back("pool2d.waste_lanes", (padded - ch) / padded);
    out.emplace_back("pool2d.bytes_read", d(p.at("N")) * padded * d(p.at("H") * p.at("W")) * 4);
    out.emplace_back("pool2d.tasks", d(p.at("N")) * std::ceil(ch / b) * (c.at("split") ? d(out_p(p)) : 1.0));
    return out;
  }

 private:
  static bool global(const Params& p) { return param_or(p, "global", 0) != 0; }
  static std::int64_t out_p(const Params& p) {
    return global(p) ? 1 : out_size(p.at("H"), param_or(p, "R", 1), param_or(p, "stride", 1), param_or(p, "pad", 0));
  }
  static std::int64_t out_q(const Params& p) {
    return global(p) ? 1 : out_size(p.at("W"), param_or(p, "S", 1), param_or(p, "stride", 1), param_or(p, "pad", 0));
  }
  // tw accumulators of one block each, the loaded vector and a spare.
  static std::int64_t live_registers(const Params& p, std::int64_t tw, const TargetTraits& traits) {
    return (tw + 2) * traits.registers_per_vector(p.at("block"));
  }
};

}  // namespace

std::unique_ptr<Op> make_pool2d_op() { return std::make_unique<Pool2dOp>(); }

}  // namespace kestrel::ops
