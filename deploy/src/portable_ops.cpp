// Portable implementations of the ONNX operators the runner executes without a Kestrel
// kernel. Straightforward loops over plain row-major tensors; ONNX semantics of opset 13
// to 17 (Softmax over one axis, Unsqueeze/Squeeze axes as an input, Clip bounds as inputs;
// the attribute forms of older opsets are read too).
#include "kestrel/deploy/portable_ops.h"

#include "parallel.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <numeric>
#include <stdexcept>
#include <string_view>
#include <unordered_map>

namespace kestrel::deploy {

using model::Attribute;
using model::ElemType;
using model::ModelError;
using model::Node;

namespace {

using Dims = std::vector<std::int64_t>;
using Inputs = std::vector<const Tensor*>;

[[noreturn]] void fail(const Node& node, const std::string& message) {
  throw ModelError(node.op_type + " node " + node.name + ": " + message);
}

// ---- threads ----------------------------------------------------------------------------
// The pool of the kernels' services, set by run_portable() for the step it runs (null: the
// calling thread alone). A thread-local rather than a parameter of every operator: only
// the loops below that split their work read it.
thread_local const kestrel_services* step_services = nullptr;

struct StepServices {
  explicit StepServices(const kestrel_services* services) : saved(step_services) { step_services = services; }
  ~StepServices() { step_services = saved; }
  StepServices(const StepServices&) = delete;
  StepServices& operator=(const StepServices&) = delete;
  const kestrel_services* saved;
};

// detail::parallel_ranges on the step's pool.
template <typename F>
void parallel_ranges(std::int64_t n, std::int64_t grain, const F& body) {
  detail::parallel_ranges(step_services, n, grain, body);
}

// Float elements per parallel range of the memory-bound loops (a few microseconds of work).
constexpr std::int64_t kElementGrain = 16384;

const Tensor& input(const Node& node, const Inputs& in, std::size_t i) {
  if (i >= in.size() || !in[i]) fail(node, "input " + std::to_string(i) + " is missing");
  return *in[i];
}

const Tensor& floats_in(const Node& node, const Inputs& in, std::size_t i) {
  const Tensor& t = input(node, in, i);
  if (t.type != ElemType::f32) fail(node, "input " + std::to_string(i) + " must be float");
  if (t.layout != TensorLayout::plain) fail(node, "input " + std::to_string(i) + " is not in the plain layout");
  return t;
}

const Tensor* optional_in(const Inputs& in, std::size_t i) { return i < in.size() ? in[i] : nullptr; }

// An integer input (shapes, axes, indices): i64 data, or float data holding integers.
Dims ints_of(const Node& node, const Tensor& t) {
  if (t.type == ElemType::i64) return t.i64;
  if (t.type == ElemType::f32) {
    Dims out;
    for (float v : t.f32) out.push_back(static_cast<std::int64_t>(v));
    return out;
  }
  fail(node, "an integer input has an unsupported element type");
}

std::int64_t norm_axis(const Node& node, std::int64_t axis, std::size_t rank, bool inclusive = false) {
  const auto r = static_cast<std::int64_t>(rank) + (inclusive ? 1 : 0);
  if (axis < -r || axis >= r) fail(node, "axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(rank));
  return axis < 0 ? axis + r : axis;
}

Dims strides_of(const Dims& shape) {
  Dims s(shape.size(), 1);
  for (std::size_t i = shape.size(); i-- > 1;) s[i - 1] = s[i] * shape[i];
  return s;
}

Tensor with_shape(const Tensor& t, Dims shape) {
  Tensor out = t;
  out.shape = std::move(shape);
  return out;
}

// A tensor of `shape` whose element i is src's element offsets[i] (any element type).
Tensor take(const Tensor& src, Dims shape, const Dims& offsets) {
  Tensor out;
  out.type = src.type;
  out.shape = std::move(shape);
  if (src.type == ElemType::f32) {
    out.f32.resize(offsets.size());
    for (std::size_t i = 0; i < offsets.size(); ++i) out.f32[i] = src.f32[static_cast<std::size_t>(offsets[i])];
  } else {
    out.i64.resize(offsets.size());
    for (std::size_t i = 0; i < offsets.size(); ++i) out.i64[i] = src.i64[static_cast<std::size_t>(offsets[i])];
  }
  return out;
}

// `outer` runs of `run` elements, the o-th read from src at o * stride + start: a slice
// along one axis (Split, Gather of rows) as whole runs rather than element by element.
Tensor copy_runs(const Tensor& src, Dims shape, std::int64_t outer, std::int64_t stride, std::int64_t start,
                 std::int64_t run) {
  Tensor out;
  out.type = src.type;
  out.shape = std::move(shape);
  auto copy = [&](const auto& from, auto& to) {
    to.resize(static_cast<std::size_t>(outer * run));
    for (std::int64_t o = 0; o < outer; ++o) {
      std::copy_n(from.begin() + o * stride + start, run, to.begin() + o * run);
    }
  };
  if (src.type == ElemType::f32) copy(src.f32, out.f32);
  else copy(src.i64, out.i64);
  return out;
}

// Calls fn(flat output index, per-input offsets) for every element of `shape`, with each
// input's offset following numpy broadcasting (its strides right-aligned, 0 where it has
// extent 1).
template <typename Fn>
void for_each_broadcast(const Dims& shape, const std::vector<Dims>& inputs, Fn fn) {
  const std::size_t rank = shape.size();
  std::vector<Dims> strides;
  for (const Dims& in : inputs) {
    Dims own = strides_of(in), s(rank, 0);
    for (std::size_t i = 0; i < in.size(); ++i) {
      const std::size_t at = rank - in.size() + i;
      s[at] = in[i] == 1 ? 0 : own[i];
    }
    strides.push_back(std::move(s));
  }
  const std::int64_t total = element_count(shape);
  Dims index(rank, 0), offset(inputs.size(), 0);
  for (std::int64_t flat = 0; flat < total; ++flat) {
    fn(flat, offset);
    for (std::size_t d = rank; d-- > 0;) {
      ++index[d];
      for (std::size_t k = 0; k < inputs.size(); ++k) offset[k] += strides[k][d];
      if (index[d] < shape[d]) break;
      for (std::size_t k = 0; k < inputs.size(); ++k) offset[k] -= strides[k][d] * index[d];
      index[d] = 0;
    }
  }
}

// ---- vectorized float math ------------------------------------------------------------------
// Four floats at a time through GCC/Clang vector extensions (SSE2 on x86-64, NEON on
// arm64): the compiler does not if-convert the clamps of a scalar exp at -O2, so the
// elementwise operators spell their lanes out.
using F4 = float __attribute__((vector_size(16)));
using I4 = std::int32_t __attribute__((vector_size(16)));

[[gnu::always_inline]] inline F4 splat(float v) { return F4{v, v, v, v}; }
[[gnu::always_inline]] inline F4 select(I4 mask, F4 a, F4 b) { return reinterpret_cast<F4>((reinterpret_cast<I4>(a) & mask) | (reinterpret_cast<I4>(b) & ~mask)); }
[[gnu::always_inline]] inline F4 abs4(F4 x) { return reinterpret_cast<F4>(reinterpret_cast<I4>(x) & 0x7fffffff); }
// |magnitude| with the sign of `sign`.
[[gnu::always_inline]] inline F4 copysign4(F4 magnitude, F4 sign) {
  return reinterpret_cast<F4>((reinterpret_cast<I4>(magnitude) & 0x7fffffff) |
                              (reinterpret_cast<I4>(sign) & static_cast<std::int32_t>(0x80000000u)));
}
[[gnu::always_inline]] inline F4 max4(F4 a, F4 b) { return select(a > b, a, b); }
[[gnu::always_inline]] inline F4 min4(F4 a, F4 b) { return select(a < b, a, b); }
// A scalar function on each lane (sqrt: no vector form in the extensions).
template <typename F>
[[gnu::always_inline]] inline F4 lanes(F4 x, F f) {
  return F4{f(x[0]), f(x[1]), f(x[2]), f(x[3])};
}

// e^x in float: x = n ln2 + r with |r| <= ln2/2 (ln2 split in two for the reduction), e^r
// by Cephes' degree-6 polynomial, n added to the exponent bits. Within 2 ulp over
// [-87.3, 88.7]; 0 below, +inf above (NaN stays NaN).
[[gnu::always_inline]] inline F4 exp4(F4 x) {
  const F4 xc = min4(max4(x, splat(-87.33654f)), splat(88.72283f));
  const F4 kn = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;  // round(x / ln2)
  const F4 r = (xc - kn * 0.693359375f) - kn * -2.12194440e-4f;
  F4 p = splat(1.9875691500e-4f);
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const I4 n = __builtin_convertvector(kn, I4);
  F4 v = reinterpret_cast<F4>(reinterpret_cast<I4>(p) + (n << 23));
  v = select(x < -87.33654f, splat(0.0f), v);
  v = select(x > 88.72283f, splat(std::numeric_limits<float>::infinity()), v);
  return select(x != x, x, v);
}

[[gnu::always_inline]] inline F4 sigmoid4(F4 x) { return 1.0f / (1.0f + exp4(-x)); }

// tanh(x) = sign(x) (1 - 2 / (e^{2|x|} + 1)): absolute error about 1e-7.
[[gnu::always_inline]] inline F4 tanh4(F4 x) { return copysign4(1.0f - 2.0f / (exp4(2.0f * abs4(x)) + 1.0f), x); }

// erf by Abramowitz and Stegun 7.1.26 (absolute error 1.5e-7) with exp4.
[[gnu::always_inline]] inline F4 erf4(F4 x) {
  const F4 a = abs4(x);
  const F4 t = 1.0f / (1.0f + 0.3275911f * a);
  F4 p = splat(1.061405429f);
  p = p * t - 1.453152027f;
  p = p * t + 1.421413741f;
  p = p * t - 0.284496736f;
  p = p * t + 0.254829592f;
  return copysign4(1.0f - p * t * exp4(-a * a), x);
}

// dst[i] = f(src[i]) for i < n, f taking and returning F4 (four lanes at a time; the tail
// through a zero-padded block).
template <typename F>
void map_floats_serial(const float* src, float* dst, std::size_t n, F f) {
  std::size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    F4 v;
    std::memcpy(&v, src + i, sizeof v);
    v = f(v);
    std::memcpy(dst + i, &v, sizeof v);
  }
  if (i < n) {
    float buf[4] = {0, 0, 0, 0};
    std::memcpy(buf, src + i, (n - i) * sizeof(float));
    F4 v;
    std::memcpy(&v, buf, sizeof v);
    v = f(v);
    std::memcpy(buf, &v, sizeof v);
    std::memcpy(dst + i, buf, (n - i) * sizeof(float));
  }
}

// map_floats_serial over ranges of whole vectors on the step's pool.
template <typename F>
void map_floats(const float* src, float* dst, std::size_t n, F f) {
  const auto vectors = static_cast<std::int64_t>((n + 3) / 4);
  parallel_ranges(vectors, kElementGrain / 4, [&](std::int64_t b, std::int64_t e) {
    const auto begin = static_cast<std::size_t>(b) * 4, end = std::min(n, static_cast<std::size_t>(e) * 4);
    map_floats_serial(src + begin, dst + begin, end - begin, f);
  });
}

// ---- elementwise ------------------------------------------------------------------------

enum class BinaryOp { add, sub, mul, div, pow };

// Add, Sub, Mul, Div; Pow for any other name (callers pass those five).
BinaryOp binary_op(const std::string& name) {
  return name == "Add" ? BinaryOp::add : name == "Sub" ? BinaryOp::sub : name == "Mul" ? BinaryOp::mul
         : name == "Div" ? BinaryOp::div : BinaryOp::pow;
}

// dst[j] = f(a, b) for j < n with a = pa[j] (whole) or pa[0] (broadcast), b likewise, four
// lanes at a time (f takes F4 and float operands).
template <typename F>
void vector_row(float* dst, const float* pa, const float* pb, std::int64_t n, bool whole_a, bool whole_b, F f) {
  // One loop per case, so that the vector loop has no branch on them.
  auto rows = [&](auto load_a, auto load_b) {
    std::int64_t j = 0;
    for (; j + 4 <= n; j += 4) {
      const F4 r = f(load_a(j), load_b(j));
      std::memcpy(dst + j, &r, sizeof r);
    }
    for (; j < n; ++j) dst[j] = f(whole_a ? pa[j] : pa[0], whole_b ? pb[j] : pb[0]);
  };
  auto load = [](const float* p) {
    return [p](std::int64_t j) {
      F4 v;
      std::memcpy(&v, p + j, sizeof v);
      return v;
    };
  };
  auto constant = [](float v) { return [s = splat(v)](std::int64_t) { return s; }; };
  if (whole_a && whole_b) rows(load(pa), load(pb));
  else if (whole_a) rows(load(pa), constant(pb[0]));
  else rows(constant(pa[0]), load(pb));
}

// out = f(a, b) over `shape` with numpy broadcasting: an odometer over the outer
// dimensions, a tight loop over the last one (each input contiguous or constant there).
template <typename T, typename F>
void broadcast_loop(const Dims& shape, const Dims& as, const Dims& bs, const T* a, const T* b, T* out, F f) {
  const std::size_t rank = shape.size();
  if (rank == 0) {
    out[0] = f(a[0], b[0]);
    return;
  }
  auto aligned = [&](const Dims& in) {
    Dims own = strides_of(in), s(rank, 0);
    for (std::size_t i = 0; i < in.size(); ++i) s[rank - in.size() + i] = in[i] == 1 ? 0 : own[i];
    return s;
  };
  const Dims sa = aligned(as), sb = aligned(bs);
  const std::int64_t inner = shape.back(), ia = sa.back(), ib = sb.back();
  const std::int64_t outer = inner ? element_count(shape) / inner : 0;
  parallel_ranges(outer, std::max<std::int64_t>(1, kElementGrain / std::max<std::int64_t>(inner, 1)),
                  [&](std::int64_t first, std::int64_t last) {
  // The odometer at row `first`.
  Dims index(rank, 0);
  std::int64_t oa = 0, ob = 0;
  for (std::int64_t d = static_cast<std::int64_t>(rank) - 2, rest = first; d >= 0 && rest > 0; --d) {
    const auto du = static_cast<std::size_t>(d);
    index[du] = rest % shape[du];
    rest /= shape[du];
    oa += index[du] * sa[du];
    ob += index[du] * sb[du];
  }
  for (std::int64_t o = first; o < last; ++o) {
    T* dst = out + o * inner;
    const T* pa = a + oa;
    const T* pb = b + ob;
    bool done = false;
    if constexpr (std::is_same_v<T, float> && std::is_invocable_v<F, F4, F4>) {
      if (ia || ib) {
        vector_row(dst, pa, pb, inner, ia != 0, ib != 0, f);
        done = true;
      }
    }
    if (done) {
    } else if (ia && ib) {
      for (std::int64_t j = 0; j < inner; ++j) dst[j] = f(pa[j], pb[j]);
    } else if (ia) {
      const T bv = pb[0];
      for (std::int64_t j = 0; j < inner; ++j) dst[j] = f(pa[j], bv);
    } else if (ib) {
      const T av = pa[0];
      for (std::int64_t j = 0; j < inner; ++j) dst[j] = f(av, pb[j]);
    } else {
      const T v = f(pa[0], pb[0]);
      for (std::int64_t j = 0; j < inner; ++j) dst[j] = v;
    }
    for (std::size_t d = rank - 1; d-- > 0;) {
      ++index[d];
      oa += sa[d];
      ob += sb[d];
      if (index[d] < shape[d]) break;
      oa -= sa[d] * index[d];
      ob -= sb[d] * index[d];
      index[d] = 0;
    }
  }
  });
}

// Pow with one exponent for every element: 1, 2, 3 and 0.5 as ONNX Runtime computes them
// (x, x*x, x*x*x, sqrt x), others through pow in double. False when `b` is not one value.
bool pow_by_constant(const Dims& shape, const Dims& bs, const float* a, const float* b, float* out) {
  if (element_count(bs) != 1) return false;
  const std::size_t n = static_cast<std::size_t>(element_count(shape));
  const float e = b[0];
  if (e == 1.0f) map_floats(a, out, n, [](F4 x) { return x; });
  else if (e == 2.0f) map_floats(a, out, n, [](F4 x) { return x * x; });
  else if (e == 3.0f) map_floats(a, out, n, [](F4 x) { return x * x * x; });
  else if (e == 0.5f) map_floats(a, out, n, [](F4 x) { return lanes(x, [](float v) { return std::sqrt(v); }); });
  else {
    for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<float>(std::pow(static_cast<double>(a[i]), static_cast<double>(e)));
  }
  return true;
}

// The broadcast of `as` and `bs` to `shape` with dimensions of extent 1 dropped and
// neighbouring dimensions merged where each operand is either whole or broadcast in both
// (so [1,32,112,112] * [1,32,1,1] loops as [32,12544] * [32,1]); rewrites the three.
void coalesce(Dims& shape, Dims& as, Dims& bs) {
  const std::size_t rank = shape.size();
  auto padded = [&](const Dims& in) {
    Dims p(rank, 1);
    std::copy(in.begin(), in.end(), p.begin() + static_cast<std::ptrdiff_t>(rank - in.size()));
    return p;
  };
  const Dims pa = padded(as), pb = padded(bs);
  Dims s, a, b;
  for (std::size_t d = 0; d < rank; ++d) {
    if (shape[d] == 1) continue;
    const bool ba = pa[d] == 1, bb = pb[d] == 1;
    if (!s.empty() && (a.back() == 1) == ba && (b.back() == 1) == bb) {
      s.back() *= shape[d];
      if (!ba) a.back() *= shape[d];
      if (!bb) b.back() *= shape[d];
      continue;
    }
    s.push_back(shape[d]);
    a.push_back(ba ? 1 : shape[d]);
    b.push_back(bb ? 1 : shape[d]);
  }
  if (s.empty()) s = a = b = {1};
  shape = std::move(s);
  as = std::move(a);
  bs = std::move(b);
}

template <typename T>
void apply_binary(BinaryOp op, const Dims& shape, const Dims& as, const Dims& bs, const T* a, const T* b, T* out) {
  if constexpr (std::is_same_v<T, float>) {
    if (op == BinaryOp::pow && pow_by_constant(shape, bs, a, b, out)) return;
  }
  switch (op) {
    case BinaryOp::add: return broadcast_loop(shape, as, bs, a, b, out, [](auto x, auto y) { return x + y; });
    case BinaryOp::sub: return broadcast_loop(shape, as, bs, a, b, out, [](auto x, auto y) { return x - y; });
    case BinaryOp::mul: return broadcast_loop(shape, as, bs, a, b, out, [](auto x, auto y) { return x * y; });
    case BinaryOp::div:
      if constexpr (std::is_same_v<T, float>) return broadcast_loop(shape, as, bs, a, b, out, [](auto x, auto y) { return x / y; });
      return broadcast_loop(shape, as, bs, a, b, out, [](T x, T y) {
        if constexpr (std::is_integral_v<T>) return y == 0 ? T(0) : x / y;
        return x / y;
      });
    case BinaryOp::pow:
      return broadcast_loop(shape, as, bs, a, b, out, [](T x, T y) {
        return static_cast<T>(std::pow(static_cast<double>(x), static_cast<double>(y)));
      });
  }
}

Tensor binary(const Node& node, const Inputs& in) {
  const Tensor& a = input(node, in, 0);
  const Tensor& b = input(node, in, 1);
  if (a.layout != TensorLayout::plain || b.layout != TensorLayout::plain) fail(node, "inputs must be plain");
  const BinaryOp op = binary_op(node.op_type);
  Dims shape = broadcast_shape(a.shape, b.shape);
  // Equal shapes: one flat loop; else the dimensions coalesced (contiguous inner loops).
  Dims as = a.shape, bs = b.shape, loop = shape;
  if (as == bs) as = bs = loop = {element_count(shape)};
  else coalesce(loop, as, bs);
  Tensor out;
  out.shape = shape;
  if (a.type == ElemType::f32 || b.type == ElemType::f32) {
    if (a.type != b.type && op != BinaryOp::pow) fail(node, "inputs of different element types");
    out.f32.resize(static_cast<std::size_t>(element_count(shape)));
    // Pow with an integer exponent: the exponent as float.
    AlignedFloats exponent;
    const float* bp = b.f32.data();
    if (b.type == ElemType::i64) {
      for (auto v : b.i64) exponent.push_back(static_cast<float>(v));
      bp = exponent.data();
    }
    apply_binary<float>(op, loop, as, bs, a.f32.data(), bp, out.f32.data());
    return out;
  }
  out.type = ElemType::i64;
  out.i64.resize(static_cast<std::size_t>(element_count(shape)));
  apply_binary<std::int64_t>(op, loop, as, bs, a.i64.data(), b.i64.data(), out.i64.data());
  return out;
}

// An elementwise float operator: out[i] = f(x[i]), f on four lanes at a time.
template <typename F>
Tensor unary(const Node& node, const Inputs& in, F f) {
  const Tensor& x = floats_in(node, in, 0);
  Tensor out;
  out.shape = x.shape;
  out.f32.resize(x.f32.size());
  map_floats(x.f32.data(), out.f32.data(), x.f32.size(), f);
  return out;
}

Tensor clip(const Node& node, const Inputs& in) {
  float lo = node.attr_float("min", -std::numeric_limits<float>::infinity());
  float hi = node.attr_float("max", std::numeric_limits<float>::infinity());
  if (const Tensor* t = optional_in(in, 1); t && t->elements() == 1) lo = t->type == ElemType::f32 ? t->f32[0] : static_cast<float>(t->i64[0]);
  if (const Tensor* t = optional_in(in, 2); t && t->elements() == 1) hi = t->type == ElemType::f32 ? t->f32[0] : static_cast<float>(t->i64[0]);
  return unary(node, in, [lo, hi](F4 x) {
    const F4 m = select(x < lo, splat(lo), x);  // std::min(std::max(x, lo), hi), NaN kept
    return select(hi < m, splat(hi), m);
  });
}

// ---- linear algebra ---------------------------------------------------------------------

// c[m][n] += a[m][k] * b[k][n] for row-major matrices with leading dimensions.
void matmul_into(const float* a, const float* b, float* c, std::int64_t m, std::int64_t n, std::int64_t k) {
  for (std::int64_t i = 0; i < m; ++i) {
    float* row = c + i * n;
    for (std::int64_t p = 0; p < k; ++p) {
      const float av = a[i * k + p];
      const float* brow = b + p * n;
      for (std::int64_t j = 0; j < n; ++j) row[j] += av * brow[j];
    }
  }
}

Tensor matmul(const Node& node, const Inputs& in) {
  const Tensor& a = floats_in(node, in, 0);
  const Tensor& b = floats_in(node, in, 1);
  Dims as = a.shape, bs = b.shape;
  if (as.empty() || bs.empty()) fail(node, "MatMul of a scalar");
  const bool a_vec = as.size() == 1, b_vec = bs.size() == 1;
  if (a_vec) as.insert(as.begin(), 1);
  if (b_vec) bs.push_back(1);
  const std::int64_t m = as[as.size() - 2], k = as.back(), n = bs.back();
  if (bs[bs.size() - 2] != k) {
    fail(node, "shapes " + shape_text(a.shape) + " and " + shape_text(b.shape) + " do not multiply");
  }
  Dims abatch(as.begin(), as.end() - 2), bbatch(bs.begin(), bs.end() - 2);
  Dims batch = broadcast_shape(abatch, bbatch);
  Dims shape = batch;
  if (!a_vec) shape.push_back(m);
  if (!b_vec) shape.push_back(n);
  Tensor out = Tensor::floats(shape);
  // Each batch's operand offsets, then the products (rows split when there is one batch).
  std::vector<std::pair<std::int64_t, std::int64_t>> offsets;
  for_each_broadcast(batch, {abatch, bbatch}, [&](std::int64_t, const Dims& off) { offsets.emplace_back(off[0], off[1]); });
  const auto batches = static_cast<std::int64_t>(offsets.size());
  parallel_ranges(batches * m, std::max<std::int64_t>(1, kElementGrain / std::max<std::int64_t>(n * k / 16, 1)),
                  [&](std::int64_t first, std::int64_t last) {
                    for (std::int64_t row = first; row < last;) {
                      const std::int64_t i = row / m, r0 = row % m, rows = std::min(m - r0, last - row);
                      const auto [oa, ob] = offsets[static_cast<std::size_t>(i)];
                      matmul_into(a.f32.data() + oa * m * k + r0 * k, b.f32.data() + ob * k * n,
                                  out.f32.data() + (i * m + r0) * n, rows, n, k);
                      row += rows;
                    }
                  });
  return out;
}

Tensor gemm(const Node& node, const Inputs& in) {
  const Tensor& a = floats_in(node, in, 0);
  const Tensor& b = floats_in(node, in, 1);
  if (a.shape.size() != 2 || b.shape.size() != 2) fail(node, "Gemm needs 2-D A and B");
  const bool ta = node.attr_int("transA", 0) != 0, tb = node.attr_int("transB", 0) != 0;
  const float alpha = node.attr_float("alpha", 1.0f), beta = node.attr_float("beta", 1.0f);
  const std::int64_t m = ta ? a.shape[1] : a.shape[0], k = ta ? a.shape[0] : a.shape[1];
  const std::int64_t n = tb ? b.shape[0] : b.shape[1];
  if ((tb ? b.shape[1] : b.shape[0]) != k) fail(node, "shapes " + shape_text(a.shape) + " and " + shape_text(b.shape) + " do not multiply");
  AlignedFloats at, bt;
  const float* ap = a.f32.data();
  const float* bp = b.f32.data();
  if (ta) {
    at.resize(static_cast<std::size_t>(m * k));
    for (std::int64_t i = 0; i < k; ++i)
      for (std::int64_t j = 0; j < m; ++j) at[static_cast<std::size_t>(j * k + i)] = a.f32[static_cast<std::size_t>(i * m + j)];
    ap = at.data();
  }
  if (tb) {
    bt.resize(static_cast<std::size_t>(k * n));
    for (std::int64_t i = 0; i < n; ++i)
      for (std::int64_t j = 0; j < k; ++j) bt[static_cast<std::size_t>(j * n + i)] = b.f32[static_cast<std::size_t>(i * k + j)];
    bp = bt.data();
  }
  Tensor out = Tensor::floats({m, n});
  matmul_into(ap, bp, out.f32.data(), m, n, k);
  for (float& v : out.f32) v *= alpha;
  if (const Tensor* c = optional_in(in, 2)) {
    if (c->type != ElemType::f32) fail(node, "C must be float");
    Dims shape = broadcast_shape(c->shape, {m, n});
    if (shape != Dims{m, n}) fail(node, "C of shape " + shape_text(c->shape) + " does not broadcast to [M,N]");
    for_each_broadcast(shape, {c->shape}, [&](std::int64_t i, const Dims& off) {
      out.f32[static_cast<std::size_t>(i)] += beta * c->f32[static_cast<std::size_t>(off[0])];
    });
  }
  return out;
}

// ---- convolution and pooling --------------------------------------------------------------

struct Window {
  std::int64_t r, s, sh, sw, dh, dw, pt, pl, pb, pr;
};

Window window_of(const Node& node, std::int64_t r, std::int64_t s) {
  const std::string pad = node.attributes.count("auto_pad") && node.attributes.at("auto_pad").s
                              ? *node.attributes.at("auto_pad").s : "NOTSET";
  if (pad != "NOTSET" && pad != "VALID") fail(node, "auto_pad " + pad + " is not supported (give pads explicitly)");
  Dims strides = node.attr_ints("strides"), dil = node.attr_ints("dilations"), pads = node.attr_ints("pads");
  if (strides.empty()) strides = {1, 1};
  if (dil.empty()) dil = {1, 1};
  if (pads.empty()) pads = {0, 0, 0, 0};
  if (strides.size() != 2 || dil.size() != 2 || pads.size() != 4) fail(node, "only 2-D windows are supported");
  return {r, s, strides[0], strides[1], dil[0], dil[1], pads[0], pads[1], pads[2], pads[3]};
}

std::int64_t out_extent(std::int64_t in, std::int64_t k, std::int64_t stride, std::int64_t dil, std::int64_t lo,
                        std::int64_t hi) {
  return (in + lo + hi - dil * (k - 1) - 1) / stride + 1;
}

Tensor conv(const Node& node, const Inputs& in) {
  const Tensor& x = floats_in(node, in, 0);
  const Tensor& w = floats_in(node, in, 1);
  if (x.shape.size() != 4 || w.shape.size() != 4) fail(node, "only 2-D convolutions (4-D tensors) are supported");
  const std::int64_t n = x.shape[0], c = x.shape[1], h = x.shape[2], wd = x.shape[3];
  const std::int64_t k = w.shape[0], cg = w.shape[1], groups = node.attr_int("group", 1);
  if (groups < 1 || c % groups || k % groups || cg != c / groups) {
    fail(node, "weight " + shape_text(w.shape) + " does not fit input " + shape_text(x.shape) + " with group " +
                   std::to_string(groups));
  }
  const Window win = window_of(node, w.shape[2], w.shape[3]);
  const std::int64_t p = out_extent(h, win.r, win.sh, win.dh, win.pt, win.pb);
  const std::int64_t q = out_extent(wd, win.s, win.sw, win.dw, win.pl, win.pr);
  const Tensor* bias = optional_in(in, 2);
  Tensor out = Tensor::floats({n, k, p, q});
  const std::int64_t kg = k / groups;
  parallel_ranges(n * k, 1, [&](std::int64_t first, std::int64_t last) {
    for (std::int64_t plane_index = first; plane_index < last; ++plane_index) {
      const std::int64_t b = plane_index / k, ko = plane_index % k;
      float* plane = out.f32.data() + (b * k + ko) * p * q;
      const float init = bias ? bias->f32[static_cast<std::size_t>(ko)] : 0.0f;
      std::fill(plane, plane + p * q, init);
      const std::int64_t c0 = ko / kg * cg;
      for (std::int64_t ci = 0; ci < cg; ++ci) {
        const float* src = x.f32.data() + (b * c + c0 + ci) * h * wd;
        for (std::int64_t y = 0; y < win.r; ++y) {
          for (std::int64_t z = 0; z < win.s; ++z) {
            const float wv = w.f32[static_cast<std::size_t>(((ko * cg + ci) * win.r + y) * win.s + z)];
            for (std::int64_t op = 0; op < p; ++op) {
              const std::int64_t iy = op * win.sh - win.pt + y * win.dh;
              if (iy < 0 || iy >= h) continue;
              const float* row = src + iy * wd;
              float* orow = plane + op * q;
              for (std::int64_t oq = 0; oq < q; ++oq) {
                const std::int64_t ix = oq * win.sw - win.pl + z * win.dw;
                if (ix >= 0 && ix < wd) orow[oq] += wv * row[ix];
              }
            }
          }
        }
      }
    }
  });
  return out;
}

Tensor pool(const Node& node, const Inputs& in, bool max) {
  const Tensor& x = floats_in(node, in, 0);
  if (x.shape.size() != 4) fail(node, "only 2-D pooling (4-D tensors) is supported");
  if (node.attr_int("ceil_mode", 0) != 0) fail(node, "ceil_mode 1 is not supported");
  Dims ks = node.attr_ints("kernel_shape");
  if (ks.size() != 2) fail(node, "kernel_shape must have 2 values");
  const Window win = window_of(node, ks[0], ks[1]);
  const bool include_pad = node.attr_int("count_include_pad", 0) != 0;
  const std::int64_t n = x.shape[0], c = x.shape[1], h = x.shape[2], wd = x.shape[3];
  const std::int64_t p = out_extent(h, win.r, win.sh, win.dh, win.pt, win.pb);
  const std::int64_t q = out_extent(wd, win.s, win.sw, win.dw, win.pl, win.pr);
  Tensor out = Tensor::floats({n, c, p, q});
  parallel_ranges(n * c, 1, [&](std::int64_t first, std::int64_t last) {
  for (std::int64_t plane = first; plane < last; ++plane) {
    const float* src = x.f32.data() + plane * h * wd;
    for (std::int64_t op = 0; op < p; ++op) {
      for (std::int64_t oq = 0; oq < q; ++oq) {
        double best = -std::numeric_limits<double>::infinity(), sum = 0;
        std::int64_t count = 0;
        for (std::int64_t y = 0; y < win.r; ++y) {
          const std::int64_t iy = op * win.sh - win.pt + y * win.dh;
          for (std::int64_t z = 0; z < win.s; ++z) {
            const std::int64_t ix = oq * win.sw - win.pl + z * win.dw;
            if (iy < 0 || iy >= h || ix < 0 || ix >= wd) {
              if (include_pad) ++count;
              continue;
            }
            const double v = src[iy * wd + ix];
            best = std::max(best, v);
            sum += v;
            ++count;
          }
        }
        out.f32[static_cast<std::size_t>((plane * p + op) * q + oq)] =
            static_cast<float>(max ? best : count ? sum / static_cast<double>(count) : 0.0);
      }
    }
  }
  });
  return out;
}

Tensor global_average_pool(const Node& node, const Inputs& in) {
  const Tensor& x = floats_in(node, in, 0);
  if (x.shape.size() < 3) fail(node, "input must have spatial dimensions");
  Dims shape = x.shape;
  std::int64_t spatial = 1;
  for (std::size_t i = 2; i < shape.size(); ++i) {
    spatial *= shape[i];
    shape[i] = 1;
  }
  Tensor out = Tensor::floats(shape);
  parallel_ranges(shape[0] * shape[1], std::max<std::int64_t>(1, kElementGrain / std::max<std::int64_t>(spatial, 1)),
                  [&](std::int64_t first, std::int64_t last) {
                    for (std::int64_t plane = first; plane < last; ++plane) {
                      double sum = 0;
                      for (std::int64_t i = 0; i < spatial; ++i) sum += x.f32[static_cast<std::size_t>(plane * spatial + i)];
                      out.f32[static_cast<std::size_t>(plane)] = static_cast<float>(sum / static_cast<double>(spatial));
                    }
                  });
  return out;
}

Tensor batch_norm(const Node& node, const Inputs& in) {
  const Tensor& x = floats_in(node, in, 0);
  const Tensor& scale = floats_in(node, in, 1);
  const Tensor& bias = floats_in(node, in, 2);
  const Tensor& mean = floats_in(node, in, 3);
  const Tensor& var = floats_in(node, in, 4);
  const double eps = node.attr_float("epsilon", 1e-5f);
  if (x.shape.size() < 2) fail(node, "input must have a channel dimension");
  const std::int64_t c = x.shape[1], inner = element_count(Dims(x.shape.begin() + 2, x.shape.end()));
  Tensor out = x;
  parallel_ranges(x.shape[0] * c, std::max<std::int64_t>(1, kElementGrain / std::max<std::int64_t>(inner, 1)),
                  [&](std::int64_t first, std::int64_t last) {
                    for (std::int64_t i = first; i < last; ++i) {
                      const auto ch = static_cast<std::size_t>(i % c);
                      const double a = scale.f32[ch] / std::sqrt(var.f32[ch] + eps), b = bias.f32[ch] - a * mean.f32[ch];
                      for (std::int64_t j = 0; j < inner; ++j) {
                        float& v = out.f32[static_cast<std::size_t>(i * inner + j)];
                        v = static_cast<float>(a * v + b);
                      }
                    }
                  });
  return out;
}

// ---- normalisation ------------------------------------------------------------------------

Tensor softmax(const Node& node, const Inputs& in) {
  const Tensor& x = floats_in(node, in, 0);
  const std::int64_t axis = norm_axis(node, node.attr_int("axis", -1), x.shape.size());
  const std::int64_t len = x.shape[static_cast<std::size_t>(axis)];
  const std::int64_t inner = element_count(Dims(x.shape.begin() + axis + 1, x.shape.end()));
  const std::int64_t outer = element_count(Dims(x.shape.begin(), x.shape.begin() + axis));
  Tensor out = x;
  if (inner == 1) {
    // Rows of `len` contiguous floats: the exponentials four lanes at a time.
    parallel_ranges(outer, std::max<std::int64_t>(1, kElementGrain / 4 / std::max<std::int64_t>(len, 1)),
                    [&](std::int64_t first, std::int64_t last) {
                      for (std::int64_t o = first; o < last; ++o) {
                        float* row = out.f32.data() + o * len;
                        float mx = -std::numeric_limits<float>::infinity();
                        for (std::int64_t j = 0; j < len; ++j) mx = std::max(mx, row[j]);
                        map_floats_serial(row, row, static_cast<std::size_t>(len), [mx](F4 v) { return exp4(v - mx); });
                        double sum = 0;
                        for (std::int64_t j = 0; j < len; ++j) sum += row[j];
                        const float inv = static_cast<float>(1.0 / sum);
                        for (std::int64_t j = 0; j < len; ++j) row[j] *= inv;
                      }
                    });
    return out;
  }
  for (std::int64_t o = 0; o < outer; ++o) {
    for (std::int64_t i = 0; i < inner; ++i) {
      float* base = out.f32.data() + o * len * inner + i;
      float mx = -std::numeric_limits<float>::infinity();
      for (std::int64_t j = 0; j < len; ++j) mx = std::max(mx, base[j * inner]);
      double sum = 0;
      for (std::int64_t j = 0; j < len; ++j) {
        base[j * inner] = std::exp(base[j * inner] - mx);
        sum += base[j * inner];
      }
      for (std::int64_t j = 0; j < len; ++j) base[j * inner] = static_cast<float>(base[j * inner] / sum);
    }
  }
  return out;
}

std::vector<Tensor> layer_norm(const Node& node, const Inputs& in, std::size_t outputs) {
  const Tensor& x = floats_in(node, in, 0);
  const Tensor& scale = floats_in(node, in, 1);
  const Tensor* bias = optional_in(in, 2);
  const std::int64_t axis = norm_axis(node, node.attr_int("axis", -1), x.shape.size());
  const double eps = node.attr_float("epsilon", 1e-5f);
  const std::int64_t inner = element_count(Dims(x.shape.begin() + axis, x.shape.end()));
  const std::int64_t rows = element_count(Dims(x.shape.begin(), x.shape.begin() + axis));
  if (scale.elements() != inner || (bias && bias->elements() != inner)) {
    fail(node, "scale and bias must have the normalised dimensions' " + std::to_string(inner) + " elements");
  }
  Dims stat_shape = x.shape;
  for (std::size_t i = static_cast<std::size_t>(axis); i < stat_shape.size(); ++i) stat_shape[i] = 1;
  Tensor out = x, mean = Tensor::floats(stat_shape), inv = Tensor::floats(stat_shape);
  parallel_ranges(rows, std::max<std::int64_t>(1, kElementGrain / 4 / std::max<std::int64_t>(inner, 1)),
                  [&](std::int64_t first, std::int64_t last) {
  for (std::int64_t r = first; r < last; ++r) {
    float* row = out.f32.data() + r * inner;
    double sum = 0, sq = 0;
    for (std::int64_t j = 0; j < inner; ++j) sum += row[j];
    const double mu = sum / static_cast<double>(inner);
    for (std::int64_t j = 0; j < inner; ++j) sq += (row[j] - mu) * (row[j] - mu);
    const double rstd = 1.0 / std::sqrt(sq / static_cast<double>(inner) + eps);
    for (std::int64_t j = 0; j < inner; ++j) {
      const auto jj = static_cast<std::size_t>(j);
      row[j] = static_cast<float>((row[j] - mu) * rstd * scale.f32[jj] + (bias ? bias->f32[jj] : 0.0f));
    }
    mean.f32[static_cast<std::size_t>(r)] = static_cast<float>(mu);
    inv.f32[static_cast<std::size_t>(r)] = static_cast<float>(rstd);
  }
  });
  std::vector<Tensor> result;  // moved in (an initializer list would copy)
  result.push_back(std::move(out));
  if (outputs > 1) result.push_back(std::move(mean));
  if (outputs > 2) result.push_back(std::move(inv));
  return result;
}

// ---- shapes and data movement ---------------------------------------------------------------

Tensor flatten(const Node& node, const Inputs& in) {
  const Tensor& x = input(node, in, 0);
  const std::int64_t axis = norm_axis(node, node.attr_int("axis", 1), x.shape.size(), true);
  const std::int64_t outer = element_count(Dims(x.shape.begin(), x.shape.begin() + axis));
  return with_shape(x, {outer, x.elements() / std::max<std::int64_t>(outer, 1)});
}

Tensor reshape(const Node& node, const Inputs& in) {
  const Tensor& x = input(node, in, 0);
  Dims shape = ints_of(node, input(node, in, 1));
  const bool allow_zero = node.attr_int("allowzero", 0) != 0;
  std::int64_t known = 1, infer = -1;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 0 && !allow_zero) {
      if (i >= x.shape.size()) fail(node, "shape value 0 at position " + std::to_string(i) + " has no input dimension to copy");
      shape[i] = x.shape[i];
    }
    if (shape[i] == -1) {
      if (infer >= 0) fail(node, "more than one -1 in the target shape");
      infer = static_cast<std::int64_t>(i);
    } else {
      known *= shape[i];
    }
  }
  if (infer >= 0) {
    if (known == 0 || x.elements() % known) fail(node, "cannot reshape " + shape_text(x.shape) + " to " + shape_text(shape));
    shape[static_cast<std::size_t>(infer)] = x.elements() / known;
  }
  if (element_count(shape) != x.elements()) fail(node, "cannot reshape " + shape_text(x.shape) + " to " + shape_text(shape));
  return with_shape(x, shape);
}

// The transpose of 2-D tiles: when the output's last axis is strided in the source and
// another output axis `d1` is the source's contiguous one, out[.., i, .., j] =
// src[base + i + j * step] is copied in 16x16 tiles, so that both sides read and write
// whole cache lines (a row-by-row gather touches a line per element). False when no axis
// fits.
template <typename T>
bool permute_tiled(const Dims& shape, const Dims& strides, const T* src, T* out) {
  const std::size_t rank = shape.size();
  if (rank < 2 || strides.back() == 1) return false;
  std::size_t d1 = rank;
  for (std::size_t d = 0; d + 1 < rank; ++d) {
    if (strides[d] == 1 && shape[d] > 1) d1 = d;
  }
  if (d1 == rank) return false;
  const Dims out_strides = strides_of(shape);
  const std::int64_t n1 = shape[d1], nl = shape.back(), step = strides.back(), row = out_strides[d1];
  // The other axes, walked as one flat index.
  Dims other;
  for (std::size_t d = 0; d + 1 < rank; ++d) {
    if (d != d1) other.push_back(static_cast<std::int64_t>(d));
  }
  std::int64_t outer = 1;
  for (auto d : other) outer *= shape[static_cast<std::size_t>(d)];
  constexpr std::int64_t kTile = 16;
  const std::int64_t tiles1 = (n1 + kTile - 1) / kTile;
  parallel_ranges(outer * tiles1, std::max<std::int64_t>(1, kElementGrain / (kTile * nl)), [&](std::int64_t first, std::int64_t last) {
    for (std::int64_t w = first; w < last; ++w) {
      std::int64_t rest = w / tiles1, so = 0, dst_off = 0;
      for (std::size_t k = other.size(); k-- > 0;) {
        const auto d = static_cast<std::size_t>(other[k]);
        const std::int64_t at = rest % shape[d];
        rest /= shape[d];
        so += at * strides[d];
        dst_off += at * out_strides[d];
      }
      const std::int64_t i0 = w % tiles1 * kTile, i1 = std::min(n1, i0 + kTile);
      for (std::int64_t j0 = 0; j0 < nl; j0 += kTile) {
        const std::int64_t j1 = std::min(nl, j0 + kTile);
        for (std::int64_t i = i0; i < i1; ++i) {
          T* dst = out + dst_off + i * row;
          const T* from = src + so + i;
          for (std::int64_t j = j0; j < j1; ++j) dst[j] = from[j * step];
        }
      }
    }
  });
  return true;
}

// out (row-major in `shape`) = src read with `strides` per output dimension: an odometer
// over the outer dimensions, a strided loop over the last.
template <typename T>
void permute(const Dims& shape, const Dims& strides, const T* src, T* out) {
  const std::size_t rank = shape.size();
  if (permute_tiled(shape, strides, src, out)) return;
  if (rank == 0) {
    out[0] = src[0];
    return;
  }
  const std::int64_t inner = shape.back(), step = strides.back();
  const std::int64_t outer = inner ? element_count(shape) / inner : 0;
  parallel_ranges(outer, std::max<std::int64_t>(1, kElementGrain / std::max<std::int64_t>(inner, 1)),
                  [&](std::int64_t first, std::int64_t last) {
  Dims index(rank, 0);
  std::int64_t off = 0;
  for (std::int64_t d = static_cast<std::int64_t>(rank) - 2, rest = first; d >= 0 && rest > 0; --d) {
    const auto du = static_cast<std::size_t>(d);
    index[du] = rest % shape[du];
    rest /= shape[du];
    off += index[du] * strides[du];
  }
  for (std::int64_t o = first; o < last; ++o) {
    T* dst = out + o * inner;
    if (step == 1) std::copy(src + off, src + off + inner, dst);  // the last axis stays last
    else for (std::int64_t j = 0; j < inner; ++j) dst[j] = src[off + j * step];
    for (std::size_t d = rank - 1; d-- > 0;) {
      ++index[d];
      off += strides[d];
      if (index[d] < shape[d]) break;
      off -= strides[d] * index[d];
      index[d] = 0;
    }
  }
  });
}

Tensor transpose(const Node& node, const Inputs& in) {
  const Tensor& x = input(node, in, 0);
  const std::size_t rank = x.shape.size();
  Dims perm = node.attr_ints("perm");
  if (perm.empty()) {
    for (std::size_t i = rank; i-- > 0;) perm.push_back(static_cast<std::int64_t>(i));
  }
  if (perm.size() != rank) fail(node, "perm has " + std::to_string(perm.size()) + " values for rank " + std::to_string(rank));
  Dims shape(rank), src_strides = strides_of(x.shape), strides(rank);
  for (std::size_t i = 0; i < rank; ++i) {
    const auto from = static_cast<std::size_t>(norm_axis(node, perm[i], rank));
    shape[i] = x.shape[from];
    strides[i] = src_strides[from];
  }
  Tensor out;
  out.type = x.type;
  out.shape = shape;
  if (x.type == ElemType::f32) {
    out.f32.resize(x.f32.size());
    permute(shape, strides, x.f32.data(), out.f32.data());
  } else {
    out.i64.resize(x.i64.size());
    permute(shape, strides, x.i64.data(), out.i64.data());
  }
  return out;
}

Tensor concat(const Node& node, const Inputs& in) {
  const Tensor& first = input(node, in, 0);
  const std::int64_t axis = norm_axis(node, node.attr_int("axis", 0), first.shape.size());
  Dims shape = first.shape;
  shape[static_cast<std::size_t>(axis)] = 0;
  for (std::size_t i = 0; i < in.size(); ++i) {
    const Tensor& t = input(node, in, i);
    if (t.type != first.type || t.shape.size() != first.shape.size()) fail(node, "inputs of different types or ranks");
    shape[static_cast<std::size_t>(axis)] += t.shape[static_cast<std::size_t>(axis)];
  }
  const std::int64_t outer = element_count(Dims(shape.begin(), shape.begin() + axis));
  Tensor out;
  out.type = first.type;
  out.shape = shape;
  for (std::int64_t o = 0; o < outer; ++o) {
    for (const Tensor* t : in) {
      const std::int64_t chunk = t->elements() / std::max<std::int64_t>(outer, 1);
      if (t->type == ElemType::f32) {
        out.f32.insert(out.f32.end(), t->f32.begin() + o * chunk, t->f32.begin() + (o + 1) * chunk);
      } else {
        out.i64.insert(out.i64.end(), t->i64.begin() + o * chunk, t->i64.begin() + (o + 1) * chunk);
      }
    }
  }
  return out;
}

Tensor gather(const Node& node, const Inputs& in) {
  const Tensor& x = input(node, in, 0);
  const Tensor& idx_t = input(node, in, 1);
  const Dims idx = ints_of(node, idx_t);
  const std::int64_t axis = norm_axis(node, node.attr_int("axis", 0), x.shape.size());
  const std::int64_t extent = x.shape[static_cast<std::size_t>(axis)];
  const std::int64_t outer = element_count(Dims(x.shape.begin(), x.shape.begin() + axis));
  const std::int64_t inner = element_count(Dims(x.shape.begin() + axis + 1, x.shape.end()));
  Dims shape(x.shape.begin(), x.shape.begin() + axis);
  shape.insert(shape.end(), idx_t.shape.begin(), idx_t.shape.end());
  shape.insert(shape.end(), x.shape.begin() + axis + 1, x.shape.end());
  Tensor out;
  out.type = x.type;
  out.shape = std::move(shape);
  const auto rows = static_cast<std::int64_t>(idx.size());
  auto copy = [&](const auto& from, auto& to) {
    to.resize(static_cast<std::size_t>(outer * rows * inner));
    auto dst = to.begin();
    for (std::int64_t o = 0; o < outer; ++o) {
      for (std::int64_t i : idx) {
        const std::int64_t at = i < 0 ? i + extent : i;
        dst = std::copy_n(from.begin() + (o * extent + at) * inner, inner, dst);
      }
    }
  };
  for (std::int64_t i : idx) {
    if (i < -extent || i >= extent) fail(node, "index " + std::to_string(i) + " is out of range for extent " + std::to_string(extent));
  }
  if (x.type == ElemType::f32) copy(x.f32, out.f32);
  else copy(x.i64, out.i64);
  return out;
}

Dims axes_of(const Node& node, const Inputs& in) {
  if (const Tensor* t = optional_in(in, 1)) return ints_of(node, *t);
  return node.attr_ints("axes");
}

Tensor unsqueeze(const Node& node, const Inputs& in) {
  const Tensor& x = input(node, in, 0);
  Dims axes = axes_of(node, in);
  const std::size_t rank = x.shape.size() + axes.size();
  for (auto& a : axes) a = norm_axis(node, a, rank);
  std::sort(axes.begin(), axes.end());
  Dims shape;
  std::size_t from = 0;
  for (std::size_t i = 0; i < rank; ++i) {
    if (std::binary_search(axes.begin(), axes.end(), static_cast<std::int64_t>(i))) {
      shape.push_back(1);
    } else {
      if (from >= x.shape.size()) fail(node, "axes do not fit the input's rank");
      shape.push_back(x.shape[from++]);
    }
  }
  return with_shape(x, shape);
}

Tensor squeeze(const Node& node, const Inputs& in) {
  const Tensor& x = input(node, in, 0);
  Dims axes = axes_of(node, in);
  for (auto& a : axes) a = norm_axis(node, a, x.shape.size());
  Dims shape;
  for (std::size_t i = 0; i < x.shape.size(); ++i) {
    const bool listed = std::find(axes.begin(), axes.end(), static_cast<std::int64_t>(i)) != axes.end();
    if (listed && x.shape[i] != 1) fail(node, "cannot squeeze axis " + std::to_string(i) + " of extent " + std::to_string(x.shape[i]));
    if ((axes.empty() && x.shape[i] == 1) || listed) continue;
    shape.push_back(x.shape[i]);
  }
  return with_shape(x, shape);
}

Tensor shape_op(const Node& node, const Inputs& in) {
  const Tensor& x = input(node, in, 0);
  const auto rank = static_cast<std::int64_t>(x.shape.size());
  std::int64_t start = node.attr_int("start", 0), end = node.attr_int("end", rank);
  if (start < 0) start += rank;
  if (end < 0) end += rank;
  start = std::clamp<std::int64_t>(start, 0, rank);
  end = std::clamp<std::int64_t>(end, start, rank);
  Dims dims(x.shape.begin() + start, x.shape.begin() + end);
  return Tensor::ints({static_cast<std::int64_t>(dims.size())}, dims);
}

Tensor slice(const Node& node, const Inputs& in) {
  const Tensor& x = input(node, in, 0);
  const std::size_t rank = x.shape.size();
  Dims starts = ints_of(node, input(node, in, 1)), ends = ints_of(node, input(node, in, 2));
  Dims axes, steps;
  if (const Tensor* t = optional_in(in, 3)) axes = ints_of(node, *t);
  if (const Tensor* t = optional_in(in, 4)) steps = ints_of(node, *t);
  if (axes.empty()) {
    for (std::size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<std::int64_t>(i));
  }
  if (steps.empty()) steps.assign(starts.size(), 1);
  if (ends.size() != starts.size() || axes.size() != starts.size() || steps.size() != starts.size()) {
    fail(node, "starts, ends, axes and steps differ in length");
  }
  Dims first(rank, 0), step(rank, 1), shape = x.shape;
  for (std::size_t i = 0; i < starts.size(); ++i) {
    const auto a = static_cast<std::size_t>(norm_axis(node, axes[i], rank));
    const std::int64_t dim = x.shape[a], st = steps[i];
    if (st == 0) fail(node, "a step of 0");
    std::int64_t s = starts[i] < 0 ? starts[i] + dim : starts[i];
    std::int64_t e = ends[i] < 0 ? ends[i] + dim : ends[i];
    if (st > 0) {
      s = std::clamp<std::int64_t>(s, 0, dim);
      e = std::clamp<std::int64_t>(e, 0, dim);
      shape[a] = e > s ? (e - s + st - 1) / st : 0;
    } else {
      s = std::clamp<std::int64_t>(s, 0, dim - 1);
      e = std::clamp<std::int64_t>(e, -1, dim - 1);
      shape[a] = s > e ? (s - e - st - 1) / -st : 0;
    }
    first[a] = s;
    step[a] = st;
  }
  const Dims src = strides_of(x.shape);
  Dims offsets;
  const std::int64_t total = element_count(shape);
  Dims index(rank, 0);
  for (std::int64_t flat = 0; flat < total; ++flat) {
    std::int64_t off = 0;
    for (std::size_t d = 0; d < rank; ++d) off += (first[d] + index[d] * step[d]) * src[d];
    offsets.push_back(off);
    for (std::size_t d = rank; d-- > 0;) {
      if (++index[d] < shape[d]) break;
      index[d] = 0;
    }
  }
  return take(x, shape, offsets);
}

Tensor cast(const Node& node, const Inputs& in) {
  const Tensor& x = input(node, in, 0);
  const std::int64_t to = node.attr_int("to", 1);
  Tensor out;
  out.shape = x.shape;
  if (to == 1) {  // FLOAT
    if (x.type == ElemType::f32) return x;
    for (auto v : x.i64) out.f32.push_back(static_cast<float>(v));
    return out;
  }
  if (to == 7 || to == 6) {  // INT64, INT32 (held as i64)
    out.type = ElemType::i64;
    if (x.type == ElemType::i64) return with_shape(x, x.shape);
    for (float v : x.f32) out.i64.push_back(static_cast<std::int64_t>(v));
    return out;
  }
  if (to == 9) {  // BOOL (held as i64 0/1)
    out.type = ElemType::i64;
    if (x.type == ElemType::i64) {
      for (auto v : x.i64) out.i64.push_back(v != 0 ? 1 : 0);
    } else {
      for (float v : x.f32) out.i64.push_back(v != 0.0f ? 1 : 0);
    }
    return out;
  }
  fail(node, "Cast to ONNX type " + std::to_string(to) + " is not supported (float, int64, int32 and bool only)");
}

Tensor constant(const Node& node) {
  auto at = [&](const char* key) -> const Attribute* {
    auto it = node.attributes.find(key);
    return it == node.attributes.end() ? nullptr : &it->second;
  };
  if (const Attribute* a = at("value"); a && a->t) return Tensor::of(*a->t);
  if (const Attribute* a = at("value_float"); a && a->f) return Tensor::floats({}, std::vector<float>{*a->f});
  if (const Attribute* a = at("value_floats")) return Tensor::floats({static_cast<std::int64_t>(a->floats.size())}, a->floats);
  if (const Attribute* a = at("value_int"); a && a->i) return Tensor::ints({}, {*a->i});
  if (const Attribute* a = at("value_ints")) return Tensor::ints({static_cast<std::int64_t>(a->ints.size())}, a->ints);
  fail(node, "a Constant without a supported value attribute");
}

// ---- activations of the exporters, comparisons, masks ----------------------------------------

// HardSigmoid: max(0, min(1, alpha x + beta)); HardSwish: x HardSigmoid(x) at alpha 1/6,
// beta 1/2 (ONNX's definitions).
Tensor hard_sigmoid(const Node& node, const Inputs& in, bool swish) {
  const float alpha = swish ? 1.0f / 6.0f : node.attr_float("alpha", 0.2f);
  const float beta = swish ? 0.5f : node.attr_float("beta", 0.5f);
  auto h = [alpha, beta](F4 x) {
    const F4 y = alpha * x + beta;
    const F4 m = select(0.0f < y, y, splat(0.0f));  // std::min(1, std::max(0, y))
    return select(m < 1.0f, m, splat(1.0f));
  };
  if (swish) return unary(node, in, [h](F4 x) { return x * h(x); });
  return unary(node, in, h);
}

// A value of a numeric tensor at a flat offset, as double (f32 or integer data).
double number_at(const Tensor& t, std::int64_t i) {
  const auto k = static_cast<std::size_t>(i);
  return t.type == ElemType::f32 ? static_cast<double>(t.f32[k]) : static_cast<double>(t.i64[k]);
}

// Booleans are held as i64 0/1 (the runner's tensors are float or integer).
Tensor bools(Dims shape) {
  Tensor t;
  t.type = ElemType::i64;
  t.i64.assign(static_cast<std::size_t>(element_count(shape)), 0);
  t.shape = std::move(shape);
  return t;
}

const Tensor& numeric_in(const Node& node, const Inputs& in, std::size_t i) {
  const Tensor& t = input(node, in, i);
  if (t.layout != TensorLayout::plain) fail(node, "input " + std::to_string(i) + " is not in the plain layout");
  if (t.type != ElemType::f32 && t.type != ElemType::i64) fail(node, "input " + std::to_string(i) + " has an element type without data");
  return t;
}

// Equal, Less, LessOrEqual, Greater, GreaterOrEqual (numbers compared as double: exact for
// float and for integers below 2^53), And, Or, Xor (nonzero is true): a boolean tensor
// with numpy broadcasting.
Tensor compare(const Node& node, const Inputs& in) {
  const Tensor& a = numeric_in(node, in, 0);
  const Tensor& b = numeric_in(node, in, 1);
  enum class Cmp { eq, lt, le, gt, ge, both, either, one };
  static const std::map<std::string, Cmp> kinds = {{"Equal", Cmp::eq},         {"Less", Cmp::lt},    {"LessOrEqual", Cmp::le},
                                                   {"Greater", Cmp::gt},        {"GreaterOrEqual", Cmp::ge},
                                                   {"And", Cmp::both},          {"Or", Cmp::either},  {"Xor", Cmp::one}};
  const auto kind = kinds.find(node.op_type);
  if (kind == kinds.end()) fail(node, "not a comparison");
  auto apply = [k = kind->second](auto x, auto y) -> std::int64_t {
    switch (k) {
      case Cmp::eq: return x == y;
      case Cmp::lt: return x < y;
      case Cmp::le: return x <= y;
      case Cmp::gt: return x > y;
      case Cmp::ge: return x >= y;
      case Cmp::both: return x != 0 && y != 0;
      case Cmp::either: return x != 0 || y != 0;
      case Cmp::one: return (x != 0) != (y != 0);
    }
    return 0;
  };
  Tensor out = bools(broadcast_shape(a.shape, b.shape));
  // Integers compared as integers (no rounding past 2^53), floats as floats (doubles when
  // the two differ in type); equal shapes in one flat loop.
  if (a.type == ElemType::i64 && b.type == ElemType::i64) {
    if (a.shape == b.shape) {
      for (std::size_t i = 0; i < out.i64.size(); ++i) out.i64[i] = apply(a.i64[i], b.i64[i]);
    } else {
      for_each_broadcast(out.shape, {a.shape, b.shape}, [&](std::int64_t i, const Dims& off) {
        out.i64[static_cast<std::size_t>(i)] = apply(a.i64[static_cast<std::size_t>(off[0])], b.i64[static_cast<std::size_t>(off[1])]);
      });
    }
  } else if (a.type == ElemType::f32 && b.type == ElemType::f32 && a.shape == b.shape) {
    for (std::size_t i = 0; i < out.i64.size(); ++i) out.i64[i] = apply(a.f32[i], b.f32[i]);
  } else {
    for_each_broadcast(out.shape, {a.shape, b.shape}, [&](std::int64_t i, const Dims& off) {
      out.i64[static_cast<std::size_t>(i)] = apply(number_at(a, off[0]), number_at(b, off[1]));
    });
  }
  return out;
}

Tensor not_op(const Node& node, const Inputs& in) {
  const Tensor& x = numeric_in(node, in, 0);
  Tensor out = bools(x.shape);
  for (std::int64_t i = 0; i < x.elements(); ++i) out.i64[static_cast<std::size_t>(i)] = number_at(x, i) == 0 ? 1 : 0;
  return out;
}

Tensor is_nan(const Node& node, const Inputs& in) {
  const Tensor& x = numeric_in(node, in, 0);
  Tensor out = bools(x.shape);
  if (x.type == ElemType::f32) {
    parallel_ranges(static_cast<std::int64_t>(x.f32.size()), kElementGrain, [&](std::int64_t first, std::int64_t last) {
      for (std::int64_t i = first; i < last; ++i) {
        out.i64[static_cast<std::size_t>(i)] = std::isnan(x.f32[static_cast<std::size_t>(i)]) ? 1 : 0;
      }
    });
  }
  return out;
}

// Where(condition, X, Y): X where the condition holds, else Y, the three broadcast.
Tensor where(const Node& node, const Inputs& in) {
  const Tensor& c = numeric_in(node, in, 0);
  const Tensor& x = numeric_in(node, in, 1);
  const Tensor& y = numeric_in(node, in, 2);
  if (x.type != y.type) fail(node, "X and Y have different element types");
  Tensor out;
  out.type = x.type;
  out.shape = broadcast_shape(broadcast_shape(c.shape, x.shape), y.shape);
  const auto n = static_cast<std::size_t>(element_count(out.shape));
  if (x.type == ElemType::f32) out.f32.resize(n);
  else out.i64.resize(n);
  if (n == 0) return out;
  // Rows of the last dimension, each operand whole or one value along it; the rows split
  // over the pool.
  const std::size_t rank = out.shape.size();
  auto aligned = [&](const Dims& operand) {
    Dims own = strides_of(operand), st(rank, 0);
    for (std::size_t i = 0; i < operand.size(); ++i) st[rank - operand.size() + i] = operand[i] == 1 ? 0 : own[i];
    return st;
  };
  const Dims sc = aligned(c.shape), sx = aligned(x.shape), sy = aligned(y.shape);
  const std::int64_t inner = rank ? out.shape.back() : 1;
  const std::int64_t outer = static_cast<std::int64_t>(n) / inner;
  const std::int64_t ic = rank ? sc.back() : 0, ix = rank ? sx.back() : 0, iy = rank ? sy.back() : 0;
  auto rows = [&](auto* dst, const auto* xs, const auto* ys) {
    parallel_ranges(outer, std::max<std::int64_t>(1, kElementGrain / inner), [&](std::int64_t first, std::int64_t last) {
      for (std::int64_t o = first; o < last; ++o) {
        std::int64_t oc = 0, ox = 0, oy = 0;
        for (std::int64_t d = static_cast<std::int64_t>(rank) - 2, rest = o; d >= 0 && rest > 0; --d) {
          const auto du = static_cast<std::size_t>(d);
          const std::int64_t at = rest % out.shape[du];
          rest /= out.shape[du];
          oc += at * sc[du];
          ox += at * sx[du];
          oy += at * sy[du];
        }
        for (std::int64_t j = 0; j < inner; ++j) {
          const bool take_x = number_at(c, oc + j * ic) != 0;
          dst[o * inner + j] = take_x ? xs[ox + j * ix] : ys[oy + j * iy];
        }
      }
    });
  };
  if (out.type == ElemType::f32) rows(out.f32.data(), x.f32.data(), y.f32.data());
  else rows(out.i64.data(), x.i64.data(), y.i64.data());
  return out;
}

// Expand(input, shape): the input broadcast to broadcast_shape(input, shape) (either side
// may have the 1s).
Tensor expand(const Node& node, const Inputs& in) {
  const Tensor& x = numeric_in(node, in, 0);
  const Dims target = ints_of(node, input(node, in, 1));
  Dims shape;
  try {
    shape = broadcast_shape(x.shape, target);
  } catch (const ModelError& e) {
    fail(node, e.what());
  }
  Dims offsets(static_cast<std::size_t>(element_count(shape)));
  for_each_broadcast(shape, {x.shape}, [&](std::int64_t i, const Dims& off) { offsets[static_cast<std::size_t>(i)] = off[0]; });
  return take(x, shape, offsets);
}

// ConstantOfShape(shape): a tensor of that shape filled with the `value` attribute's one
// element (float 0 without it).
Tensor constant_of_shape(const Node& node, const Inputs& in) {
  const Dims shape = ints_of(node, input(node, in, 0));
  for (auto d : shape) {
    if (d < 0) fail(node, "a negative dimension in the shape " + shape_text(shape));
  }
  auto it = node.attributes.find("value");
  if (it == node.attributes.end() || !it->second.t) return Tensor::floats(shape, 0.0f);
  const model::Initializer& v = *it->second.t;
  if (v.type == ElemType::f32 && v.f32.size() == 1) return Tensor::floats(shape, v.f32[0]);
  if ((v.type == ElemType::i64 || v.type == ElemType::i32) && v.i64.size() == 1) {
    return Tensor::ints(shape, Dims(static_cast<std::size_t>(element_count(shape)), v.i64[0]));
  }
  fail(node, "the value attribute must hold one float or integer (the importer keeps no data for other element types, "
             "such as bool)");
}

// GatherElements(data, indices, axis): out[i..] = data[i.. with index `axis` replaced by
// indices[i..]]; out has the indices' shape; negative indices count from the end.
Tensor gather_elements(const Node& node, const Inputs& in) {
  const Tensor& x = numeric_in(node, in, 0);
  const Tensor& idx_t = input(node, in, 1);
  const Dims idx = ints_of(node, idx_t);
  const std::size_t rank = x.shape.size();
  if (idx_t.shape.size() != rank) {
    fail(node, "indices " + shape_text(idx_t.shape) + " must have the rank of the data " + shape_text(x.shape));
  }
  const auto axis = static_cast<std::size_t>(norm_axis(node, node.attr_int("axis", 0), rank));
  const std::int64_t extent = x.shape[axis];
  const Dims strides = strides_of(x.shape);
  Dims offsets(idx.size());
  Dims index(rank, 0);
  for (std::size_t flat = 0; flat < idx.size(); ++flat) {
    std::int64_t i = idx[flat];
    if (i < -extent || i >= extent) fail(node, "index " + std::to_string(i) + " is out of range for extent " + std::to_string(extent));
    if (i < 0) i += extent;
    std::int64_t off = 0;
    for (std::size_t d = 0; d < rank; ++d) {
      if (d != axis && index[d] >= x.shape[d]) {
        fail(node, "indices " + shape_text(idx_t.shape) + " exceed the data " + shape_text(x.shape) + " on axis " + std::to_string(d));
      }
      off += (d == axis ? i : index[d]) * strides[d];
    }
    offsets[flat] = off;
    for (std::size_t d = rank; d-- > 0;) {
      if (++index[d] < idx_t.shape[d]) break;
      index[d] = 0;
    }
  }
  return take(x, idx_t.shape, offsets);
}

// Range(start, limit, delta): max(ceil((limit - start) / delta), 0) values start + i delta,
// float or integer as the inputs.
Tensor range(const Node& node, const Inputs& in) {
  const Tensor& s = numeric_in(node, in, 0);
  const Tensor& l = numeric_in(node, in, 1);
  const Tensor& d = numeric_in(node, in, 2);
  if (s.elements() != 1 || l.elements() != 1 || d.elements() != 1) fail(node, "start, limit and delta must be scalars");
  if (s.type == ElemType::i64) {
    const std::int64_t start = s.i64[0], limit = ints_of(node, l)[0], delta = ints_of(node, d)[0];
    if (delta == 0) fail(node, "delta is 0");
    const std::int64_t n = std::max<std::int64_t>(
        0, static_cast<std::int64_t>(std::ceil(static_cast<double>(limit - start) / static_cast<double>(delta))));
    Dims values(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) values[static_cast<std::size_t>(i)] = start + i * delta;
    return Tensor::ints({n}, std::move(values));
  }
  const double start = number_at(s, 0), limit = number_at(l, 0), delta = number_at(d, 0);
  if (delta == 0) fail(node, "delta is 0");
  const auto n = std::max<std::int64_t>(0, static_cast<std::int64_t>(std::ceil((limit - start) / delta)));
  Tensor out = Tensor::floats({n});
  for (std::int64_t i = 0; i < n; ++i) out.f32[static_cast<std::size_t>(i)] = static_cast<float>(start + static_cast<double>(i) * delta);
  return out;
}

// Split(input, split?): along `axis`, the sizes of the `split` input (opset 13) or
// attribute (before), else equal parts, one per node output (the last smaller when the
// extent does not divide, as opset 18 says).
std::vector<Tensor> split(const Node& node, const Inputs& in) {
  const Tensor& x = numeric_in(node, in, 0);
  const std::size_t rank = x.shape.size();
  const auto axis = static_cast<std::size_t>(norm_axis(node, node.attr_int("axis", 0), rank));
  const std::int64_t extent = x.shape[axis];
  const std::size_t parts = node.outputs.size();
  if (parts == 0) fail(node, "no outputs");
  Dims sizes;
  if (const Tensor* t = optional_in(in, 1)) sizes = ints_of(node, *t);
  else sizes = node.attr_ints("split");
  if (sizes.empty()) {
    const auto p = static_cast<std::int64_t>(parts);
    const std::int64_t each = (extent + p - 1) / p;
    for (std::size_t i = 0; i < parts; ++i) {
      sizes.push_back(std::min(each, std::max<std::int64_t>(0, extent - each * static_cast<std::int64_t>(i))));
    }
  }
  if (sizes.size() != parts) {
    fail(node, std::to_string(sizes.size()) + " split sizes for " + std::to_string(parts) + " outputs");
  }
  std::int64_t sum = 0;
  for (auto v : sizes) {
    if (v < 0) fail(node, "a negative split size");
    sum += v;
  }
  if (sum != extent) fail(node, "split sizes add up to " + std::to_string(sum) + ", the axis has " + std::to_string(extent));
  const std::int64_t outer = element_count(Dims(x.shape.begin(), x.shape.begin() + static_cast<std::ptrdiff_t>(axis)));
  const std::int64_t inner = element_count(Dims(x.shape.begin() + static_cast<std::ptrdiff_t>(axis) + 1, x.shape.end()));
  std::vector<Tensor> out;
  std::int64_t first = 0;
  for (std::int64_t size : sizes) {
    Dims shape = x.shape;
    shape[axis] = size;
    out.push_back(copy_runs(x, std::move(shape), outer, extent * inner, first * inner, size * inner));
    first += size;
  }
  return out;
}

// Max, Min (variadic, numpy broadcasting; float or integer as the inputs).
Tensor extremum(const Node& node, const Inputs& in, bool max) {
  if (in.empty()) fail(node, "no inputs");
  Tensor acc = numeric_in(node, in, 0);
  for (std::size_t k = 1; k < in.size(); ++k) {
    const Tensor& b = numeric_in(node, in, k);
    if (b.type != acc.type) fail(node, "inputs of different element types");
    Tensor out;
    out.type = acc.type;
    out.shape = broadcast_shape(acc.shape, b.shape);
    const auto n = static_cast<std::size_t>(element_count(out.shape));
    if (out.type == ElemType::f32) out.f32.resize(n);
    else out.i64.resize(n);
    for_each_broadcast(out.shape, {acc.shape, b.shape}, [&](std::int64_t i, const Dims& off) {
      const auto x = static_cast<std::size_t>(off[0]), y = static_cast<std::size_t>(off[1]);
      const auto at = static_cast<std::size_t>(i);
      if (out.type == ElemType::f32) {
        const float u = acc.f32[x], v = b.f32[y];
        // NaN propagates, as numpy's maximum and ONNX Runtime do.
        out.f32[at] = std::isnan(u) || std::isnan(v) ? std::numeric_limits<float>::quiet_NaN() : max ? std::max(u, v) : std::min(u, v);
      } else {
        out.i64[at] = max ? std::max(acc.i64[x], b.i64[y]) : std::min(acc.i64[x], b.i64[y]);
      }
    });
    acc = std::move(out);
  }
  return acc;
}

// ReduceMean, ReduceSum, ReduceMax, ReduceMin over `axes` (the attribute, or from opset
// 18 the second input; none: every axis, or nothing with noop_with_empty_axes), keepdims
// (default 1). Sums accumulate in double.
Tensor reduce(const Node& node, const Inputs& in) {
  const Tensor& x = floats_in(node, in, 0);
  const std::size_t rank = x.shape.size();
  Dims axes = node.attr_ints("axes");
  if (const Tensor* t = optional_in(in, 1)) axes = ints_of(node, *t);
  if (axes.empty() && node.attr_int("noop_with_empty_axes", 0) != 0) return x;
  std::vector<bool> reduced(rank, axes.empty());
  for (auto a : axes) reduced[static_cast<std::size_t>(norm_axis(node, a, rank))] = true;
  const bool keep = node.attr_int("keepdims", 1) != 0;
  Dims kept_shape = x.shape, out_shape;
  for (std::size_t d = 0; d < rank; ++d) {
    if (reduced[d]) kept_shape[d] = 1;
    if (!reduced[d] || keep) out_shape.push_back(kept_shape[d]);
  }
  const std::string& op = node.op_type;
  const bool mean = op == "ReduceMean", sum = op == "ReduceSum", is_max = op == "ReduceMax";
  const double init = mean || sum ? 0.0 : is_max ? -std::numeric_limits<double>::infinity() : std::numeric_limits<double>::infinity();
  std::vector<double> acc(static_cast<std::size_t>(element_count(kept_shape)), init);
  const Dims out_strides = strides_of(kept_shape);
  Dims index(rank, 0);
  for (std::size_t flat = 0; flat < x.f32.size(); ++flat) {
    std::int64_t o = 0;
    for (std::size_t d = 0; d < rank; ++d) o += (reduced[d] ? 0 : index[d]) * out_strides[d];
    double& a = acc[static_cast<std::size_t>(o)];
    const double v = x.f32[flat];
    if (mean || sum) a += v;
    else if (std::isnan(v) || std::isnan(a)) a = std::numeric_limits<double>::quiet_NaN();
    else a = is_max ? std::max(a, v) : std::min(a, v);
    for (std::size_t d = rank; d-- > 0;) {
      if (++index[d] < x.shape[d]) break;
      index[d] = 0;
    }
  }
  const std::int64_t count = acc.empty() ? 1 : x.elements() / static_cast<std::int64_t>(acc.size());
  Tensor out = Tensor::floats(out_shape);
  for (std::size_t i = 0; i < acc.size(); ++i) {
    out.f32[i] = static_cast<float>(mean ? acc[i] / static_cast<double>(std::max<std::int64_t>(count, 1)) : acc[i]);
  }
  return out;
}

// GatherND(data, indices, batch_dims): each row of the indices' last dimension (length
// k) picks data[b.., i0, .., ik-1] (a slice of the remaining dimensions); negative indices
// count from the end.
Tensor gather_nd(const Node& node, const Inputs& in) {
  const Tensor& x = numeric_in(node, in, 0);
  const Tensor& idx_t = input(node, in, 1);
  const Dims idx = ints_of(node, idx_t);
  const auto b = static_cast<std::size_t>(node.attr_int("batch_dims", 0));
  const std::size_t r = x.shape.size(), q = idx_t.shape.size();
  if (q < 1 || b >= q || b >= r) fail(node, "batch_dims " + std::to_string(b) + " does not fit the ranks of data and indices");
  const auto k = static_cast<std::size_t>(idx_t.shape.back());
  if (k < 1 || b + k > r) fail(node, "index rows of length " + std::to_string(k) + " do not fit the data " + shape_text(x.shape));
  for (std::size_t d = 0; d < b; ++d) {
    if (x.shape[d] != idx_t.shape[d]) fail(node, "the batch dimensions of data and indices differ");
  }
  Dims shape(idx_t.shape.begin(), idx_t.shape.end() - 1);
  shape.insert(shape.end(), x.shape.begin() + static_cast<std::ptrdiff_t>(b + k), x.shape.end());
  const std::int64_t slice = element_count(Dims(x.shape.begin() + static_cast<std::ptrdiff_t>(b + k), x.shape.end()));
  const std::int64_t batches = element_count(Dims(x.shape.begin(), x.shape.begin() + static_cast<std::ptrdiff_t>(b)));
  const std::int64_t per_batch_data = batches ? x.elements() / batches : 0;
  const std::int64_t rows = static_cast<std::int64_t>(idx.size() / k);
  const std::int64_t rows_per_batch = batches ? rows / batches : 0;
  const Dims strides = strides_of(x.shape);
  Dims offsets;
  offsets.reserve(static_cast<std::size_t>(rows * slice));
  for (std::int64_t row = 0; row < rows; ++row) {
    std::int64_t off = (rows_per_batch ? row / rows_per_batch : 0) * per_batch_data;
    for (std::size_t j = 0; j < k; ++j) {
      const std::size_t d = b + j;
      std::int64_t i = idx[static_cast<std::size_t>(row) * k + j];
      if (i < -x.shape[d] || i >= x.shape[d]) {
        fail(node, "index " + std::to_string(i) + " is out of range for extent " + std::to_string(x.shape[d]));
      }
      if (i < 0) i += x.shape[d];
      off += i * strides[d];
    }
    for (std::int64_t s2 = 0; s2 < slice; ++s2) offsets.push_back(off + s2);
  }
  return take(x, shape, offsets);
}

// The portable operators by ONNX type: what has_portable says (so planning and running
// agree) and what run_portable calls, found by one lookup per step (a run of a small model
// takes tens of portable steps; a chain of string comparisons cost each a microsecond).
using PortableFn = std::vector<Tensor> (*)(const Node&, const Inputs&);

// One output, moved in: `return {t}` would copy it (an initializer list's elements are
// const), a whole extra pass over every portable step's output.
std::vector<Tensor> one(Tensor t) {
  std::vector<Tensor> out;
  out.push_back(std::move(t));
  return out;
}

std::vector<Tensor> gelu_op(const Node& node, const Inputs& in) {
  // ONNX's Gelu (opset 20), and what canonical_ops.h makes of torch's tanh GELU.
  const auto it = node.attributes.find("approximate");
  const std::string approximate = it != node.attributes.end() && it->second.s ? *it->second.s : "none";
  if (approximate == "tanh") {
    return one(unary(node, in, [](F4 x) {
      const F4 inner = 0.7978845608028654f * (x + 0.044715f * x * x * x);
      return 0.5f * x * (1.0f + tanh4(inner));
    }));
  }
  if (approximate != "none") throw ModelError(node.name + ": Gelu approximate=\"" + approximate + "\" is not supported");
  return one(unary(node, in, [](F4 x) { return 0.5f * x * (1.0f + erf4(x * 0.7071067811865476f)); }));
}

const std::unordered_map<std::string_view, PortableFn>& portable_table() {
  using V = std::vector<Tensor>;
  static const std::unordered_map<std::string_view, PortableFn> table = [] {
    std::unordered_map<std::string_view, PortableFn> t;
    t["Conv"] = [](const Node& n, const Inputs& in) -> V { return one(conv(n, in)); };
    t["Gemm"] = [](const Node& n, const Inputs& in) -> V { return one(gemm(n, in)); };
    t["MatMul"] = [](const Node& n, const Inputs& in) -> V { return one(matmul(n, in)); };
    for (const char* op : {"Add", "Sub", "Mul", "Div", "Pow"}) {
      t[op] = [](const Node& n, const Inputs& in) -> V { return one(binary(n, in)); };
    }
    t["Relu"] = [](const Node& n, const Inputs& in) -> V {
      return one(unary(n, in, [](F4 x) { return select(x > 0.0f, x, splat(0.0f)); }));
    };
    t["Clip"] = [](const Node& n, const Inputs& in) -> V { return one(clip(n, in)); };
    t["Erf"] = [](const Node& n, const Inputs& in) -> V { return one(unary(n, in, [](F4 x) { return erf4(x); })); };
    t["Sqrt"] = [](const Node& n, const Inputs& in) -> V {
      return one(unary(n, in, [](F4 x) { return lanes(x, [](float v) { return std::sqrt(v); }); }));
    };
    t["Sigmoid"] = [](const Node& n, const Inputs& in) -> V { return one(unary(n, in, [](F4 x) { return sigmoid4(x); })); };
    t["Tanh"] = [](const Node& n, const Inputs& in) -> V { return one(unary(n, in, [](F4 x) { return tanh4(x); })); };
    t["Gelu"] = gelu_op;
    t["Exp"] = [](const Node& n, const Inputs& in) -> V { return one(unary(n, in, [](F4 x) { return exp4(x); })); };
    t["Neg"] = [](const Node& n, const Inputs& in) -> V { return one(unary(n, in, [](F4 x) { return -x; })); };
    t["Softmax"] = [](const Node& n, const Inputs& in) -> V { return one(softmax(n, in)); };
    t["LayerNormalization"] = [](const Node& n, const Inputs& in) -> V { return layer_norm(n, in, n.outputs.size()); };
    t["BatchNormalization"] = [](const Node& n, const Inputs& in) -> V { return one(batch_norm(n, in)); };
    t["MaxPool"] = [](const Node& n, const Inputs& in) -> V { return one(pool(n, in, true)); };
    t["AveragePool"] = [](const Node& n, const Inputs& in) -> V { return one(pool(n, in, false)); };
    t["GlobalAveragePool"] = [](const Node& n, const Inputs& in) -> V { return one(global_average_pool(n, in)); };
    t["Flatten"] = [](const Node& n, const Inputs& in) -> V { return one(flatten(n, in)); };
    t["Reshape"] = [](const Node& n, const Inputs& in) -> V { return one(reshape(n, in)); };
    t["Transpose"] = [](const Node& n, const Inputs& in) -> V { return one(transpose(n, in)); };
    t["Concat"] = [](const Node& n, const Inputs& in) -> V { return one(concat(n, in)); };
    t["Gather"] = [](const Node& n, const Inputs& in) -> V { return one(gather(n, in)); };
    t["Unsqueeze"] = [](const Node& n, const Inputs& in) -> V { return one(unsqueeze(n, in)); };
    t["Squeeze"] = [](const Node& n, const Inputs& in) -> V { return one(squeeze(n, in)); };
    t["Shape"] = [](const Node& n, const Inputs& in) -> V { return one(shape_op(n, in)); };
    t["Slice"] = [](const Node& n, const Inputs& in) -> V { return one(slice(n, in)); };
    t["Cast"] = [](const Node& n, const Inputs& in) -> V { return one(cast(n, in)); };
    t["Identity"] = t["Dropout"] = [](const Node& n, const Inputs& in) -> V { return one(input(n, in, 0)); };
    t["Constant"] = [](const Node& n, const Inputs&) -> V { return one(constant(n)); };
    t["HardSigmoid"] = [](const Node& n, const Inputs& in) -> V { return one(hard_sigmoid(n, in, false)); };
    t["HardSwish"] = [](const Node& n, const Inputs& in) -> V { return one(hard_sigmoid(n, in, true)); };
    t["IsNaN"] = [](const Node& n, const Inputs& in) -> V { return one(is_nan(n, in)); };
    t["Where"] = [](const Node& n, const Inputs& in) -> V { return one(where(n, in)); };
    for (const char* op : {"Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual", "And", "Or", "Xor"}) {
      t[op] = [](const Node& n, const Inputs& in) -> V { return one(compare(n, in)); };
    }
    t["Not"] = [](const Node& n, const Inputs& in) -> V { return one(not_op(n, in)); };
    t["Expand"] = [](const Node& n, const Inputs& in) -> V { return one(expand(n, in)); };
    t["ConstantOfShape"] = [](const Node& n, const Inputs& in) -> V { return one(constant_of_shape(n, in)); };
    t["GatherElements"] = [](const Node& n, const Inputs& in) -> V { return one(gather_elements(n, in)); };
    t["Range"] = [](const Node& n, const Inputs& in) -> V { return one(range(n, in)); };
    t["Split"] = [](const Node& n, const Inputs& in) -> V { return split(n, in); };
    t["Max"] = [](const Node& n, const Inputs& in) -> V { return one(extremum(n, in, true)); };
    t["Min"] = [](const Node& n, const Inputs& in) -> V { return one(extremum(n, in, false)); };
    for (const char* op : {"ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin"}) {
      t[op] = [](const Node& n, const Inputs& in) -> V { return one(reduce(n, in)); };
    }
    t["GatherND"] = [](const Node& n, const Inputs& in) -> V { return one(gather_nd(n, in)); };
    return t;
  }();
  return table;
}

}  // namespace

std::vector<std::int64_t> broadcast_shape(const std::vector<std::int64_t>& a, const std::vector<std::int64_t>& b) {
  const std::size_t rank = std::max(a.size(), b.size());
  Dims out(rank);
  for (std::size_t i = 0; i < rank; ++i) {
    const std::int64_t x = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    const std::int64_t y = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (x != y && x != 1 && y != 1) {
      throw ModelError("shapes " + shape_text(a) + " and " + shape_text(b) + " do not broadcast");
    }
    out[i] = x == 1 ? y : x;
  }
  return out;
}

bool has_portable(const std::string& op_type) { return portable_table().count(op_type) != 0; }

std::vector<MissingPortable> missing_portable(const std::vector<const Node*>& nodes) {
  std::vector<MissingPortable> out;
  for (const Node* node : nodes) {
    const bool other_domain = !node->domain.empty() && node->domain != "ai.onnx";
    if (!other_domain && has_portable(node->op_type)) continue;
    const std::string type = (other_domain ? node->domain + "." : "") + node->op_type;
    auto it = std::find_if(out.begin(), out.end(), [&](const MissingPortable& m) { return m.op_type == type; });
    if (it == out.end()) out.push_back({type, 1, node->name});
    else ++it->nodes;
  }
  return out;
}

std::vector<MissingPortable> missing_portable(const model::Graph& graph, const model::Plan& plan) {
  std::vector<const Node*> nodes;
  for (const model::Step& step : plan.steps) {
    if (step.kind != model::Step::Kind::portable) continue;
    for (std::size_t n : step.nodes) nodes.push_back(&graph.nodes.at(n));
  }
  return missing_portable(nodes);
}

std::string missing_portable_text(const std::vector<MissingPortable>& missing) {
  std::string out;
  for (const auto& m : missing) {
    out += (out.empty() ? "no portable implementation of " : ", ") + m.op_type + " (" + std::to_string(m.nodes) +
           (m.nodes == 1 ? " node: " : " nodes, first ") + m.first_node + ")";
  }
  return out;
}

namespace {

// Vectors of 4, 8 and 16 floats. (GCC drops vector_size from an alias whose size depends
// on a template parameter: each width is spelled out.)
template <int kLanes> struct LanesOf;
template <> struct LanesOf<4> { using type = F4; };
template <> struct LanesOf<8> { using type = float __attribute__((vector_size(32))); };
template <> struct LanesOf<16> { using type = float __attribute__((vector_size(64))); };

// out[nb][p][lane] = x[nb][p][lane] op v[nb % blocks][lane] for the channel blocks nb in
// [first, last): pixel by pixel, each pixel's block of lanes in one go, so the data is read
// once, in order (lane-group passes over the whole block read every cache line block/4
// times). kLanes floats a vector, a divisor of block.
template <int kLanes, BinaryOp kKind, bool kVectorFirst>
[[gnu::always_inline]] inline void channel_rows(const float* x, const float* v, float* out, std::int64_t first,
                                                std::int64_t last, std::int64_t blocks, std::int64_t hw,
                                                std::int64_t block) {
  using V = typename LanesOf<kLanes>::type;
  static_assert(sizeof(V) == kLanes * sizeof(float));
  constexpr std::int64_t kMaxGroups = 4;
  const std::int64_t groups = block / kLanes;
  V w[kMaxGroups];
  for (std::int64_t nb = first; nb < last; ++nb) {
    const float* vb = v + nb % blocks * block;
    const float* src = x + nb * hw * block;
    float* dst = out + nb * hw * block;
    for (std::int64_t g = 0; g < std::min(groups, kMaxGroups); ++g) std::memcpy(&w[g], vb + kLanes * g, sizeof w[g]);
    for (std::int64_t p = 0; p < hw; ++p) {
      for (std::int64_t g = 0; g < groups; ++g) {
        V a, b;
        std::memcpy(&a, src + p * block + kLanes * g, sizeof a);
        if (g < kMaxGroups) {
          b = w[g];
        } else {
          std::memcpy(&b, vb + kLanes * g, sizeof b);
        }
        if constexpr (kVectorFirst) std::swap(a, b);
        V r;
        if constexpr (kKind == BinaryOp::add) r = a + b;
        if constexpr (kKind == BinaryOp::sub) r = a - b;
        if constexpr (kKind == BinaryOp::mul) r = a * b;
        if constexpr (kKind == BinaryOp::div) r = a / b;
        std::memcpy(dst + p * block + kLanes * g, &r, sizeof r);
      }
    }
  }
}

using ChannelRows = void (*)(const float*, const float*, float*, std::int64_t, std::int64_t, std::int64_t,
                             std::int64_t, std::int64_t);

// The widest vector that divides the block, for the ISA a clone is compiled for.
template <int kWidest, BinaryOp kKind, bool kVectorFirst>
[[gnu::always_inline]] inline void channel_rows_widest(const float* x, const float* v, float* out, std::int64_t first,
                                                       std::int64_t last, std::int64_t blocks, std::int64_t hw,
                                                       std::int64_t block) {
  if constexpr (kWidest >= 16) {
    if (block % 16 == 0) return channel_rows<16, kKind, kVectorFirst>(x, v, out, first, last, blocks, hw, block);
  }
  if constexpr (kWidest >= 8) {
    if (block % 8 == 0) return channel_rows<8, kKind, kVectorFirst>(x, v, out, first, last, blocks, hw, block);
  }
  channel_rows<4, kKind, kVectorFirst>(x, v, out, first, last, blocks, hw, block);
}

template <BinaryOp kKind, bool kVectorFirst>
void channel_rows_base(const float* x, const float* v, float* out, std::int64_t first, std::int64_t last,
                       std::int64_t blocks, std::int64_t hw, std::int64_t block) {
  channel_rows_widest<4, kKind, kVectorFirst>(x, v, out, first, last, blocks, hw, block);
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
// The host binary is built for baseline x86-64 (SSE2): on a CPU with AVX2 or AVX-512 the
// squeeze-excite scale runs on clones compiled for those (cpu_supports picks at run time).
#define KESTREL_CHANNEL_ROWS_X86 1
template <BinaryOp kKind, bool kVectorFirst>
[[gnu::target("avx2")]] void channel_rows_avx2(const float* x, const float* v, float* out, std::int64_t first,
                                               std::int64_t last, std::int64_t blocks, std::int64_t hw,
                                               std::int64_t block) {
  channel_rows_widest<8, kKind, kVectorFirst>(x, v, out, first, last, blocks, hw, block);
}
template <BinaryOp kKind, bool kVectorFirst>
[[gnu::target("avx512f")]] void channel_rows_avx512(const float* x, const float* v, float* out, std::int64_t first,
                                                    std::int64_t last, std::int64_t blocks, std::int64_t hw,
                                                    std::int64_t block) {
  channel_rows_widest<16, kKind, kVectorFirst>(x, v, out, first, last, blocks, hw, block);
}
#endif

template <BinaryOp kKind, bool kVectorFirst>
ChannelRows pick_channel_rows() {
#ifdef KESTREL_CHANNEL_ROWS_X86
  static const bool avx512 = __builtin_cpu_supports("avx512f");
  static const bool avx2 = __builtin_cpu_supports("avx2");
  if (avx512) return &channel_rows_avx512<kKind, kVectorFirst>;
  if (avx2) return &channel_rows_avx2<kKind, kVectorFirst>;
#endif
  return &channel_rows_base<kKind, kVectorFirst>;
}

template <BinaryOp kKind>
ChannelRows pick_channel_rows(bool vector_first) {
  return vector_first ? pick_channel_rows<kKind, true>() : pick_channel_rows<kKind, false>();
}

}  // namespace

void blocked_channel_binary(const std::string& op, bool vector_first, const float* x, const float* v, float* out,
                            std::int64_t n, std::int64_t blocks, std::int64_t hw, std::int64_t block,
                            const kestrel_services* services) {
  const StepServices on_pool(services);
  ChannelRows rows = nullptr;
  switch (binary_op(op)) {
    case BinaryOp::add: rows = pick_channel_rows<BinaryOp::add>(vector_first); break;
    case BinaryOp::sub: rows = pick_channel_rows<BinaryOp::sub>(vector_first); break;
    case BinaryOp::mul: rows = pick_channel_rows<BinaryOp::mul>(vector_first); break;
    case BinaryOp::div: rows = pick_channel_rows<BinaryOp::div>(vector_first); break;
    default: throw std::invalid_argument("blocked_channel_binary: " + op + " is not Add, Sub, Mul or Div");
  }
  if (block % 4 != 0) throw std::invalid_argument("blocked_channel_binary: block " + std::to_string(block) + " is not a multiple of 4");
  parallel_ranges(n * blocks, std::max<std::int64_t>(1, kElementGrain / std::max<std::int64_t>(hw * block, 1)),
                  [&](std::int64_t first, std::int64_t last) { rows(x, v, out, first, last, blocks, hw, block); });
}

std::vector<Tensor> run_portable(const Node& node, const std::vector<const Tensor*>& in, const kestrel_services* services) {
  const StepServices on_pool(services);
  if (!node.domain.empty() && node.domain != "ai.onnx") {
    fail(node, "operators of domain " + node.domain + " have no portable implementation");
  }
  // Every input holds its shape's values (an initializer of an element type the importer
  // keeps without data, bool say, does not).
  // Dropout reads only its data: ratio and training_mode (a bool constant) are ignored
  // at inference.
  const std::size_t read = node.op_type == "Dropout" ? std::min<std::size_t>(in.size(), 1) : in.size();
  for (std::size_t i = 0; i < read; ++i) {
    const Tensor* t = in[i];
    if (!t || t->layout != TensorLayout::plain) continue;
    const std::size_t held = t->type == ElemType::f32 ? t->f32.size() : t->i64.size();
    if (static_cast<std::int64_t>(held) != t->elements()) {
      fail(node, "input " + std::to_string(i) + " (" + (i < node.inputs.size() ? node.inputs[i] : std::string("?")) + ") " +
                     shape_text(t->shape) + " holds " + std::to_string(held) + " values" +
                     (held == 0 ? ": a constant of an element type Kestrel does not read (bool, float16, ...)" : ""));
    }
  }
  const auto& table = portable_table();
  const auto it = table.find(node.op_type);
  if (it == table.end()) fail(node, "no portable implementation of ONNX operator " + node.op_type);
  return it->second(node, in);
}

}  // namespace kestrel::deploy
