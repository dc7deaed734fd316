// conv2d_winograd kernel correctness: the default and random valid configurations per
// shape against the op's reference (serial and two-threaded), both tile sizes (F(4x4) and
// F(2x2)), the fused epilogue, tiles cut by the image's edge and lanes past C and K
// included; then the whole convolution: filters transformed here (G g G^T in double) and
// run through the kernel must give conv2d_nchwc's reference on the untransformed filters.
// Shapes the op refuses are refused.
#include <catch2/catch.hpp>
#include <cmath>

#include "kernel_harness.h"

using namespace kestrel::ops;

namespace {

void check_shape(const std::string& shape, std::uint64_t seed, int count = 10) {
  INFO(shape);
  Registry registry = builtin_ops();
  const Op& conv = registry.get("conv2d_winograd");
  Params params = parse_params(conv, shape);
  test::WorkloadChecker checker(conv, params);
  CHECK(checker.check(conv.default_config(params, test::native_traits())));
  auto configs = test::random_configs(conv, params, count, seed);
  CHECK(configs.size() == static_cast<std::size_t>(count));
  for (const auto& config : configs) CHECK(checker.check(config));
}

void run(const test::Kernel& kernel, std::vector<kestrel_arg> args, int threads) {
  REQUIRE(kernel.run(args, threads) == 0);
}

}  // namespace

TEST_CASE("conv2d_winograd matches its reference: pad 1, tiles cut by the edge", "[conv2d_winograd][kernel]") {
  check_shape("C=32,H=9,W=11,K=32,R=3,S=3,pad=1", 1);
}
TEST_CASE("conv2d_winograd matches its reference: C and K not multiples of the block, epilogue",
          "[conv2d_winograd][kernel]") {
  check_shape("C=20,H=8,W=8,K=24,R=3,S=3,pad=1,bias=1,residual=1,act=1", 2);
  check_shape("C=20,H=7,W=6,K=20,R=3,S=3,pad=0,bias=1,act=5", 3, 6);
}
TEST_CASE("conv2d_winograd matches its reference: F(2x2\\,3x3)", "[conv2d_winograd][kernel]") {
  check_shape("C=32,H=9,W=11,K=32,R=3,S=3,pad=1,m=2,bias=1", 6);
  check_shape("C=20,H=14,W=14,K=36,R=3,S=3,pad=1,m=2,residual=1,act=2", 7, 6);
}
TEST_CASE("conv2d_winograd matches its reference: blocks of 8 and 4, batch 2", "[conv2d_winograd][kernel]") {
  check_shape("N=2,C=16,H=10,W=10,K=24,R=3,S=3,pad=1,block=8", 4, 8);
  check_shape("C=6,H=5,W=9,K=12,R=3,S=3,pad=2,block=4,act=2", 5, 8);
}

TEST_CASE("conv2d_winograd refuses what F(4x4,3x3) cannot compute", "[conv2d_winograd]") {
  Registry registry = builtin_ops();
  const Op& conv = registry.get("conv2d_winograd");
  for (const char* shape : {"C=16,H=8,W=8,K=16,R=1,S=1", "C=16,H=8,W=8,K=16,R=3,S=3,stride=2",
                            "C=16,H=8,W=8,K=16,R=3,S=3,dilation=2", "C=32,H=8,W=8,K=32,R=3,S=3,groups=2"}) {
    INFO(shape);
    CHECK_THROWS_WITH(parse_params(conv, shape), Catch::Contains("only 3x3 filters with stride 1"));
  }
  CHECK_THROWS_WITH(parse_params(conv, "C=16,H=8,W=8,K=16,R=3,S=3,m=3"), Catch::Contains("m=3 is not 2 or 4"));
}

TEST_CASE("conv2d_winograd on transformed filters is the convolution (conv2d_nchwc's reference)",
          "[conv2d_winograd][kernel]") {
  Registry registry = builtin_ops();
  const Op& wino = registry.get("conv2d_winograd");
  const Op& direct = registry.get("conv2d_nchwc");
  static constexpr double kG4[6][3] = {{1.0 / 4, 0, 0},          {-1.0 / 6, -1.0 / 6, -1.0 / 6},
                                       {-1.0 / 6, 1.0 / 6, -1.0 / 6}, {1.0 / 24, 1.0 / 12, 1.0 / 6},
                                       {1.0 / 24, -1.0 / 12, 1.0 / 6}, {0, 0, 1}};
  static constexpr double kG2[4][3] = {{1, 0, 0}, {0.5, 0.5, 0.5}, {0.5, -0.5, 0.5}, {0, 0, 1}};
  // ResNet's 3x3 layers in small: C=K=64 at 14x14 (F(4x4) tiles cut in half at the edge),
  // and channels that leave part of the last block empty; each with both tile sizes.
  for (const char* shape : {"C=64,H=14,W=14,K=64,R=3,S=3,pad=1,bias=1,act=1", "C=19,H=9,W=13,K=21,R=3,S=3,pad=1"})
  for (std::int64_t m : {4, 2}) {
    INFO(shape << ", m=" << m);
    const int alpha = static_cast<int>(m) + 2;
    auto g_at = [&](int i, int j) { return m == 4 ? kG4[i][j] : kG2[i][j]; };
    const Params p = parse_params(direct, shape);
    const std::int64_t b = test::native_traits().vector_floats >= 16 ? 16 : 8;
    Params bp = p;
    bp["block"] = b;
    Params wp = bp;
    wp["m"] = m;
    const std::int64_t c = p.at("C"), h = p.at("H"), w = p.at("W"), k = p.at("K");
    const std::int64_t cb = (c + b - 1) / b, kb = (k + b - 1) / b, out_p = h, out_q = w;
    const bool bias = p.contains("bias");
    test::TempDir dir;
    test::Buffer input(cb * h * w * b), filters(k * c * 9), blocked(kb * cb * 9 * b * b), transformed(alpha * alpha * kb * cb * b * b),
        bias_v(kb * b), expected(kb * out_p * out_q * b), output(kb * out_p * out_q * b);
    input.fill_random(1);
    for (std::int64_t i = 0; i < h * w; ++i) {  // lanes past C hold NaN: a kernel that uses one gives NaN
      for (std::int64_t l = c - (cb - 1) * b; l < b; ++l) input.data()[((cb - 1) * h * w + i) * b + l] = NAN;
    }
    filters.fill_random(2);
    bias_v.fill_random(3);
    std::fill(blocked.data(), blocked.data() + blocked.elements(), 0.0f);
    std::fill(transformed.data(), transformed.data() + transformed.elements(), 0.0f);
    for (std::int64_t ko = 0; ko < k; ++ko) {
      for (std::int64_t ci = 0; ci < c; ++ci) {
        const float* g = filters.data() + (ko * c + ci) * 9;
        for (std::int64_t i = 0; i < 9; ++i) {
          blocked.data()[(((ko / b * cb + ci / b) * 9 + i) * b + ci % b) * b + ko % b] = g[i];
        }
        for (int i = 0; i < alpha; ++i) {
          for (int j = 0; j < alpha; ++j) {
            double u = 0.0;
            for (int r = 0; r < 3; ++r) {
              for (int s = 0; s < 3; ++s) u += g_at(i, r) * g[r * 3 + s] * g_at(j, s);
            }
            transformed.data()[((((i * alpha + j) * kb + ko / b) * cb + ci / b) * b + ci % b) * b + ko % b] =
                static_cast<float>(u);
          }
        }
      }
    }
    auto args = [&](test::Buffer& weights, test::Buffer& out) {
      std::vector<kestrel_arg> a = {{input.data(), input.elements(), 0}, {weights.data(), weights.elements(), 0}};
      if (bias) a.push_back({bias_v.data(), bias_v.elements(), 0});
      a.push_back({out.data(), out.elements(), 0});
      return a;
    };
    // The direct reference reads only real lanes, so NaN past C is no concern to it.
    auto reference = test::Kernel::build(direct.reference(bp), dir.path(), "ref");
    run(reference, args(blocked, expected), 1);
    const double tol = wino.tolerance(wp);
    std::vector<Config> configs = test::random_configs(wino, wp, 3, 11);
    configs.push_back(wino.default_config(wp, test::native_traits()));
    int n = 0;
    for (const auto& config : configs) {
      INFO(format_config(config));
      auto kernel = test::Kernel::build(wino.source(Backend::cpu, wp, config), dir.path(), "w" + std::to_string(n++));
      for (int threads : {1, 2}) {
        std::fill(output.data(), output.data() + output.elements(), -7.0f);
        run(kernel, args(transformed, output), threads);
        std::int64_t bad = 0;
        double worst = 0;
        for (std::int64_t i = 0; i < output.elements(); ++i) {
          const double got = output.data()[i], want = expected.data()[i];
          const double err = std::fabs(got - want) / (1 + std::fabs(want));
          worst = std::max(worst, std::isnan(err) ? INFINITY : err);
          if (!(err <= tol)) ++bad;
        }
        INFO("threads " << threads << ", worst relative error " << worst << ", tolerance " << tol);
        CHECK(bad == 0);
        CHECK(output.guard_intact());
      }
    }
  }
}

TEST_CASE("conv2d_winograd refuses weights of the other tile size, a missing tensor and wrong sizes", "[conv2d_winograd][bad-input]") {
  // The two layouts differ only in their first dimension (36 or 16 positions): a program
  // that hands F(2x2) weights to an F(4x4) kernel must get an error, not a wrong answer.
  Registry registry = builtin_ops();
  const Op& conv = registry.get("conv2d_winograd");
  const Params p4 = parse_params(conv, "C=16,H=8,W=8,K=16,R=3,S=3,pad=1,block=16");
  test::TempDir dir;
  auto kernel = test::Kernel::build(conv.source(Backend::cpu, p4, conv.default_config(p4, test::native_traits())),
                                    dir.path(), "w4");
  test::Buffer input(16 * 8 * 8), f4(36 * 16 * 16), f2(16 * 16 * 16), output(16 * 8 * 8);
  input.fill_random(1);
  f4.fill_random(2);
  f2.fill_random(3);
  output.fill_nan();
  std::vector<kestrel_arg> wrong_tile = {{input.data(), input.elements(), 0}, {f2.data(), f2.elements(), 0},
                                         {output.data(), output.elements(), 0}};
  CHECK(kernel.run(wrong_tile, 1) == 2);
  std::vector<kestrel_arg> missing = {{input.data(), input.elements(), 0}, {f4.data(), f4.elements(), 0}};
  CHECK(kernel.run(missing, 1) == 2);
  std::vector<kestrel_arg> short_output = {{input.data(), input.elements(), 0}, {f4.data(), f4.elements(), 0},
                                           {output.data(), output.elements() - 16, 0}};
  CHECK(kernel.run(short_output, 1) == 2);
  // Nothing was written by the refusals.
  for (std::int64_t i = 0; i < output.elements(); ++i) REQUIRE(std::isnan(output.data()[i]));
  std::vector<kestrel_arg> right = {{input.data(), input.elements(), 0}, {f4.data(), f4.elements(), 0},
                                    {output.data(), output.elements(), 0}};
  CHECK(kernel.run(right, 1) == 0);
  CHECK(output.guard_intact());
}
