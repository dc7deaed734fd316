// layernorm: layer normalisation of each row of an fp32 matrix, with an optional residual
// added first (BERT's add & norm). The op's knob space, constraints and default; the
// kernel is ops/glue/layernorm.c, the reference ops/glue/layernorm_ref.c.
#include "builtin_ops.h"
#include "glue_util.h"

namespace kestrel::ops {
namespace {

using detail::tiles_for;

const std::vector<std::int64_t> kVec = {1, 4, 8, 16};
const std::vector<std::int64_t> kUnroll = {1, 2, 4, 8};
const std::vector<std::int64_t> kGrain = {1, 2, 4, 8, 16, 32, 64};

class LayernormOp final : public Op {
 public:
  std::string_view name() const override { return "layernorm"; }

  std::string_view description() const override {
    return "layer normalisation of each row of an fp32 matrix: v = x (+ residual), y = (v - mean(v)) / "
           "sqrt(var(v) + 10^-eps) * gamma + beta (biased variance, as ONNX and BERT); counts 8 FLOPs per element";
  }

  std::vector<ParamSpec> params() const override {
    ParamSpec eps{"eps", "epsilon as a negative power of ten: 5 is 1e-5, BERT uses 12", 1, 30, 5};
    eps.optional = true;
    ParamSpec residual{"residual", "1: add a second input of x's shape before normalising (add & norm)", 0, 1, 0};
    residual.optional = true;
    return {
        {"rows", "rows (tokens: batch x sequence)", 1, std::int64_t{1} << 31, 0},
        {"cols", "length of each row (the hidden size, normalised over)", 1, std::int64_t{1} << 24, 0},
        eps,
        residual,
    };
  }

  void validate(const Params& p) const override {
    detail::validate_specs("layernorm", params(), p);
    detail::check_tensor_sizes("layernorm", tensors(p));
  }

  std::vector<TensorSpec> tensors(const Params& p) const override {
    std::int64_t rows = p.at("rows"), cols = p.at("cols");
    std::vector<TensorSpec> out = {
        {"x", DType::f32, Role::input, {rows, cols}},
        {"gamma", DType::f32, Role::input, {cols}},
        {"beta", DType::f32, Role::input, {cols}},
    };
    if (detail::param_or(p, "residual", 0) != 0) out.push_back({"residual", DType::f32, Role::input, {rows, cols}});
    out.push_back({"y", DType::f32, Role::output, {rows, cols}});
    return out;
  }

  double flops(const Params& p) const override {
    return 8.0 * static_cast<double>(p.at("rows")) * static_cast<double>(p.at("cols"));
  }

  std::vector<Knob> knobs(const Params& p) const override {
    return {
        {"vec", tiles_for(kVec, p.at("cols")), "floats per vector (1 = scalar)"},
        {"unroll", kUnroll, "vectors per loop step (independent partial sums)"},
        {"grain", tiles_for(kGrain, p.at("rows")), "rows per parallel task"},
    };
  }

  std::string check(const Params& p, const Config& c, const TargetTraits& traits) const override {
    if (auto reason = detail::check_domains(knobs(p), c); !reason.empty()) return reason;
    if (std::int64_t registers = live_registers(c, traits); registers > traits.vector_registers) {
      return "unroll=" + std::to_string(c.at("unroll")) + " of vec=" + std::to_string(c.at("vec")) + " keeps " +
             std::to_string(registers) + " vector registers live, more than the " +
             std::to_string(traits.vector_registers) + " of " + std::string(to_string(traits.isa));
    }
    return {};
  }

  // The target's vector width, four partial sums (two where the registers are few), and
  // tasks of about a quarter of each core's rows.
  Config default_config(const Params& p, const TargetTraits& traits) const override {
    Config c{{"vec", detail::native_vec(tiles_for(kVec, p.at("cols")), traits)}, {"unroll", 4}};
    while (c["unroll"] > 1 && live_registers(c, traits) > traits.vector_registers) c["unroll"] /= 2;
    const std::int64_t share = detail::ceil_div(p.at("rows"), 4 * std::max(traits.cores, 1));
    c["grain"] = detail::largest_at_most(tiles_for(kGrain, p.at("rows")), share);
    return c;
  }

  std::vector<Backend> backends() const override { return {Backend::cpu}; }

  KernelSource source(Backend backend, const Params& p, const Config& c) const override {
    if (backend != Backend::cpu) {
      throw OpError("layernorm has no " + std::string(to_string(backend)) + " kernel (backends: cpu)");
    }
    if (auto reason = check(p, c, detail::any_target()); !reason.empty()) {
      throw OpError("invalid layernorm configuration: " + reason);
    }
    KernelSource out{Backend::cpu, "layernorm.c", std::string(embedded::layernorm_c()), {}};
    detail::add_layernorm_defines(out.defines, params(), p);
    detail::add_defines(out.defines, "LAYERNORM_", c);
    return out;
  }

  KernelSource reference(const Params& p) const override {
    KernelSource out{Backend::cpu, "layernorm_ref.c",
                     std::string(embedded::ref_math_h()) + std::string(embedded::layernorm_ref_c()), {}};
    detail::add_layernorm_defines(out.defines, params(), p);
    return out;
  }

  // Outputs are O(1) (|y| < 2.5 (|gamma| + 1) on inputs in [-1, 1]); the fp32 mean and
  // variance carry ~u * sqrt(cols) relative error, the last operations a few ulp: 4x
  // that. A wrong result fails: a variance over cols - 1 instead of cols moves every
  // output by 1 / (2 cols) relative, 1.3e-3 at cols = 384 against 1.2e-5.
  double tolerance(const Params& p) const override {
    return 4e-6 + 4e-7 * std::sqrt(static_cast<double>(p.at("cols")));
  }

  std::vector<std::pair<std::string, double>> features(const Params& p, const Config& c) const override {
    auto out = Op::features(p, c);
    const double rows = static_cast<double>(p.at("rows")), cols = static_cast<double>(p.at("cols"));
    out.emplace_back("layernorm.row_bytes", cols * 4);
    out.emplace_back("layernorm.residual", static_cast<double>(detail::param_or(p, "residual", 0)));
    out.emplace_back("layernorm.tasks", std::ceil(rows / static_cast<double>(c.at("grain"))));
    return out;
  }

 private:
  // Partial sums, one loaded vector, gamma, beta (and the residual's vector).
  static std::int64_t live_registers(const Config& c, const TargetTraits& traits) {
    const std::int64_t per = traits.registers_per_vector(c.at("vec"));
    return c.at("unroll") * per + 4 * per;
  }
};

}  // namespace

std::unique_ptr<Op> make_layernorm_op() { return std::make_unique<LayernormOp>(); }

}  // namespace kestrel::ops
