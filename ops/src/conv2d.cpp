// conv2d: direct 2-D convolution, fp32 NCHW, with stride, zero padding and dilation.
// The op's knob space, constraints and default; the kernel itself is
// ops/conv2d/conv2d.c, the reference ops/conv2d/conv2d_ref.c.
#include "builtin_ops.h"
#include "conv_shape.h"
#include "knob_util.h"

namespace kestrel::ops {
namespace {

using detail::tiles_for;

const std::vector<std::int64_t> kTk = {1, 2, 3, 4, 6, 8, 12, 16, 24, 32};
const std::vector<std::int64_t> kTw = {1, 2, 4, 7, 8, 14, 16, 24, 28, 32, 48, 56, 64};
const std::vector<std::int64_t> kTh = {1, 2, 4, 7, 8, 14, 16, 28, 32, 56, 64};
const std::vector<std::int64_t> kTc = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024};
constexpr std::int64_t kAccumulatorBudget = 32;
constexpr double kTypicalCores = 8;  // for the load-balance features

// The share of `padded` that is padding beyond `used` (0 when nothing is padded).
double waste(double used, double padded) { return padded > 0 ? (padded - used) / padded : 0.0; }

using Shape = detail::ConvShape;

Shape shape_of(const Params& p) { return detail::conv_shape(p); }

class Conv2dOp final : public Op {
 public:
  std::string_view name() const override { return "conv2d"; }

  std::string_view description() const override {
    return "fp32 NCHW direct convolution out[N][K][P][Q] = input[N][C][H][W] * weight[K][C][R][S] with stride, "
           "zero padding and dilation; vectorised over output columns, register-tiled over output channels";
  }

  std::vector<ParamSpec> params() const override { return detail::conv_params(); }

  void validate(const Params& p) const override {
    detail::validate_conv(name(), params(), p);
    detail::check_tensor_sizes(name(), tensors(p));
  }

  std::vector<TensorSpec> tensors(const Params& params) const override {
    Shape s = shape_of(params);
    return {
        {"input", DType::f32, Role::input, {s.n, s.c, s.h, s.w}},
        {"weight", DType::f32, Role::input, {s.k, s.c, s.r, s.s}},
        {"output", DType::f32, Role::output, {s.n, s.k, s.p(), s.q()}},
    };
  }

  double flops(const Params& params) const override { return shape_of(params).flops(); }

  std::vector<Knob> knobs(const Params& params) const override {
    Shape s = shape_of(params);
    return {
        {"tk", tiles_for(kTk, s.k), "output channels per register tile (one broadcast weight each)"},
        {"th", tiles_for(kTh, s.p()), "output rows per work block"},
        {"tw", tiles_for(kTw, s.q()), "output columns per register tile; multiple of vec"},
        {"tc", tiles_for(kTc, s.c), "input channels per block (outputs are revisited C/tc times)"},
        {"unroll", {1, 2, 4}, "unroll count of the input-channel loop"},
        {"vec", {1, 4, 8, 16}, "floats per vector register along output columns (1 = scalar)"},
        {"split", {0, 1, 2}, "threads take: 0 = output-channel blocks (tk), 1 = row blocks (th), 2 = both"},
    };
  }

  std::string check(const Params& params, const Config& c, const TargetTraits& target) const override {
    if (auto reason = detail::check_domains(knobs(params), c); !reason.empty()) return reason;
    std::int64_t tk = c.at("tk"), tw = c.at("tw"), vec = c.at("vec");
    if (tw % vec != 0) return "tw=" + std::to_string(tw) + " is not a multiple of vec=" + std::to_string(vec);
    std::int64_t accumulators = tk * (tw / vec);
    if (accumulators > kAccumulatorBudget) {
      return "register tile tk x tw = " + std::to_string(tk) + "x" + std::to_string(tw) + " needs " +
             std::to_string(accumulators) + " vector accumulators (tk*tw/vec), more than " +
             std::to_string(kAccumulatorBudget);
    }
    if (std::int64_t registers = (accumulators + tw / vec) * target.registers_per_vector(vec) + 1;
        registers > target.vector_registers) {
      return "register tile tk x tw = " + std::to_string(tk) + "x" + std::to_string(tw) + " with vec=" +
             std::to_string(vec) + " needs " + std::to_string(registers) + " vector registers on " +
             std::string(to_string(target.isa)) + " (tk*tw/vec accumulators + tw/vec input vectors + 1 "
             "broadcast), more than its " + std::to_string(target.vector_registers);
    }
    return {};
  }

  Config default_config(const Params& params, const TargetTraits& target) const override {
    Shape s = shape_of(params);
    std::int64_t q = s.q();
    // Two vectors of the target's width along output columns by 6 output channels (12
    // accumulators; 8-float vectors on AVX-512 too, whose measured best they were),
    // narrower for narrow outputs.
    const std::int64_t widest = std::min(8, target.vector_floats);
    std::int64_t vec = q >= widest ? widest : q >= 3 && widest >= 4 ? 4 : 1;
    std::int64_t tw = 1;
    for (auto v : tiles_for(kTw, q)) {
      if (v % vec == 0 && v <= (vec == 1 ? std::min<std::int64_t>(q, 8) : 2 * vec)) tw = std::max(tw, v);
    }
    if (tw % vec != 0) tw = vec;
    // As many output channels (up to 6) as the registers hold beside the input vectors.
    std::int64_t tk = detail::largest_at_most(tiles_for(kTk, s.k), 6);
    auto registers = [&](std::int64_t channels) {
      return (channels + 1) * (tw / vec) * target.registers_per_vector(vec) + 1;
    };
    while (tk > 1 && registers(tk) > target.vector_registers) tk = detail::largest_at_most(tiles_for(kTk, s.k), tk - 1);
    if (registers(tk) > target.vector_registers) tw = vec;
    return {{"tk", tk},
            {"th", detail::largest_at_most(tiles_for(kTh, s.p()), 4)},
            {"tw", tw},
            {"tc", detail::largest_at_most(tiles_for(kTc, s.c), 64)},
            {"unroll", 1},
            {"vec", vec},
            {"split", 2}};
  }

  std::vector<Backend> backends() const override { return {Backend::cpu}; }

  KernelSource source(Backend backend, const Params& params, const Config& c) const override {
    if (backend != Backend::cpu) {
      throw OpError("conv2d has no " + std::string(to_string(backend)) + " kernel (backends: cpu)");
    }
    if (auto reason = check(params, c, detail::any_target()); !reason.empty()) throw OpError("invalid conv2d configuration: " + reason);
    KernelSource out{Backend::cpu, "conv2d.c", std::string(embedded::conv2d_c()), {}};
    detail::add_defines(out.defines, "CONV_", params);
    detail::add_defines(out.defines, "CONV_", c);
    return out;
  }

  KernelSource reference(const Params& params) const override {
    KernelSource out{Backend::cpu, "conv2d_ref.c", std::string(embedded::conv2d_ref_c()), {}};
    detail::add_defines(out.defines, "CONV_", params);
    return out;
  }

  double tolerance(const Params& params) const override {
    Shape s = shape_of(params);
    return detail::dot_tolerance(static_cast<double>(s.c * s.r * s.s));
  }

  // Parameters and knobs, then quantities derived from both. Every name is emitted for
  // every workload and configuration, in this order; all values are finite and >= 0.
  std::vector<std::pair<std::string, double>> features(const Params& params, const Config& c) const override {
    auto out = Op::features(params, c);
    auto add = [&out](const char* name, double value) { out.emplace_back(std::string("conv2d.") + name, value); };
    const Shape s = shape_of(params);
    const auto d = [](std::int64_t v) { return static_cast<double>(v); };
    const double p = d(std::max<std::int64_t>(s.p(), 1)), q = d(std::max<std::int64_t>(s.q(), 1));
    const double kk = d(s.k), cc = d(s.c), r = d(s.r), sw = d(s.s), stride = d(s.stride), dil = d(s.dilation);
    const std::int64_t tk = c.at("tk"), th = c.at("th"), tw = c.at("tw"), tc = c.at("tc"), vec = c.at("vec"),
                       split = c.at("split");
    const double tc_eff = std::min(d(tc), cc), th_eff = std::min(d(th), p);
    const double kb = std::ceil(kk / d(tk)), pb = std::ceil(p / d(th)), qb = std::ceil(q / d(tw)),
                 cb = std::ceil(cc / d(tc));
    const double accumulators = d(tk * std::max<std::int64_t>(tw / vec, 1));
    const double items = split == 0 ? kb : split == 1 ? pb : kb * pb;
    const double waves = std::ceil(items / kTypicalCores);
    const double flops = 2.0 * d(s.n) * kk * p * q * cc * r * sw;
    // Input floats one register tile reads per channel: R rows of its TW columns plus
    // the filter's reach, in every stride phase.
    const double tile_row = d(tw) * stride + (sw - 1) * dil;
    // Input rows one block of TH output rows touches.
    const double block_rows = (th_eff - 1) * stride + (r - 1) * dil + 1;

    add("P", p);
    add("Q", q);
    add("flops", flops);
    add("reduction", cc * r * sw);
    // Footprints in bytes: the register tile's weights and input per channel block, and
    // one work block's input, weights and output.
    add("tile_weight_bytes", d(tk) * tc_eff * r * sw * 4);
    add("tile_input_bytes", tc_eff * r * tile_row * 4);
    add("block_input_bytes", tc_eff * block_rows * (q * stride + (sw - 1) * dil) * 4);
    add("block_output_bytes", d(tk) * th_eff * q * 4);
    add("packed_image_bytes", cc * (d(s.h) + 2 * d(s.pad)) * (qb * d(tw) + (sw - 1) * dil) * 4);
    // Register pressure of the tile.
    add("accumulators", accumulators);
    add("accumulator_share", accumulators / d(kAccumulatorBudget));
    add("vectors_per_row", d(tw / vec));
    // Padding waste: channels, rows and columns computed on zeros, partial channel blocks.
    add("waste_tk", waste(kk, kb * d(tk)));
    add("waste_th", waste(p, pb * d(th)));
    add("waste_tw", waste(q, qb * d(tw)));
    add("waste_tc", waste(cc, cb * d(tc)));
    // Useful share of the lanes computed, and the vector width.
    add("vector_utilisation", (kk * q) / (kb * d(tk) * qb * d(tw)));
    add("vector_width_share", d(vec) / 16.0);
    // Arithmetic intensity: per (c, r, s) step a tile loads TW input floats and TK weights
    // for TK*TW multiply-adds; per block, flops over the floats the block moves (output
    // read and written once per channel block).
    add("micro_intensity", 2.0 * d(tk * tw) / d(tk + tw));
    const double block_flops = 2.0 * d(tk) * th_eff * q * tc_eff * r * sw;
    const double block_floats = d(tk) * tc_eff * r * sw + tc_eff * block_rows * (q * stride + (sw - 1) * dil) +
                                2.0 * d(tk) * th_eff * q;
    add("block_intensity", block_flops / block_floats);
    add("output_passes", cb);
    add("channel_iterations_per_unroll", tc_eff / d(c.at("unroll")));
    // Parallelism: work items (per image) against a typical core count, and their balance.
    add("parallel_items", items);
    add("core_occupancy", std::min(items, kTypicalCores) / kTypicalCores);
    add("load_balance", items / (waves * kTypicalCores));
    add("flops_per_item", flops / (d(s.n) * items));
    return out;
  }
};

}  // namespace

std::unique_ptr<Op> make_conv2d_op() { return std::make_unique<Conv2dOp>(); }

}  // namespace kestrel::ops
