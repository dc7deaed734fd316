// Layout conversions: NCHW <-> NCHWc round trips with padded lanes, and the blocked
// weight layouts of ops/conv2d/*_ref.c element by element.
#include <catch2/catch.hpp>

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
