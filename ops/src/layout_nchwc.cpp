// layout_nchwc: the transform of an fp32 NCHW tensor into the blocked-channel layout
// NCHWc of conv2d_nchwc (lanes past C zeroed). An op of its own so that the cost of the
// layout change is measured and reported apart from the convolution's. The kernel is
// ops/conv2d/layout_nchwc.c, the reference ops/conv2d/layout_nchwc_ref.c.
#include "builtin_ops.h"
#include "knob_util.h"

namespace kestrel::ops {
namespace {

using detail::ceil_div;

class LayoutNchwcOp final : public Op {
 public:
  std::string_view name() const override { return "layout_nchwc"; }

  std::string_view description() const override {
    return "layout transform of an fp32 tensor from NCHW to blocked channels NCHWc: out[N][C/B][H][W][B] = "
           "in[N][C][H][W] (B = block, lanes past C written as 0), the input layout of conv2d_nchwc; memory-bound, "
           "reports no FLOPs";
  }

  std::vector<ParamSpec> params() const override {
    return {
        {"N", "batch size", 1, 65536, 1},
        {"C", "channels", 1, 65536, 0},
        {"H", "height", 1, 65536, 0},
        {"W", "width", 1, 65536, 0},
        {"block", "channels per block: 16 for AVX-512, 8 for AVX2, 4 for NEON", 1, 64, 16},
    };
  }

  void validate(const Params& p) const override {
    auto specs = params();
    for (const auto& spec : specs) {
      auto it = p.find(spec.name);
      if (it == p.end()) throw OpError("layout_nchwc: missing parameter " + spec.name + " (" + spec.help + ")");
      if (it->second < spec.min || it->second > spec.max) {
        throw OpError("layout_nchwc: parameter " + spec.name + "=" + std::to_string(it->second) + " is outside " +
                      std::to_string(spec.min) + ".." + std::to_string(spec.max));
      }
    }
    for (const auto& entry : p) {
      bool known = std::any_of(specs.begin(), specs.end(), [&](const ParamSpec& s) { return s.name == entry.first; });
      if (!known) throw OpError("layout_nchwc: unknown parameter " + entry.first);
    }
    std::int64_t block = p.at("block");
    if (block != 4 && block != 8 && block != 16) {
      throw OpError("layout_nchwc: parameter block=" + std::to_string(block) + " is not 4, 8 or 16");
    }
    for (const auto& tensor : tensors(p)) {
      if (tensor.elements() > (std::int64_t{1} << 31)) {
        throw OpError("layout_nchwc: tensor " + tensor.name + " has " + std::to_string(tensor.elements()) +
                      " elements, more than the 2^31 supported");
      }
    }
  }

  std::vector<TensorSpec> tensors(const Params& p) const override {
    std::int64_t n = p.at("N"), c = p.at("C"), h = p.at("H"), w = p.at("W"), b = p.at("block");
    return {
        {"input", DType::f32, Role::input, {n, c, h, w}},
        {"output", DType::f32, Role::output, {n, ceil_div(c, b), h, w, b}},
    };
  }

  double flops(const Params&) const override { return 0.0; }

  std::vector<Knob> knobs(const Params& p) const override {
    return {
        {"tw", detail::tiles_for({1, 2, 4, 8, 16}, p.at("W")),
         "columns per step: tw columns of block channels read, then written as tw vectors"},
        {"split", {0, 1}, "threads take: 0 = (image, channel block) planes, 1 = rows"},
    };
  }

  std::string check(const Params& p, const Config& c, const TargetTraits&) const override { return detail::check_domains(knobs(p), c); }

  Config default_config(const Params& p, const TargetTraits&) const override {
    return {{"tw", detail::largest_at_most(detail::tiles_for({1, 2, 4, 8, 16}, p.at("W")), 8)}, {"split", 1}};
  }

  std::vector<Backend> backends() const override { return {Backend::cpu}; }

  KernelSource source(Backend backend, const Params& p, const Config& c) const override {
    if (backend != Backend::cpu) {
      throw OpError("layout_nchwc has no " + std::string(to_string(backend)) + " kernel (backends: cpu)");
    }
    if (auto reason = check(p, c, detail::any_target()); !reason.empty()) throw OpError("invalid layout_nchwc configuration: " + reason);
    KernelSource out{Backend::cpu, "layout_nchwc.c", std::string(embedded::layout_nchwc_c()), {}};
    detail::add_defines(out.defines, "LAYOUT_", p);
    detail::add_defines(out.defines, "LAYOUT_", c);
    return out;
  }

  KernelSource reference(const Params& p) const override {
    KernelSource out{Backend::cpu, "layout_nchwc_ref.c", std::string(embedded::layout_nchwc_ref_c()), {}};
    detail::add_defines(out.defines, "LAYOUT_", p);
    return out;
  }

  double tolerance(const Params&) const override { return 0.0; }  // an exact copy

  // Parameters and knobs, then the bytes moved and the share of padded lanes.
  std::vector<std::pair<std::string, double>> features(const Params& p, const Config& c) const override {
    auto out = Op::features(p, c);
    const auto d = [](std::int64_t v) { return static_cast<double>(v); };
    const double n = d(p.at("N")), ch = d(p.at("C")), h = d(p.at("H")), w = d(p.at("W")), b = d(p.at("block"));
    const double padded = std::ceil(ch / b) * b;
    out.emplace_back("layout_nchwc.bytes_read", n * ch * h * w * 4);
    out.emplace_back("layout_nchwc.bytes_written", n * padded * h * w * 4);
    out.emplace_back("layout_nchwc.waste_lanes", padded > 0 ? (padded - ch) / padded : 0.0);
    out.emplace_back("layout_nchwc.row_bytes", w * b * 4);
    return out;
  }
};

}  // namespace

std::unique_ptr<Op> make_layout_nchwc_op() { return std::make_unique<LayoutNchwcOp>(); }

}  // namespace kestrel::ops
