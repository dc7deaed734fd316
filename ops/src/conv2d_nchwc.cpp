// conv2d_nchwc: direct 2-D convolution, fp32, in the blocked-channel layout (NCHWc, the
// layout of oneDNN's nChw16c), with stride, zero padding, dilation, groups and a fused
// epilogue (bias, residual, activation). The op's knob space, constraints and default; the kernel itself is ops/conv2d/conv2d_nchwc.c, the
// reference ops/conv2d/conv2d_nchwc_ref.c. The layout transform from NCHW is the op
// layout_nchwc (layout_nchwc.cpp), measured on its own.
#include "builtin_ops.h"
#include "conv_shape.h"
#include "knob_util.h"
#include "vendor_kernels.h"

namespace kestrel::ops {
namespace {

using detail::ceil_div;
using detail::ConvShape;
using detail::register_budget;
using detail::tile_registers;  // an ow x ok tile
using detail::tiles_for;

const std::vector<std::int64_t> kOw = {1, 2, 3, 4, 6, 7, 8, 12, 14, 16, 24, 28};
const std::vector<std::int64_t> kOk = {1, 2, 3, 4, 6, 8};
const std::vector<std::int64_t> kOh = {1, 2, 4, 7, 8, 14, 16, 28, 56};
const std::vector<std::int64_t> kTc = {1, 2, 4, 8, 16, 32, 64};
// Vector registers of the largest common register files (AVX-512: 32 zmm, AArch64: 32 q):
// the tile's accumulators, its weight vectors and one broadcast must fit.
constexpr std::int64_t kRegisterBudget = 32;
constexpr double kTypicalCores = 8;  // for the load-balance features

double waste(double used, double padded) { return padded > 0 ? (padded - used) / padded : 0.0; }

class Conv2dNchwcOp final : public Op {
 public:
  std::string_view name() const override { return "conv2d_nchwc"; }

  std::string_view description() const override {
    return "fp32 direct convolution in the blocked-channel layout: input[N][C/B][H][W][B] * "
           "weight[K/B][C/groups/B][R][S][B][B] -> output[N][K/B][P][Q][B] (B = block, lanes past C ignored, past K "
           "written as 0), with stride, zero padding, dilation, groups (C/groups and K/groups multiples of B) and an "
           "optional fused bias/residual/activation; a register tile of ow output columns x ok channel blocks, "
           "vectorised over the block. The NCHW -> NCHWc transform is the op layout_nchwc";
  }

  std::vector<ParamSpec> params() const override {
    auto out = detail::conv_params();
    out.push_back(detail::block_param());
    for (auto& spec : detail::conv_epilogue_params()) out.push_back(std::move(spec));
    out.push_back({"plain_in", "1 = the input is plain NCHW [N][C][H][W] (C < block, no groups), gathered into the "
                   "kernel's padded copy: an RGB image needs no blocked copy", 0, 1, 0, true});
    return out;
  }

  void validate(const Params& p) const override {
    detail::validate_conv(name(), params(), p);
    detail::validate_block(name(), p);
    const std::int64_t block = p.at("block");
    ConvShape s = detail::conv_shape(p);
    if (s.groups > 1 && ((s.c / s.groups) % block != 0 || (s.k / s.groups) % block != 0)) {
      throw OpError("conv2d_nchwc: groups=" + std::to_string(s.groups) + " needs C/groups and K/groups to be multiples "
                    "of block=" + std::to_string(block) + " (C/groups=" + std::to_string(s.c / s.groups) +
                    ", K/groups=" + std::to_string(s.k / s.groups) + "); use a smaller block or conv2d");
    }
    if (detail::param_or(p, "plain_in", 0) != 0 && (s.c >= block || s.groups != 1)) {
      throw OpError("conv2d_nchwc: plain_in=1 needs C < block and no groups (C=" + std::to_string(s.c) +
                    ", block=" + std::to_string(block) + ", groups=" + std::to_string(s.groups) + ")");
    }
    detail::check_tensor_sizes(name(), tensors(p));
  }

  std::vector<TensorSpec> tensors(const Params& params) const override {
    ConvShape s = detail::conv_shape(params);
    std::int64_t b = params.at("block"), cb = ceil_div(s.c, b), kb = ceil_div(s.k, b);
    const bool plain_in = detail::param_or(params, "plain_in", 0) != 0;
    std::vector<TensorSpec> out = {
        {"input", DType::f32, Role::input,
         plain_in ? std::vector<std::int64_t>{s.n, s.c, s.h, s.w} : std::vector<std::int64_t>{s.n, cb, s.h, s.w, b}},
        {"weight", DType::f32, Role::input, {kb, cb / s.groups, s.r, s.s, b, b}},
    };
    std::vector<std::int64_t> output = {s.n, kb, s.p(), s.q(), b};
    detail::add_conv_epilogue_tensors(out, params, {kb * b}, output);
    out.push_back({"output", DType::f32, Role::output, output});
    return out;
  }

  double flops(const Params& params) const override { return detail::conv_shape(params).flops(); }

  std::vector<Knob> knobs(const Params& params) const override {
    ConvShape s = detail::conv_shape(params);
    // Blocks of one group (all of them without groups).
    std::int64_t kb = ceil_div(s.k, params.at("block")) / s.groups, cb = ceil_div(s.c, params.at("block")) / s.groups;
    std::vector<std::int64_t> ok;
    for (auto v : kOk) {
      if (kb % v == 0) ok.push_back(v);
    }
    return {
        {"ow", tiles_for(kOw, s.q()), "output columns per register tile (one broadcast input float each)"},
        {"ok", ok, "output-channel blocks per register tile (one weight vector each); divides K/groups/block"},
        {"oh", tiles_for(kOh, s.p()), "output rows per work block"},
        {"tc", tiles_for(kTc, cb), "input-channel blocks per pass (outputs are revisited C/groups/block/tc times)"},
        {"unroll", {1, 2, 4, 8, 16}, "unroll count of the loop over the lanes of an input-channel block"},
        {"split", {0, 1, 2}, "threads take: 0 = groups of ok channel blocks, 1 = row blocks (oh), 2 = both"},
    };
  }

  std::string check(const Params& params, const Config& c, const TargetTraits& target) const override {
    if (auto reason = detail::check_domains(knobs(params), c); !reason.empty()) return reason;
    std::int64_t ow = c.at("ow"), ok = c.at("ok");
    if (std::int64_t registers = tile_registers(ow, ok, params.at("block"), target);
        registers > register_budget(params.at("block"), target)) {
      return "register tile ow x ok = " + std::to_string(ow) + "x" + std::to_string(ok) + " of " +
             std::to_string(params.at("block")) + "-float blocks needs " + std::to_string(registers) +
             " vector registers on " + std::string(to_string(target.isa)) +
             " (ow*ok accumulators + ok weight vectors + 1 broadcast), more than its " +
             std::to_string(target.vector_registers);
    }
    return {};
  }

  Config default_config(const Params& params, const TargetTraits& target) const override {
    ConvShape s = detail::conv_shape(params);
    auto domains = knobs(params);
    const auto& ok_domain = domains[1].values;
    // Two channel blocks where there are two, and as many output columns as the target's
    // registers hold beside their weight vectors and the broadcast: 14x2 (28
    // accumulators) with 16-float blocks on AVX-512, measured within ~10% of oneDNN on
    // ResNet-18's layers; 6x2 with 8-float blocks on AVX2's 16 registers.
    // One block only when two do not fit with at least two columns (blocks much wider
    // than the registers). On AVX2 the tuner's best tiles were 2 blocks of 2-4 columns
    // (16-float blocks) and 4-6 columns (8-float blocks), with the lane loop unrolled in
    // full: small tiles (at most 12 accumulator registers) unroll it fully, larger ones
    // (AVX-512's 14x2) by 4, as measured there.
    const std::int64_t block = params.at("block");
    const std::int64_t budget = register_budget(block, target);
    // The widest ow (in the domain) whose tile with `ok` blocks fits; 0 when none does.
    auto widest_ow = [&](std::int64_t ok) -> std::int64_t {
      std::int64_t ow = std::min<std::int64_t>(s.q(), 14);
      while (ow >= 1 && tile_registers(ow, ok, block, target) > budget) --ow;
      return ow < 1 ? 0 : detail::largest_at_most(tiles_for(kOw, s.q()), ow);
    };
    std::int64_t ok = std::find(ok_domain.begin(), ok_domain.end(), 2) != ok_domain.end() ? 2 : 1;
    std::int64_t ow = widest_ow(ok);
    if (ok == 2 && ow < 2) {
      ok = 1;
      ow = widest_ow(1);
    }
    const bool small_tile = ow * ok * target.registers_per_vector(block) <= 12;
    return {{"ow", ow},
            {"ok", ok},
            {"oh", detail::largest_at_most(tiles_for(kOh, s.p()), 4)},
            {"tc", detail::largest_at_most(domains[3].values, 4)},
            {"unroll", small_tile ? std::min<std::int64_t>(block, 16) : 4},
            {"split", 2}};
  }

  std::vector<Backend> backends() const override { return {Backend::cpu}; }

  KernelSource source(Backend backend, const Params& params, const Config& c) const override {
    if (backend != Backend::cpu) {
      throw OpError("conv2d_nchwc has no " + std::string(to_string(backend)) + " kernel (backends: cpu)");
    }
    if (auto reason = check(params, c, detail::any_target()); !reason.empty()) throw OpError("invalid conv2d_nchwc configuration: " + reason);
    KernelSource out{Backend::cpu, "conv2d_nchwc.c", std::string(embedded::conv2d_nchwc_c()), {}};
    detail::add_defines(out.defines, "CONV_", params);
    detail::add_defines(out.defines, "CONV_", c);
    return out;
  }

  KernelSource reference(const Params& params) const override {
    KernelSource out{Backend::cpu, "conv2d_nchwc_ref.c", std::string(embedded::conv2d_nchwc_ref_c()), {}};
    detail::add_defines(out.defines, "CONV_", params);
    return out;
  }

  double tolerance(const Params& params) const override {
    ConvShape s = detail::conv_shape(params);
    return detail::dot_tolerance(static_cast<double>(s.c / s.groups * s.r * s.s + 2));
  }

  // oneDNN's convolution on this op's own blocked layouts (nothing reordered).
  std::vector<VendorKernel> vendor_kernels(const Params& params) const override {
    if (auto kernel = detail::onednn_conv2d_nchwc(params)) return {std::move(*kernel)};
    return {};
  }

  // Parameters and knobs, then quantities derived from both. Every name is emitted for
  // every workload and configuration, in this order; all values are finite and >= 0.
  std::vector<std::pair<std::string, double>> features(const Params& params, const Config& c) const override {
    auto out = Op::features(params, c);
    // The input's layout is left out: it changes only the padded copy, and the cost models
    // trained before it existed keep their features.
    std::erase_if(out, [](const auto& f) { return f.first == "param.plain_in"; });
    auto add = [&out](const char* name, double value) {
      out.emplace_back(std::string("conv2d_nchwc.") + name, value);
    };
    const ConvShape s = detail::conv_shape(params);
    const auto d = [](std::int64_t v) { return static_cast<double>(v); };
    const double b = d(params.at("block"));
    const double p = d(s.p()), q = d(s.q()), r = d(s.r), sw = d(s.s), stride = d(s.stride), dil = d(s.dilation);
    // Input-channel blocks of a group (the reduction's), output-channel blocks of all groups.
    const double cb = std::ceil(d(s.c) / b) / d(s.groups), kb = std::ceil(d(s.k) / b);
    const std::int64_t ow = c.at("ow"), ok = c.at("ok"), oh = c.at("oh"), tc = c.at("tc"), split = c.at("split");
    const double tc_eff = std::min(d(tc), cb), oh_eff = std::min(d(oh), p);
    const double groups = kb / d(ok), pb = std::ceil(p / d(oh)), qb = std::ceil(q / d(ow)), passes = std::ceil(cb / d(tc));
    const double items = split == 0 ? groups : split == 1 ? pb : groups * pb;
    const double waves = std::ceil(items / kTypicalCores);
    const double lanes = std::min(d(s.c), b);
    add("P", p);
    add("Q", q);
    add("flops", s.flops());
    add("reduction", d(s.c / s.groups) * r * sw);
    // Footprints in bytes: one pass's weights for a group, one tile's input per pass, one
    // work block's output.
    add("pass_weight_bytes", d(ok) * tc_eff * r * sw * b * b * 4);
    add("tile_input_bytes", tc_eff * r * (d(ow) * stride + (sw - 1) * dil) * b * 4);
    add("block_output_bytes", d(ok) * b * oh_eff * q * 4);
    // Register pressure.
    add("accumulators", d(ow * ok));
    add("register_share", d(ow * ok + ok + 1) / d(kRegisterBudget));
    // Padding waste: columns computed past Q, lanes past C and K.
    add("waste_ow", waste(q, qb * d(ow)));
    add("waste_c_lanes", waste(d(s.c), std::ceil(d(s.c) / lanes) * lanes));
    add("waste_k_lanes", waste(d(s.k), kb * b));
    add("vector_width_share", b / 16.0);
    // Arithmetic intensity of the micro-kernel: per lane step ok weight vectors and ow
    // broadcasts feed ow*ok vector FMAs.
    add("micro_intensity", 2.0 * d(ow * ok) * b / (d(ok) * b + d(ow)));
    add("output_passes", passes);
    add("lane_iterations_per_unroll", lanes / d(c.at("unroll")));
    // Parallelism: work items (per image) against a typical core count, and their balance.
    add("parallel_items", items);
    add("core_occupancy", std::min(items, kTypicalCores) / kTypicalCores);
    add("load_balance", items / (waves * kTypicalCores));
    add("flops_per_item", s.flops() / (d(s.n) * items));
    // Fused epilogue: terms added to each output and whether an activation follows.
    add("epilogue_terms", d(detail::param_or(params, "bias", 0) + detail::param_or(params, "residual", 0)));
    add("activation", detail::param_or(params, "act", 0) != 0 ? 1.0 : 0.0);
    return out;
  }
};

}  // namespace

std::unique_ptr<Op> make_conv2d_nchwc_op() { return std::make_unique<Conv2dNchwcOp>(); }

}  // namespace kestrel::ops
