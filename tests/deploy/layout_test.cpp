// Layout conversions: NCHW <-> NCHWc round trips with padded lanes, and the blocked
// weight layouts of ops/conv2d/*_ref.c element by element.
#include <catch2/catch.hpp>
#include <cmath>

#include "kestrel/deploy/layout.h"

using namespace kestrel::deploy;
using namespace kestrel::model;

namespace {

std::vector<float> ramp(std::int64_t n, float start = 1.0f) {
  std::vector<float> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = start + static_cast<float>(i);
  return v;
}

Initializer init(std::string name, std::vector<std::int64_t> shape) {
  Initializer w;
  w.name = std::move(name);
  w.shape = std::move(shape);
  w.f32 = ramp(element_count(w.shape));
  return w;
}

}  // namespace

TEST_CASE("model: NCHWc round trips pad the last block with zeros", "[model]") {
  for (std::int64_t block : {4, 8, 16}) {
    Tensor x = Tensor::floats({2, 5, 3, 2}, ramp(60));
    Tensor b = to_nchwc(x, block);
    CHECK(b.layout == TensorLayout::nchwc);
    CHECK(b.shape == x.shape);
    const std::int64_t cb = (5 + block - 1) / block;
    REQUIRE(static_cast<std::int64_t>(b.f32.size()) == 2 * cb * 3 * 2 * block);
    // x[n][c][h][w] lands at [n][c/B][h][w][c%B]; lanes past C are zero.
    for (std::int64_t n = 0; n < 2; ++n)
      for (std::int64_t c = 0; c < cb * block; ++c)
        for (std::int64_t p = 0; p < 6; ++p) {
          float got = b.f32[static_cast<std::size_t>(((n * cb + c / block) * 6 + p) * block + c % block)];
          float want = c < 5 ? x.f32[static_cast<std::size_t>((n * 5 + c) * 6 + p)] : 0.0f;
          REQUIRE(got == want);
        }
    Tensor back = to_plain(b);
    CHECK(back.layout == TensorLayout::plain);
    CHECK(back.f32 == x.f32);
  }
  CHECK_THROWS_AS(to_nchwc(Tensor::floats({2, 3}, 1.0f), 8), ModelError);
}

TEST_CASE("model: initializers are packed in the kernels' blocked layouts", "[model]") {
  const std::int64_t B = 4;
  SECTION("conv2d_nchwc weight [K/B][C/B][R][S][B(c)][B(k)]") {
    Initializer w = init("w", {6, 3, 2, 2});  // K=6 (two k blocks, the second half empty), C=3
    const std::int64_t kb = 2, cb = 1;
    AlignedFloats p = pack_initializer(w, ArgLayout::conv_weight, B, kb * cb * 2 * 2 * B * B);
    for (std::int64_t k = 0; k < kb * B; ++k)
      for (std::int64_t c = 0; c < cb * B; ++c)
        for (std::int64_t r = 0; r < 2; ++r)
          for (std::int64_t s = 0; s < 2; ++s) {
            float got = p[static_cast<std::size_t>(((((k / B * cb + c / B) * 2 + r) * 2 + s) * B + c % B) * B + k % B)];
            float want = k < 6 && c < 3 ? w.f32[static_cast<std::size_t>(((k * 3 + c) * 2 + r) * 2 + s)] : 0.0f;
            REQUIRE(got == want);
          }
    CHECK_THROWS_WITH(pack_initializer(w, ArgLayout::conv_weight, B, 10), Catch::Contains("initializer w"));
  }
  SECTION("depthwise weight [C/B][R][S][B]") {
    Initializer w = init("dw", {5, 1, 3, 3});
    AlignedFloats p = pack_initializer(w, ArgLayout::dw_weight, B, 2 * 9 * B);
    for (std::int64_t c = 0; c < 2 * B; ++c)
      for (std::int64_t rs = 0; rs < 9; ++rs) {
        float got = p[static_cast<std::size_t>((c / B * 9 + rs) * B + c % B)];
        REQUIRE(got == (c < 5 ? w.f32[static_cast<std::size_t>(c * 9 + rs)] : 0.0f));
      }
    CHECK_THROWS_AS(pack_initializer(init("bad", {5, 2, 3, 3}), ArgLayout::dw_weight, B, 1000), ModelError);
  }
  SECTION("Winograd weights [(m+2)^2][K/B][C/B][B(c)][B(k)]: G g G^T, so A^T (U . B^T d B) A is the 3x3 correlation") {
    // K=5, C=6 (a second, partial block of each at B=4); the filters are not a ramp, which
    // would hide a transposed tap.
    Initializer w = init("wino", {5, 6, 3, 3});
    for (std::size_t i = 0; i < w.f32.size(); ++i) w.f32[i] = static_cast<float>(static_cast<int>(i * 37 % 23) - 11) / 8.0f;
    const std::int64_t kb = 2, cb = 2;
    static constexpr double kBT4[6][6] = {{4, 0, -5, 0, 1, 0}, {0, -4, -4, 1, 1, 0}, {0, 4, -4, -1, 1, 0},
                                          {0, -2, -1, 2, 1, 0}, {0, 2, -1, -2, 1, 0}, {0, 4, 0, -5, 0, 1}};
    static constexpr double kAT4[4][6] = {
        {1, 1, 1, 1, 1, 0}, {0, 1, -1, 2, -2, 0}, {0, 1, 1, 4, 4, 0}, {0, 1, -1, 8, -8, 1}};
    static constexpr double kBT2[4][4] = {{1, 0, -1, 0}, {0, 1, 1, 0}, {0, -1, 1, 0}, {0, 1, 0, -1}};
    static constexpr double kAT2[2][4] = {{1, 1, 1, 0}, {0, 1, -1, -1}};
    for (int m : {4, 2}) {
      INFO("F(" << m << "x" << m << ", 3x3)");
      const int alpha = m + 2;
      auto bt = [&](int i, int j) { return m == 4 ? kBT4[i][j] : kBT2[i][j]; };
      auto at_ = [&](int i, int j) { return m == 4 ? kAT4[i][j] : kAT2[i][j]; };
      AlignedFloats u = pack_initializer(w, m == 4 ? ArgLayout::winograd_weight : ArgLayout::winograd2_weight, B,
                                         alpha * alpha * kb * cb * B * B);
      double d[6][6], v[6][6] = {};  // a patch and B^T d B
      for (int i = 0; i < alpha; ++i)
        for (int j = 0; j < alpha; ++j) d[i][j] = std::sin(1.0 + i * alpha + j);
      for (int i = 0; i < alpha; ++i)
        for (int j = 0; j < alpha; ++j)
          for (int a = 0; a < alpha; ++a)
            for (int e = 0; e < alpha; ++e) v[i][j] += bt(i, a) * d[a][e] * bt(j, e);
      for (std::int64_t k = 0; k < kb * B; ++k)
        for (std::int64_t c = 0; c < cb * B; ++c) {
          auto at = [&](int xi) {
            return static_cast<std::size_t>((((xi * kb + k / B) * cb + c / B) * B + c % B) * B + k % B);
          };
          if (k >= 5 || c >= 6) {
            for (int xi = 0; xi < alpha * alpha; ++xi) REQUIRE(u[at(xi)] == 0.0f);
            continue;
          }
          for (int p = 0; p < m; ++p)
            for (int q = 0; q < m; ++q) {
              double got = 0, want = 0;
              for (int i = 0; i < alpha; ++i)
                for (int j = 0; j < alpha; ++j) got += at_(p, i) * u[at(i * alpha + j)] * v[i][j] * at_(q, j);
              for (int r = 0; r < 3; ++r)
                for (int s = 0; s < 3; ++s)
                  want += d[p + r][q + s] * w.f32[static_cast<std::size_t>((k * 6 + c) * 9 + r * 3 + s)];
              REQUIRE(got == Approx(want).margin(1e-4));
            }
        }
    }
    CHECK_THROWS_WITH(pack_initializer(init("w5", {4, 4, 5, 5}), ArgLayout::winograd_weight, B, 100000),
                      Catch::Contains("not a 3x3 convolution weight"));
    CHECK_THROWS_WITH(pack_initializer(w, ArgLayout::winograd2_weight, B, 100),
                      Catch::Contains("initializer wino") && Catch::Contains("F(2x2,3x3)"));
  }
  SECTION("gemm panels, from [K][N] and from [N][K]") {
    // [K=2][N=5] in panels of 2: [3][2][2], the sixth column zero.
    Initializer w = init("proj", {2, 5});  // 1..10 row by row
    AlignedFloats p = pack_initializer(w, ArgLayout::gemm_panels, 2, 12);
    CHECK(std::vector<float>(p.begin(), p.end()) == std::vector<float>{1, 2, 6, 7, 3, 4, 8, 9, 5, 0, 10, 0});
    // The same matrix stored transposed, [N=5][K=2], packs to the same panels.
    Initializer t = init("proj_t", {5, 2});
    for (std::int64_t k = 0; k < 2; ++k) {
      for (std::int64_t n = 0; n < 5; ++n) t.f32[static_cast<std::size_t>(n * 2 + k)] = w.f32[static_cast<std::size_t>(k * 5 + n)];
    }
    AlignedFloats q = pack_initializer(t, ArgLayout::gemm_panels_transposed, 2, 12);
    CHECK(std::vector<float>(q.begin(), q.end()) == std::vector<float>(p.begin(), p.end()));
    CHECK_THROWS_WITH(pack_initializer(w, ArgLayout::gemm_panels, 4, 10), Catch::Contains("initializer proj") && Catch::Contains("gemm panels of width 4"));
    CHECK_THROWS_WITH(pack_initializer(init("v", {4}), ArgLayout::gemm_panels, 2, 8), Catch::Contains("not a 2-D matrix"));
  }
  SECTION("transposed, channel vectors and plain") {
    Initializer w = init("fc", {2, 3});
    AlignedFloats t = pack_initializer(w, ArgLayout::transposed, B, 6);
    CHECK(std::vector<float>(t.begin(), t.end()) == std::vector<float>{1, 4, 2, 5, 3, 6});
    AlignedFloats v = pack_initializer(init("b", {3}), ArgLayout::channel_vector, B, 8);
    CHECK(std::vector<float>(v.begin(), v.end()) == std::vector<float>{1, 2, 3, 0, 0, 0, 0, 0});
    AlignedFloats plain = pack_initializer(w, ArgLayout::plain, B, 6);
    CHECK(std::vector<float>(plain.begin(), plain.end()) == w.f32);
    CHECK(reinterpret_cast<std::uintptr_t>(plain.data()) % 64 == 0);
  }
}
