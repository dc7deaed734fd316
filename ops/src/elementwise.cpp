// elementwise: one elementwise operation over n fp32 elements (add, sub, mul of two
// inputs; relu, relu6, gelu, sigmoid, tanh of one). The op's knob space, constraints and
// default; the kernel is ops/glue/elementwise.c, the reference ops/glue/elementwise_ref.c.
#include "builtin_ops.h"
#include "glue_util.h"

namespace kestrel::ops {
namespace {

using detail::tiles_for;

const std::vector<std::int64_t> kVec = {1, 4, 8, 16};
const std::vector<std::int64_t> kUnroll = {1, 2, 4, 8};
const std::vector<std::int64_t> kGrain = {1024, 4096, 16384, 65536, 262144};
constexpr std::int64_t kKinds = 8;
// Vector registers live per element vector: the operands (x, and y for the binary kinds),
// or x and the temporaries of the polynomial math functions (gelu, sigmoid, tanh).
std::int64_t live_per_vector(std::int64_t kind) { return kind <= 2 ? 2 : kind <= 4 ? 1 : 4; }

class ElementwiseOp final : public Op {
 public:
  std::string_view name() const override { return "elementwise"; }

  std::string_view description() const override {
    return "one elementwise operation over n fp32 elements: out = a op b (kind 0 add, 1 sub, 2 mul) or f(a) "
           "(3 relu, 4 relu6, 5 gelu (erf form), 6 sigmoid, 7 tanh); counts one FLOP per element";
  }

  std::vector<ParamSpec> params() const override {
    return {
        {"n", "element count", 1, std::int64_t{1} << 31, 0},
        {"kind", "0 add, 1 sub, 2 mul (two inputs); 3 relu, 4 relu6, 5 gelu, 6 sigmoid, 7 tanh (one input)", 0,
         kKinds - 1, 0},
    };
  }

  void validate(const Params& p) const override { detail::validate_specs("elementwise", params(), p); }

  std::vector<TensorSpec> tensors(const Params& p) const override {
    std::int64_t n = p.at("n");
    std::vector<TensorSpec> out = {{"a", DType::f32, Role::input, {n}}};
    if (binary(p)) out.push_back({"b", DType::f32, Role::input, {n}});
    out.push_back({"out", DType::f32, Role::output, {n}});
    return out;
  }

  double flops(const Params& p) const override { return static_cast<double>(p.at("n")); }

  std::vector<Knob> knobs(const Params& p) const override {
    return {
        {"vec", kVec, "floats per vector (1 = scalar)"},
        {"unroll", kUnroll, "vectors per loop step"},
        {"grain", tiles_for(kGrain, p.at("n")), "elements per parallel task"},
    };
  }

  std::string check(const Params& p, const Config& c, const TargetTraits& traits) const override {
    if (auto reason = detail::check_domains(knobs(p), c); !reason.empty()) return reason;
    const std::int64_t vec = c.at("vec"), unroll = c.at("unroll");
    const std::int64_t registers =
        unroll * traits.registers_per_vector(vec) * live_per_vector(p.at("kind"));
    if (registers > traits.vector_registers) {
      return "unroll=" + std::to_string(unroll) + " of vec=" + std::to_string(vec) + " keeps " +
             std::to_string(registers) + " vector registers live, more than the " +
             std::to_string(traits.vector_registers) + " of " + std::string(to_string(traits.isa));
    }
    return {};
  }

  // The target's vector width, as many vectors per step as its registers hold (up to 4),
  // and tasks of about a quarter of each core's share (at most 64 Ki elements: 256 KiB
  // per operand, L2-sized).
  Config default_config(const Params& p, const TargetTraits& traits) const override {
    const std::int64_t vec = detail::native_vec(kVec, traits);
    const std::int64_t per_step = traits.registers_per_vector(vec) * live_per_vector(p.at("kind"));
    std::int64_t unroll = 1;
    for (auto u : kUnroll) {
      if (u <= 4 && u * per_step <= traits.vector_registers) unroll = u;
    }
    const std::int64_t share = detail::ceil_div(p.at("n"), 4 * std::max(traits.cores, 1));
    return {{"vec", vec},
            {"unroll", unroll},
            {"grain", detail::largest_at_most(tiles_for(kGrain, p.at("n")), std::min<std::int64_t>(share, 65536))}};
  }

  std::vector<Backend> backends() const override { return {Backend::cpu}; }

  KernelSource source(Backend backend, const Params& p, const Config& c) const override {
    if (backend != Backend::cpu) {
      throw OpError("elementwise has no " + std::string(to_string(backend)) + " kernel (backends: cpu)");
    }
    if (auto reason = check(p, c, detail::any_target()); !reason.empty()) {
      throw OpError("invalid elementwise configuration: " + reason);
    }
    KernelSource out{Backend::cpu, "elementwise.c", std::string(embedded::elementwise_c()), {}};
    detail::add_defines(out.defines, "ELEMENTWISE_", detail::with_fallbacks(params(), p));
    detail::add_defines(out.defines, "ELEMENTWISE_", c);
    return out;
  }

  KernelSource reference(const Params& p) const override {
    KernelSource out{Backend::cpu, "elementwise_ref.c",
                     std::string(embedded::ref_math_h()) + std::string(embedded::elementwise_ref_c()), {}};
    detail::add_defines(out.defines, "ELEMENTWISE_", detail::with_fallbacks(params(), p));
    return out;
  }

  // Add, sub, mul, relu and relu6 are one correctly rounded fp32 operation (or none), as
  // the double reference rounded to fp32 is: equal. The transcendental kinds
  // (exp/erf-based) are held to 2e-6 (1 + |ref|): the math functions' few-ulp error is
  // below 1e-6 relative, while a wrong formula is off by far more on inputs in [-1, 1]
  // (gelu's tanh approximation by up to 1.5e-4, x * sigmoid(1.702 x) by 6e-3, a sigmoid of -x
  // by up to 0.46).
  double tolerance(const Params& p) const override { return p.at("kind") <= 4 ? 0.0 : 2e-6; }

  std::vector<std::pair<std::string, double>> features(const Params& p, const Config& c) const override {
    auto out = Op::features(p, c);
    const double n = static_cast<double>(p.at("n"));
    const double tensors = binary(p) ? 3.0 : 2.0;
    out.emplace_back("elementwise.bytes", n * tensors * 4);
    out.emplace_back("elementwise.tasks", std::ceil(n / static_cast<double>(c.at("grain"))));
    out.emplace_back("elementwise.transcendental", p.at("kind") >= 5 ? 1.0 : 0.0);
    return out;
  }

 private:
  static bool binary(const Params& p) { return p.at("kind") <= 2; }
};

}  // namespace

std::unique_ptr<Op> make_elementwise_op() { return std::make_unique<ElementwiseOp>(); }

}  // namespace kestrel::ops
