// softmax: the softmax of each row of an fp32 matrix x[rows][cols] (max-subtracted). The
// op's knob space, constraints and default; the kernel is ops/glue/softmax.c, the
// reference ops/glue/softmax_ref.c.
#include "builtin_ops.h"
#include "glue_util.h"

namespace kestrel::ops {
namespace {

using detail::tiles_for;

const std::vector<std::int64_t> kVec = {1, 4, 8, 16};
const std::vector<std::int64_t> kUnroll = {1, 2, 4};
const std::vector<std::int64_t> kGrain = {1, 2, 4, 8, 16, 32, 64};
// Vector registers kestrel_exp keeps live besides its argument (polynomial terms).
constexpr std::int64_t kExpTemporaries = 3;

class SoftmaxOp final : public Op {
 public:
  std::string_view name() const override { return "softmax"; }

  std::string_view description() const override {
    return "softmax of each row of an fp32 matrix: y[r][c] = e^(x[r][c] - max_r) / sum_c e^(x[r][c] - max_r); "
           "counts 5 FLOPs per element (compare, subtract, exponential, add, scale)";
  }

  std::vector<ParamSpec> params() const override {
    return {
        {"rows", "rows (independent softmaxes; batch x heads x queries for attention)", 1, std::int64_t{1} << 31, 0},
        {"cols", "length of each row (the softmax axis)", 1, std::int64_t{1} << 24, 0},
        {"nan_zero", "1: a NaN output is written as 0 (ONNX's Where(IsNaN(y), 0, y) after the softmax, fused)", 0, 1,
         0, true},
    };
  }

  void validate(const Params& p) const override {
    detail::validate_specs("softmax", params(), p);
    detail::check_tensor_sizes("softmax", tensors(p));
  }

  std::vector<TensorSpec> tensors(const Params& p) const override {
    std::int64_t rows = p.at("rows"), cols = p.at("cols");
    return {
        {"x", DType::f32, Role::input, {rows, cols}},
        {"y", DType::f32, Role::output, {rows, cols}},
    };
  }

  double flops(const Params& p) const override {
    return 5.0 * static_cast<double>(p.at("rows")) * static_cast<double>(p.at("cols"));
  }

  std::vector<Knob> knobs(const Params& p) const override {
    return {
        {"vec", tiles_for(kVec, p.at("cols")), "floats per vector (1 = scalar)"},
        {"unroll", kUnroll, "vectors per loop step (independent max and sum accumulators)"},
        {"grain", tiles_for(kGrain, p.at("rows")), "rows per parallel task"},
        {"online", {0, 1}, "0 = three passes (max; exponentials stored and summed; scale), 1 = two (running max "
                           "with a rescaled sum, then exponentials scaled as written)"},
    };
  }

  std::string check(const Params& p, const Config& c, const TargetTraits& traits) const override {
    if (auto reason = detail::check_domains(knobs(p), c); !reason.empty()) return reason;
    if (std::int64_t registers = live_registers(c, traits); registers > traits.vector_registers) {
      return "unroll=" + std::to_string(c.at("unroll")) + " of vec=" + std::to_string(c.at("vec")) +
             (c.at("online") ? " with online sums" : "") + " keeps " + std::to_string(registers) +
             " vector registers live, more than the " + std::to_string(traits.vector_registers) + " of " +
             std::string(to_string(traits.isa));
    }
    return {};
  }

  // The target's vector width, two accumulators, three passes (one exponential per
  // element; the running-max variant takes two), and tasks of about a quarter of each
  // core's rows.
  Config default_config(const Params& p, const TargetTraits& traits) const override {
    Config c{{"vec", detail::native_vec(tiles_for(kVec, p.at("cols")), traits)}, {"unroll", 2}, {"online", 0}};
    if (live_registers(c, traits) > traits.vector_registers) c["unroll"] = 1;
    const std::int64_t share = detail::ceil_div(p.at("rows"), 4 * std::max(traits.cores, 1));
    c["grain"] = detail::largest_at_most(tiles_for(kGrain, p.at("rows")), share);
    return c;
  }

  std::vector<Backend> backends() const override { return {Backend::cpu}; }

  KernelSource source(Backend backend, const Params& p, const Config& c) const override {
    if (backend != Backend::cpu) {
      throw OpError("softmax has no " + std::string(to_string(backend)) + " kernel (backends: cpu)");
    }
    if (auto reason = check(p, c, detail::any_target()); !reason.empty()) {
      throw OpError("invalid softmax configuration: " + reason);
    }
    KernelSource out{Backend::cpu, "softmax.c", std::string(embedded::softmax_c()), {}};
    detail::add_defines(out.defines, "SOFTMAX_", p);
    detail::add_defines(out.defines, "SOFTMAX_", c);
    return out;
  }

  KernelSource reference(const Params& p) const override {
    KernelSource out{Backend::cpu, "softmax_ref.c",
                     std::string(embedded::ref_math_h()) + std::string(embedded::softmax_ref_c()), {}};
    detail::add_defines(out.defines, "SOFTMAX_", p);
    return out;
  }

  // Relative, through the check |y - ref| <= tol (1 + |ref|) with ref < 1: on inputs in
  // [-1, 1] (how kernels are checked) no output exceeds e^2 / cols, so tol = rel * e^2 /
  // cols allows a relative error `rel` on the largest output. The kernel's own is a few
  // ulp from the exponential and the scale plus its fp32 sum's ~u * sqrt(cols); `rel` is
  // 4x that. A wrong result fails: one element missing from the sum is off by at least
  // 1 / (e^2 cols) relative, 3.5e-4 at cols = 384 against rel = 1.6e-5.
  double tolerance(const Params& p) const override {
    const double cols = static_cast<double>(p.at("cols"));
    const double rel = 2e-6 + 7e-7 * std::sqrt(cols);
    return rel * 7.38905609893065 / cols;
  }

  std::vector<std::pair<std::string, double>> features(const Params& p, const Config& c) const override {
    auto out = Op::features(p, c);
    const double rows = static_cast<double>(p.at("rows")), cols = static_cast<double>(p.at("cols"));
    out.emplace_back("softmax.row_bytes", cols * 4);
    out.emplace_back("softmax.passes", c.at("online") ? 2.0 : 3.0);
    out.emplace_back("softmax.tasks", std::ceil(rows / static_cast<double>(c.at("grain"))));
    out.emplace_back("softmax.vector_share", std::floor(cols / static_cast<double>(c.at("vec"))) *
                                                 static_cast<double>(c.at("vec")) / cols);
    return out;
  }

 private:
  // Accumulators (a max, or a max and a sum with `online`), one loaded vector and the
  // exponential's temporaries.
  static std::int64_t live_registers(const Config& c, const TargetTraits& traits) {
    const std::int64_t per = traits.registers_per_vector(c.at("vec"));
    return c.at("unroll") * per * (c.at("online") ? 2 : 1) + per * (1 + kExpTemporaries);
  }
};

}  // namespace

std::unique_ptr<Op> make_softmax_op() { return std::make_unique<SoftmaxOp>(); }

}  // namespace kestrel::ops
