// depthwise_conv2d: depthwise 2-D convolution (channel multiplier 1), fp32, in the
// blocked-channel layout (NCHWc) of conv2d_nchwc, with stride, zero padding, dilation and
// an optional fused epilogue (bias, residual, activation): MobileNet's 3x3 layers. The
// op's knob space, constraints and default; the kernel itself is
// ops/conv2d/depthwise_conv2d.c, the reference ops/conv2d/depthwise_conv2d_ref.c.
#include "builtin_ops.h"
#include "conv_shape.h"
#include "knob_util.h"

namespace kestrel::ops {
namespace {

using detail::ceil_div;
using detail::tiles_for;

const std::vector<std::int64_t> kOw = {1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16, 24, 28};
const std::vector<std::int64_t> kOh = {1, 2, 3, 4};
constexpr double kTypicalCores = 8;  // for the load-balance features

double waste(double used, double padded) { return padded > 0 ? (padded - used) / padded : 0.0; }

// The workload's shape: the convolution of conv2d with K = C and one input channel per
// output channel.
detail::ConvShape shape_of(const Params& p) {
  return {p.at("N"), 1, p.at("H"), p.at("W"), p.at("C"), p.at("R"), p.at("S"), p.at("stride"), p.at("pad"),
          p.at("dilation"), 1};
}

// Registers the micro-kernel needs on the target: oh*ow accumulators, oh weight vectors
// and one input vector, each of `block` floats (two ymm registers for 16 floats on AVX2).
std::int64_t registers_needed(const Config& c, std::int64_t block, const TargetTraits& traits) {
  return (c.at("oh") * c.at("ow") + c.at("oh") + 1) * traits.registers_per_vector(block);
}

class DepthwiseConv2dOp final : public Op {
 public:
  std::string_view name() const override { return "depthwise_conv2d"; }

  std::string_view description() const override {
    return "fp32 depthwise convolution (channel multiplier 1) in the blocked-channel layout: input[N][C/B][H][W][B] "
           "* weight[C/B][R][S][B] -> output[N][C/B][P][Q][B] (B = block, lanes past C ignored, written as 0), with "
           "stride, zero padding, dilation and an optional fused bias/residual/activation; a register tile of oh "
           "rows x ow columns, vectorised over the block, no padded copy of the input";
  }

  std::vector<ParamSpec> params() const override {
    std::vector<ParamSpec> out = {
        {"N", "batch size", 1, 65536, 1},
        {"C", "channels (input and output)", 1, 65536, 0},
        {"H", "input height", 1, 65536, 0},
        {"W", "input width", 1, 65536, 0},
        // The kernel unrolls the filter window of a tile completely: small filters only.
        {"R", "filter height", 1, 15, 3},
        {"S", "filter width", 1, 15, 3},
        {"stride", "stride in both dimensions", 1, 64, 1},
        {"pad", "zero padding on each side in both dimensions", 0, 1024, 0},
        {"dilation", "filter dilation in both dimensions", 1, 16, 1},
        detail::block_param(),
    };
    for (auto& spec : detail::conv_epilogue_params()) out.push_back(std::move(spec));
    return out;
  }

  void validate(const Params& p) const override {
    detail::validate_conv(name(), params(), p);
    detail::validate_block(name(), p);
    detail::check_tensor_sizes(name(), tensors(p));
  }

  std::vector<TensorSpec> tensors(const Params& params) const override {
    detail::ConvShape s = shape_of(params);
    std::int64_t b = params.at("block"), cb = ceil_div(s.k, b);
    std::vector<TensorSpec> out = {
        {"input", DType::f32, Role::input, {s.n, cb, s.h, s.w, b}},
        {"weight", DType::f32, Role::input, {cb, s.r, s.s, b}},
    };
    std::vector<std::int64_t> output = {s.n, cb, s.p(), s.q(), b};
    detail::add_conv_epilogue_tensors(out, params, {cb * b}, output);
    out.push_back({"output", DType::f32, Role::output, output});
    return out;
  }

  double flops(const Params& params) const override { return shape_of(params).flops(); }

  std::vector<Knob> knobs(const Params& params) const override {
    detail::ConvShape s = shape_of(params);
    return {
        {"ow", tiles_for(kOw, s.q()), "output columns per register tile"},
        {"oh", tiles_for(kOh, s.p()), "output rows per register tile (an input row is loaded once for all)"},
        {"unroll", {1, 2, 4}, "unroll count of the loop over the interior column tiles of a row"},
        {"split", {0, 1, 2}, "threads take: 0 = channel blocks, 1 = row tiles (oh), 2 = both"},
    };
  }

  std::string check(const Params& params, const Config& c, const TargetTraits& traits) const override {
    if (auto reason = detail::check_domains(knobs(params), c); !reason.empty()) return reason;
    const std::int64_t block = params.at("block");
    if (std::int64_t needed = registers_needed(c, block, traits); needed > traits.vector_registers) {
      return "register tile oh x ow = " + std::to_string(c.at("oh")) + "x" + std::to_string(c.at("ow")) + " needs " +
             std::to_string(needed) + " vector registers ((oh*ow accumulators + oh weights + 1 input) x " +
             std::to_string(traits.registers_per_vector(block)) + " per " + std::to_string(block) +
             "-float vector), more than the " + std::to_string(traits.vector_registers) + " of " +
             std::string(to_string(traits.isa));
    }
    return {};
  }

  Config default_config(const Params& params, const TargetTraits& traits) const override {
    // One output row of ow columns, ow at most half the register file (wider tiles spill
    // once the compiler keeps the filter's weights in registers: measured on AVX2); among
    // those the width with the fewest tiles per row (each reloads the filter), then the
    // fewest columns computed past Q: 7 for MobileNet's 7/14/28-column layers, 8 for 56
    // and 112 with 8-float blocks on AVX2, 4 with 16-float blocks there.
    detail::ConvShape s = shape_of(params);
    const std::int64_t q = s.q(), block = params.at("block");
    const std::int64_t cap = std::max<std::int64_t>(
        1, std::min<std::int64_t>(traits.vector_registers / (2 * traits.registers_per_vector(block)), 16));
    Config config{{"ow", 1}, {"oh", 1}, {"unroll", 1}, {"split", 2}};
    std::int64_t best_ow = 1, best_tiles = q, best_waste = 0;
    for (auto ow : tiles_for(kOw, q)) {
      config["ow"] = ow;
      if (ow > cap || registers_needed(config, block, traits) > traits.vector_registers) continue;
      const std::int64_t tiles = ceil_div(q, ow), waste = tiles * ow - q;
      if (tiles < best_tiles || (tiles == best_tiles && waste < best_waste)) {
        best_ow = ow;
        best_tiles = tiles;
        best_waste = waste;
      }
    }
    config["ow"] = best_ow;
    return config;
  }

  std::vector<Backend> backends() const override { return {Backend::cpu}; }

  KernelSource source(Backend backend, const Params& params, const Config& c) const override {
    if (backend != Backend::cpu) {
      throw OpError("depthwise_conv2d has no " + std::string(to_string(backend)) + " kernel (backends: cpu)");
    }
    if (auto reason = check(params, c, detail::any_target()); !reason.empty()) {
      throw OpError("invalid depthwise_conv2d configuration: " + reason);
    }
    KernelSource out{Backend::cpu, "depthwise_conv2d.c", std::string(embedded::depthwise_conv2d_c()), {}};
    detail::add_defines(out.defines, "CONV_", params);
    detail::add_defines(out.defines, "CONV_", c);
    return out;
  }

  KernelSource reference(const Params& params) const override {
    KernelSource out{Backend::cpu, "depthwise_conv2d_ref.c", std::string(embedded::depthwise_conv2d_ref_c()), {}};
    detail::add_defines(out.defines, "CONV_", params);
    return out;
  }

  double tolerance(const Params& params) const override {
    detail::ConvShape s = shape_of(params);
    return detail::dot_tolerance(static_cast<double>(s.r * s.s + 2));
  }

  // Parameters and knobs, then quantities derived from both. Every name is emitted for
  // every workload and configuration, in this order; all values are finite and >= 0.
  std::vector<std::pair<std::string, double>> features(const Params& params, const Config& c) const override {
    auto out = Op::features(params, c);
    auto add = [&out](const char* name, double value) {
      out.emplace_back(std::string("depthwise_conv2d.") + name, value);
    };
    const detail::ConvShape s = shape_of(params);
    const auto d = [](std::int64_t v) { return static_cast<double>(v); };
    const double b = d(params.at("block"));
    const double p = d(s.p()), q = d(s.q()), r = d(s.r), sw = d(s.s), stride = d(s.stride), dil = d(s.dilation);
    const double cb = std::ceil(d(s.k) / b);
    const std::int64_t ow = c.at("ow"), oh = c.at("oh"), split = c.at("split");
    const double pt = std::ceil(p / d(oh)), qt = std::ceil(q / d(ow));
    const double items = split == 0 ? cb : split == 1 ? pt : cb * pt;
    const double waves = std::ceil(items / kTypicalCores);
    // Input rows a row tile reads, and columns whose filter window crosses the border
    // (computed by checked tiles).
    const double tile_rows = (d(oh) - 1) * stride + (r - 1) * dil + 1;
    const double border_columns = std::min(q, std::ceil(d(s.pad) / stride) + d(ow));
    add("P", p);
    add("Q", q);
    add("flops", s.flops());
    add("bytes", (d(s.n) * cb * b * (d(s.h) * d(s.w) + p * q) + cb * b * r * sw) * 4);
    add("tile_input_bytes", tile_rows * ((d(ow) - 1) * stride + (sw - 1) * dil + 1) * b * 4);
    add("accumulators", d(oh * ow));
    add("register_share", d(oh * ow + oh + 1) / 32.0);
    // Input vector loads per multiply-add in the micro-kernel: each input row is loaded
    // once per tile for its ow columns and s taps, shared by the oh output rows.
    add("loads_per_fma", tile_rows * d(ow) * sw / (d(oh * ow) * r * sw));
    add("waste_ow", waste(q, qt * d(ow)));
    add("waste_oh", waste(p, pt * d(oh)));
    add("waste_c_lanes", waste(d(s.k), cb * b));
    add("border_share", border_columns / q);
    add("vector_width_share", b / 16.0);
    add("epilogue", d(detail::param_or(params, "bias", 0) + detail::param_or(params, "residual", 0)) +
                        (detail::param_or(params, "act", 0) != 0 ? 1.0 : 0.0));
    add("parallel_items", items * d(s.n));
    add("core_occupancy", std::min(items * d(s.n), kTypicalCores) / kTypicalCores);
    add("load_balance", items / (waves * kTypicalCores));
    add("flops_per_item", s.flops() / (d(s.n) * items));
    return out;
  }
};

}  // namespace

std::unique_ptr<Op> make_depthwise_conv2d_op() { return std::make_unique<DepthwiseConv2dOp>(); }

}  // namespace kestrel::ops
