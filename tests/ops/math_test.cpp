// kernel/include/kestrel/kernel/math.h through a real kernel: a freestanding module built
// with clang-19 applies each function to a buffer, scalar and in 8- and 16-float vectors,
// and the results are compared with the C++ library in double precision against the
// bounds the header documents.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "kernel_harness.h"

using namespace kestrel::ops;

namespace {

// out[f][i] = function f of in[i], for the functions in kFunctions' order.
const char* kKernel = R"(#include "kestrel/kernel/abi.h"
#include "kestrel/kernel/math.h"
typedef float VEC_T __attribute__((vector_size(WIDTH * sizeof(float))));
#define APPLY(f, k) \
  for (int64_t i = 0; i < n; i += WIDTH) { VEC_T v; __builtin_memcpy(&v, in + i, sizeof v); \
    v = f; __builtin_memcpy(out + (k) * n + i, &v, sizeof v); }
KESTREL_KERNEL(svc, args, num_args) {
  (void)svc;
  if (num_args != 2) return 2;
  const float* in = (const float*)args[0].data;
  float* out = (float*)args[1].data;
  int64_t n = args[0].i64;
  APPLY(kestrel_exp(v), 0)
  APPLY(kestrel_erf(v), 1)
  APPLY(kestrel_tanh(v), 2)
  APPLY(kestrel_gelu(v), 3)
  APPLY(kestrel_sigmoid(v), 4)
  APPLY(kestrel_activate(v, KESTREL_ACT_RELU), 5)
  APPLY(kestrel_activate(v, KESTREL_ACT_RELU6), 6)
  APPLY(kestrel_rsqrt(kestrel_abs(v) + 1.0f), 7)
  APPLY(kestrel_activate(v, KESTREL_ACT_SIGMOID), 8)
  APPLY(kestrel_activate(v, KESTREL_ACT_SILU), 9)
  APPLY(kestrel_activate(v, KESTREL_ACT_HARDSWISH), 10)
  APPLY(kestrel_activate(v, KESTREL_ACT_HARDSIGMOID), 11)
  APPLY(kestrel_activate(v, KESTREL_ACT_TANH), 12)
  APPLY(kestrel_activate(v, KESTREL_ACT_GELU_TANH), 13)
  return 0;
}
)";

double reference(int function, double x) {
  switch (function) {
    case 0: return std::exp(x);
    case 1: return std::erf(x);
    case 2: return std::tanh(x);
    case 3: return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
    case 4: return 1.0 / (1.0 + std::exp(-x));
    case 5: return x > 0 ? x : 0.0;
    case 6: return x < 0 ? 0.0 : x > 6 ? 6.0 : x;
    case 7: return 1.0 / std::sqrt(std::fabs(x) + 1.0);
    case 8: return 1.0 / (1.0 + std::exp(-x));
    case 9: return x / (1.0 + std::exp(-x));
    case 10: return x * std::clamp(x / 6.0 + 0.5, 0.0, 1.0);
    case 11: return std::clamp(x / 6.0 + 0.5, 0.0, 1.0);
    case 13: return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
    default: return std::tanh(x);
  }
}

// The documented bound for function f at x (exp: relative; the others absolute).
double bound(int function, double x) {
  switch (function) {
    case 0: return 2.5e-7 * std::exp(x);
    case 1: return 3.5e-7;
    case 2: return 1.5e-7;
    case 3: return 1e-7 * (1.0 + std::fabs(x)) + 1e-7 * std::fabs(x);
    case 4: return 1e-7;
    case 5:
    case 6: return 0.0;
    case 7: return 2e-7;
    case 8: return 1e-7;
    case 9:
    case 10: return 2e-7 * (1.0 + std::fabs(x));
    case 11: return 1e-7;
    case 13: return 2e-7 * (1.0 + std::fabs(x));
    default: return 1.5e-7;
  }
}

// Checks every function at this width; returns exp's results (the first n outputs).
std::vector<float> check_width(int width) {
  constexpr int kFunctions = 14;
  // Every 0.0037 on [-87, 88] (exp's normal range), padded to a multiple of 16.
  std::vector<float> xs;
  for (double x = -87.0; x <= 88.0; x += 0.0037) xs.push_back(static_cast<float>(x));
  while (xs.size() % 16 != 0) xs.push_back(0.5f);
  const auto n = static_cast<std::int64_t>(xs.size());
  KernelSource source{Backend::cpu, "math_kernel.c", kKernel, {{"WIDTH", std::to_string(width)}}};
  test::TempDir dir;
  test::Kernel kernel = test::Kernel::build(source, dir.path(), "math" + std::to_string(width));
  test::Buffer in(n), out(n * kFunctions);
  std::copy(xs.begin(), xs.end(), in.data());
  std::vector<kestrel_arg> args = {{in.data(), n, 0.0}, {out.data(), n * kFunctions, 0.0}};
  REQUIRE(kernel.run(args, 1) == 0);
  for (int f = 0; f < kFunctions; ++f) {
    int failures = 0;
    for (std::int64_t i = 0; i < n; ++i) {
      const double x = xs[static_cast<std::size_t>(i)];
      const double got = out.data()[f * n + i], want = reference(f, x);
      if (std::fabs(got - want) > bound(f, x) && ++failures <= 3) {
        INFO("function " << f << " at x=" << x << ": " << got << " instead of " << want);
        CHECK(false);
      }
    }
    CHECK(failures == 0);
  }
  CHECK(out.guard_intact());
  return std::vector<float>(out.data(), out.data() + n);
}

}  // namespace

TEST_CASE("kernel math functions meet their documented accuracy in scalars and vectors", "[math][kernel]") {
  std::map<int, std::vector<float>> exps;
  for (int width : {1, 8, 16}) {
    INFO("vectors of " << width);
    exps[width] = check_width(width);
  }
  // exp's rounding and 2^n take other instructions at some widths (vrndscaleps and
  // vscalefps for 16 lanes with AVX-512) that must give the scalar code's results bit for
  // bit.
  for (int width : {8, 16}) {
    std::size_t differ = 0;
    for (std::size_t i = 0; i < exps[1].size(); ++i) differ += std::memcmp(&exps[1][i], &exps[width][i], sizeof(float)) != 0;
    INFO("exp in vectors of " << width << " against scalars");
    CHECK(differ == 0);
  }
}
