// conv2d_winograd: 3x3 stride-1 convolution by Winograd's F(mxm, 3x3), m = 4 or 2, in the
// blocked-channel layout, with conv2d_nchwc's fused epilogue. Its weights are the Winograd
// transform of the filter, [(m+2)^2][K/B][C/B][B][B] (the model runtime's winograd_weight
// and winograd2_weight layouts). The kernel is ops/conv2d/conv2d_winograd.c, the reference
// ops/conv2d/conv2d_winograd_ref.c.
#include "builtin_ops.h"
#include "conv_shape.h"
#include "knob_util.h"

namespace kestrel::ops {
namespace {

using detail::ceil_div;
using detail::ConvShape;
using detail::register_budget;
using detail::tile_registers;  // an mr x nr tile

const std::vector<std::int64_t> kNt = {4, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256};
const std::vector<std::int64_t> kMr = {1, 2, 3, 4, 6, 8, 12, 14};
const std::vector<std::int64_t> kNr = {1, 2, 3, 4, 6};
// The output tile's side m (4 or 2) and the positions of the (m+2)x(m+2) input patch.
std::int64_t tile_side(const Params& p) { return detail::param_or(p, "m", 4); }
std::int64_t positions(const Params& p) { return (tile_side(p) + 2) * (tile_side(p) + 2); }

// Output tiles of m x m per image.
std::int64_t tiles(const Params& p) {
  const ConvShape s = detail::conv_shape(p);
  return ceil_div(s.p(), tile_side(p)) * ceil_div(s.q(), tile_side(p));
}

class Conv2dWinogradOp final : public Op {
 public:
  std::string_view name() const override { return "conv2d_winograd"; }

  std::string_view description() const override {
    return "fp32 3x3 convolution with stride 1 by Winograd's F(mxm,3x3), m = 4 or 2, blocked-channel layout: "
           "input[N][C/B][H][W][B] * weight[(m+2)^2][K/B][C/B][B][B] (the filter's Winograd transform) -> "
           "output[N][K/B][P][Q][B], with zero padding and conv2d_nchwc's optional fused bias/residual/activation; "
           "36 products per 4x4 output tile (m=4) or 16 per 2x2 (m=2) instead of 144 or 36, a register tile of "
           "mr tiles x nr channel blocks in the (m+2)^2 matrix products";
  }

  std::vector<ParamSpec> params() const override {
    auto out = detail::conv_params();
    out.push_back(detail::block_param());
    out.push_back({"m", "output tile side: 4 = F(4x4,3x3), 4x fewer multiplies, weights 4x the filter's size; "
                   "2 = F(2x2,3x3), 2.25x fewer, weights 1.8x", 2, 4, 4, true});
    for (auto& spec : detail::conv_epilogue_params()) out.push_back(std::move(spec));
    return out;
  }

  void validate(const Params& p) const override {
    detail::validate_conv(name(), params(), p);
    detail::validate_block(name(), p);
    if (tile_side(p) != 2 && tile_side(p) != 4) {
      throw OpError("conv2d_winograd: parameter m=" + std::to_string(tile_side(p)) + " is not 2 or 4");
    }
    const ConvShape s = detail::conv_shape(p);
    if (s.r != 3 || s.s != 3 || s.stride != 1 || s.dilation != 1 || s.groups != 1) {
      throw OpError("conv2d_winograd: only 3x3 filters with stride 1, no dilation and no groups (R=" +
                    std::to_string(s.r) + ", S=" + std::to_string(s.s) + ", stride=" + std::to_string(s.stride) +
                    ", dilation=" + std::to_string(s.dilation) + ", groups=" + std::to_string(s.groups) +
                    "); use conv2d_nchwc");
    }
    detail::check_tensor_sizes(name(), tensors(p));
  }

  std::vector<TensorSpec> tensors(const Params& params) const override {
    const ConvShape s = detail::conv_shape(params);
    const std::int64_t b = params.at("block"), cb = ceil_div(s.c, b), kb = ceil_div(s.k, b);
    std::vector<TensorSpec> out = {
        {"input", DType::f32, Role::input, {s.n, cb, s.h, s.w, b}},
        {"weight", DType::f32, Role::input, {positions(params), kb, cb, b, b}},
    };
    std::vector<std::int64_t> output = {s.n, kb, s.p(), s.q(), b};
    detail::add_conv_epilogue_tensors(out, params, {kb * b}, output);
    out.push_back({"output", DType::f32, Role::output, output});
    return out;
  }

  // The direct convolution's count, so that GFLOP/s compare with conv2d_nchwc's.
  double flops(const Params& params) const override { return detail::conv_shape(params).flops(); }

  std::vector<Knob> knobs(const Params& params) const override {
    const ConvShape s = detail::conv_shape(params);
    const std::int64_t kb = ceil_div(s.k, params.at("block"));
    std::vector<std::int64_t> nr;
    for (auto v : kNr) {
      if (kb % v == 0) nr.push_back(v);
    }
    std::vector<std::int64_t> nt;
    for (auto v : kNt) {
      if (nt.empty() || v < 2 * tiles(params)) nt.push_back(v);
    }
    return {
        {"nt", nt, "4x4 output tiles per chunk (the chunk's transformed input and products stay in cache)"},
        {"mr", detail::tiles_for(kMr, tiles(params)), "tiles per register tile (one broadcast each)"},
        {"nr", nr, "output-channel blocks per register tile (one weight vector each); divides K/block"},
        {"unroll", {1, 2, 4, 8, 16}, "unroll count of the loop over the lanes of an input-channel block"},
        {"split", {0, 1}, "threads take: 0 = a chunk each (all three passes), 1 = parts of each pass of one chunk"},
    };
  }

  std::string check(const Params& params, const Config& c, const TargetTraits& target) const override {
    if (auto reason = detail::check_domains(knobs(params), c); !reason.empty()) return reason;
    const std::int64_t mr = c.at("mr"), nr = c.at("nr"), block = params.at("block");
    if (std::int64_t registers = tile_registers(mr, nr, block, target); registers > register_budget(block, target)) {
      return "register tile mr x nr = " + std::to_string(mr) + "x" + std::to_string(nr) + " of " +
             std::to_string(block) + "-float blocks needs " + std::to_string(registers) + " vector registers on " +
             std::string(to_string(target.isa)) + " (mr*nr accumulators + nr weight vectors + 1 broadcast), more than its " +
             std::to_string(target.vector_registers);
    }
    return {};
  }

  // One chunk of up to 256 tiles with each pass split over the threads (on ResNet-50's
  // layers at 2 threads 1.5-2x the chunk-per-thread split, which leaves a thread idle when
  // there is one chunk); two channel blocks by the number of tiles (at most 14, within the
  // registers: 31 of AVX-512's 32 with 16-float blocks) that best trades the rows wasted
  // by rounding the chunk up to it against the micro-kernel's efficiency.
  Config default_config(const Params& params, const TargetTraits& target) const override {
    const auto domains = knobs(params);
    const std::int64_t block = params.at("block"), budget = register_budget(block, target);
    const auto& nr_domain = domains[2].values;
    const std::int64_t nr = std::find(nr_domain.begin(), nr_domain.end(), 2) != nr_domain.end() ? 2 : 1;
    const std::int64_t nt = detail::largest_at_most(domains[0].values, 256);
    const std::int64_t chunk = std::min(nt, tiles(params));
    // The share of useful rows times the micro-kernel's share of multiply-adds among its
    // operations (mr*nr FMAs per mr broadcasts and nr loads).
    auto score = [&](std::int64_t v) {
      const double rows = static_cast<double>(chunk) / static_cast<double>(ceil_div(chunk, v) * v);
      return rows * static_cast<double>(v * nr) / static_cast<double>(v * nr + v + nr);
    };
    std::int64_t mr = 1;
    for (auto v : domains[1].values) {
      if (tile_registers(v, nr, block, target) <= budget && score(v) >= score(mr)) mr = v;
    }
    return {{"nt", nt}, {"mr", mr}, {"nr", nr}, {"unroll", 4}, {"split", 1}};
  }

  std::vector<Backend> backends() const override { return {Backend::cpu}; }

  KernelSource source(Backend backend, const Params& params, const Config& c) const override {
    if (backend != Backend::cpu) {
      throw OpError("conv2d_winograd has no " + std::string(to_string(backend)) + " kernel (backends: cpu)");
    }
    if (auto reason = check(params, c, detail::any_target()); !reason.empty()) {
      throw OpError("invalid conv2d_winograd configuration: " + reason);
    }
    KernelSource out{Backend::cpu, "conv2d_winograd.c", std::string(embedded::conv2d_winograd_c()), {}};
    detail::add_defines(out.defines, "CONV_", params);
    detail::add_defines(out.defines, "WINO_", c);
    return out;
  }

  KernelSource reference(const Params& params) const override {
    KernelSource out{Backend::cpu, "conv2d_winograd_ref.c",
                     std::string(embedded::ref_math_h()) + std::string(embedded::conv2d_winograd_ref_c()), {}};
    detail::add_defines(out.defines, "CONV_", params);
    return out;
  }

  // The transforms scale the terms (F(4x4)'s B^T rows sum to up to 10 in magnitude, A^T's
  // to 18) before they cancel: F(4x4, 3x3) in fp32 loses about three bits more than the
  // direct sum, F(2x2, 3x3) about one.
  double tolerance(const Params& params) const override {
    const ConvShape s = detail::conv_shape(params);
    return 8.0 * detail::dot_tolerance(static_cast<double>(s.c * s.r * s.s + 2));
  }

  std::vector<std::pair<std::string, double>> features(const Params& params, const Config& c) const override {
    auto out = Op::features(params, c);
    auto add = [&out](const char* name, double value) {
      out.emplace_back(std::string("conv2d_winograd.") + name, value);
    };
    const ConvShape s = detail::conv_shape(params);
    const auto d = [](std::int64_t v) { return static_cast<double>(v); };
    const double b = d(params.at("block")), t = d(tiles(params)), xi = d(positions(params)), m = d(tile_side(params));
    const double cb = std::ceil(d(s.c) / b), kb = std::ceil(d(s.k) / b);
    const double nt = std::min(d(c.at("nt")), t), mr = d(c.at("mr")), nr = d(c.at("nr"));
    const double ntr = std::ceil(nt / mr) * mr, chunks = std::ceil(t / nt);
    add("tiles", t);
    add("chunks", chunks);
    add("flops", s.flops());
    add("chunk_bytes", xi * (cb + kb) * ntr * b * 4);
    add("weight_bytes", xi * cb * kb * b * b * 4);
    add("accumulators", mr * nr);
    add("waste_tiles", (chunks * ntr - t) / (chunks * ntr));
    add("waste_output", (t * m * m - d(s.p() * s.q())) / (t * m * m));
    add("micro_intensity", 2.0 * mr * nr * b / (nr * b + mr));
    add("parallel_items", c.at("split") == 0 ? chunks : xi * kb / nr);
    return out;
  }
};

}  // namespace

std::unique_ptr<Op> make_conv2d_winograd_op() { return std::make_unique<Conv2dWinogradOp>(); }

}  // namespace kestrel::ops
