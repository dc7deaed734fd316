// The portable ONNX operators on small cases computed by hand, numpy broadcasting
// included.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <string>

#include "kestrel/deploy/portable_ops.h"
#include "kestrel/device_runtime/kernel_services.h"

using namespace kestrel::deploy;
using namespace kestrel::model;

namespace {

Node node(std::string op, std::size_t inputs = 1) {
  Node n;
  n.name = "n_" + op;
  n.op_type = std::move(op);
  for (std::size_t i = 0; i < inputs; ++i) n.inputs.push_back("in" + std::to_string(i));
  n.outputs = {"out"};
  return n;
}

Attribute ints(std::vector<std::int64_t> v) {
  Attribute a;
  a.ints = std::move(v);
  return a;
}
Attribute one(std::int64_t v) {
  Attribute a;
  a.i = v;
  return a;
}

Tensor run1(const Node& n, std::vector<const Tensor*> in) { return run_portable(n, in).at(0); }

void expect_floats(const Tensor& t, std::vector<float> want, double eps = 1e-5) {
  REQUIRE(t.type == ElemType::f32);
  REQUIRE(t.f32.size() == want.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    INFO("element " << i);
    CHECK(std::abs(t.f32[i] - want[i]) <= eps);
  }
}

}  // namespace

TEST_CASE("model: portable binary ops broadcast like numpy", "[model]") {
  Tensor a = Tensor::floats({2, 3}, std::vector<float>{1, 2, 3, 4, 5, 6});
  Tensor row = Tensor::floats({3}, std::vector<float>{10, 20, 30});
  Tensor out = run1(node("Add", 2), {&a, &row});
  CHECK(out.shape == std::vector<std::int64_t>{2, 3});
  expect_floats(out, {11, 22, 33, 14, 25, 36});

  Tensor col = Tensor::floats({2, 1}, std::vector<float>{2, 3});
  Tensor r3 = Tensor::floats({1, 3}, std::vector<float>{1, 2, 4});
  Tensor outer = run1(node("Mul", 2), {&col, &r3});
  CHECK(outer.shape == std::vector<std::int64_t>{2, 3});
  expect_floats(outer, {2, 4, 8, 3, 6, 12});

  Tensor scalar = Tensor::floats({}, std::vector<float>{2});
  expect_floats(run1(node("Div", 2), {&a, &scalar}), {0.5, 1, 1.5, 2, 2.5, 3});
  expect_floats(run1(node("Sub", 2), {&scalar, &a}), {1, 0, -1, -2, -3, -4});
  expect_floats(run1(node("Pow", 2), {&a, &scalar}), {1, 4, 9, 16, 25, 36});

  // Both inputs constant along the last axis; a middle axis broadcast on each side.
  Tensor c2 = Tensor::floats({2, 1}, std::vector<float>{1, 2});
  Tensor one_v = Tensor::floats({1}, std::vector<float>{10});
  expect_floats(run1(node("Add", 2), {&c2, &one_v}), {11, 12});
  Tensor m1 = Tensor::floats({2, 1, 2}, std::vector<float>{1, 2, 3, 4});
  Tensor m2 = Tensor::floats({1, 3, 1}, std::vector<float>{10, 20, 30});
  Tensor mid = run1(node("Sub", 2), {&m1, &m2});
  CHECK(mid.shape == std::vector<std::int64_t>{2, 3, 2});
  expect_floats(mid, {-9, -8, -19, -18, -29, -28, -7, -6, -17, -16, -27, -26});
  Tensor i1 = Tensor::ints({3}, {6, 7, 8}), i2 = Tensor::ints({}, {2});
  Tensor idiv = run1(node("Div", 2), {&i1, &i2});
  CHECK(idiv.type == ElemType::i64);
  CHECK(idiv.i64 == std::vector<std::int64_t>{3, 3, 4});

  CHECK(broadcast_shape({8, 1, 6, 1}, {7, 1, 5}) == std::vector<std::int64_t>{8, 7, 6, 5});
  CHECK_THROWS_AS(broadcast_shape({2, 3}, {4}), ModelError);
  Tensor bad = Tensor::floats({4}, 1.0f);
  CHECK_THROWS_WITH(run1(node("Add", 2), {&a, &bad}), Catch::Contains("do not broadcast"));
}

TEST_CASE("model: portable MatMul and Gemm", "[model]") {
  Tensor a = Tensor::floats({2, 3}, std::vector<float>{1, 2, 3, 4, 5, 6});
  Tensor b = Tensor::floats({3, 2}, std::vector<float>{1, 0, 0, 1, 1, 1});
  expect_floats(run1(node("MatMul", 2), {&a, &b}), {4, 5, 10, 11});

  // A batch of 2 against one shared matrix; a vector on the right.
  Tensor batch = Tensor::floats({2, 1, 3}, std::vector<float>{1, 1, 1, 2, 0, -1});
  Tensor out = run1(node("MatMul", 2), {&batch, &b});
  CHECK(out.shape == std::vector<std::int64_t>{2, 1, 2});
  expect_floats(out, {2, 2, 1, -1});
  Tensor v = Tensor::floats({3}, std::vector<float>{1, 1, 1});
  Tensor mv = run1(node("MatMul", 2), {&a, &v});
  CHECK(mv.shape == std::vector<std::int64_t>{2});
  expect_floats(mv, {6, 15});

  // Gemm with B transposed, alpha, beta and a bias row.
  Node g = node("Gemm", 3);
  g.attributes["transB"] = one(1);
  Attribute alpha;
  alpha.f = 2.0f;
  g.attributes["alpha"] = alpha;
  Tensor bt = Tensor::floats({2, 3}, std::vector<float>{1, 0, 1, 0, 1, 1});  // b^T
  Tensor c = Tensor::floats({2}, std::vector<float>{100, 200});
  expect_floats(run1(g, {&a, &bt, &c}), {108, 210, 120, 222});
}

TEST_CASE("model: portable Conv, pools and GlobalAveragePool", "[model]") {
  Tensor x = Tensor::floats({1, 1, 3, 3}, 1.0f);
  Tensor w = Tensor::floats({1, 1, 3, 3}, 1.0f);
  Tensor b = Tensor::floats({1}, std::vector<float>{0.5f});
  Node conv = node("Conv", 3);
  conv.attributes["pads"] = ints({1, 1, 1, 1});
  expect_floats(run1(conv, {&x, &w, &b}), {4.5, 6.5, 4.5, 6.5, 9.5, 6.5, 4.5, 6.5, 4.5});

  // Asymmetric padding and stride 2; two groups of one channel.
  Tensor x2 = Tensor::floats({1, 2, 2, 2}, std::vector<float>{1, 2, 3, 4, 10, 20, 30, 40});
  Tensor w2 = Tensor::floats({2, 1, 1, 1}, std::vector<float>{1, -1});
  Node grouped = node("Conv", 2);
  grouped.attributes["group"] = one(2);
  grouped.attributes["pads"] = ints({0, 0, 1, 1});
  grouped.attributes["strides"] = ints({2, 2});
  Tensor g = run1(grouped, {&x2, &w2, nullptr});
  CHECK(g.shape == std::vector<std::int64_t>{1, 2, 2, 2});
  expect_floats(g, {1, 0, 0, 0, -10, 0, 0, 0});

  std::vector<float> ramp(16);
  for (int i = 0; i < 16; ++i) ramp[static_cast<std::size_t>(i)] = static_cast<float>(i);
  Tensor img = Tensor::floats({1, 1, 4, 4}, ramp);
  Node maxpool = node("MaxPool");
  maxpool.attributes["kernel_shape"] = ints({3, 3});
  maxpool.attributes["strides"] = ints({2, 2});
  maxpool.attributes["pads"] = ints({1, 1, 1, 1});
  Tensor m = run1(maxpool, {&img});
  CHECK(m.shape == std::vector<std::int64_t>{1, 1, 2, 2});
  expect_floats(m, {5, 7, 13, 15});

  Node avg = maxpool;
  avg.op_type = "AveragePool";  // count_include_pad 0: the mean of the positions inside
  expect_floats(run1(avg, {&img}), {(0 + 1 + 4 + 5) / 4.0f, (2 + 3 + 6 + 7 + 1 + 5) / 6.0f,
                                    (8 + 9 + 12 + 13 + 4 + 5) / 6.0f, (5 + 6 + 7 + 9 + 10 + 11 + 13 + 14 + 15) / 9.0f});

  Tensor gap = run1(node("GlobalAveragePool"), {&x2});
  CHECK(gap.shape == std::vector<std::int64_t>{1, 2, 1, 1});
  expect_floats(gap, {2.5, 25});
}

TEST_CASE("model: portable Softmax, LayerNormalization and activations", "[model]") {
  Tensor x = Tensor::floats({2, 3}, std::vector<float>{1, 2, 3, 0, 0, 0});
  const double e = std::exp(1.0), s = 1 + e + e * e;
  expect_floats(run1(node("Softmax"), {&x}), {float(1 / s), float(e / s), float(e * e / s), 1 / 3.f, 1 / 3.f, 1 / 3.f});
  Node axis0 = node("Softmax");
  axis0.attributes["axis"] = one(0);
  Tensor col = run1(axis0, {&x});
  expect_floats(col, {float(e / (1 + e)), float(e * e / (1 + e * e)), float(e * e * e / (1 + e * e * e)),
                      float(1 / (1 + e)), float(1 / (1 + e * e)), float(1 / (1 + e * e * e))});

  Node ln = node("LayerNormalization", 3);
  Attribute eps;
  eps.f = 1e-12f;
  ln.attributes["epsilon"] = eps;
  Tensor gamma = Tensor::floats({3}, std::vector<float>{1, 2, 1});
  Tensor beta = Tensor::floats({3}, std::vector<float>{0, 0, 1});
  Tensor row = Tensor::floats({1, 3}, std::vector<float>{1, 2, 3});
  const float k = static_cast<float>(1 / std::sqrt(2.0 / 3.0));
  expect_floats(run1(ln, {&row, &gamma, &beta}), {-k, 0, k + 1});

  Tensor v = Tensor::floats({4}, std::vector<float>{-1, 0.5, 3, 8});
  expect_floats(run1(node("Relu"), {&v}), {0, 0.5, 3, 8});
  Tensor lo = Tensor::floats({}, std::vector<float>{0}), hi = Tensor::floats({}, std::vector<float>{6});
  expect_floats(run1(node("Clip", 3), {&v, &lo, &hi}), {0, 0.5, 3, 6});
  expect_floats(run1(node("Erf"), {&v}), {float(std::erf(-1.0)), float(std::erf(0.5)), float(std::erf(3.0)), 1});
  expect_floats(run1(node("Sigmoid"), {&v}), {float(1 / (1 + std::exp(1.0))), float(1 / (1 + std::exp(-0.5))),
                                             float(1 / (1 + std::exp(-3.0))), float(1 / (1 + std::exp(-8.0)))});
  expect_floats(run1(node("Tanh"), {&v}), {std::tanh(-1.f), std::tanh(0.5f), std::tanh(3.f), std::tanh(8.f)});
  Tensor sq = Tensor::floats({2}, std::vector<float>{4, 9});
  expect_floats(run1(node("Sqrt"), {&sq}), {2, 3});
}

TEST_CASE("model: portable shape operators", "[model]") {
  std::vector<float> data(24);
  for (int i = 0; i < 24; ++i) data[static_cast<std::size_t>(i)] = static_cast<float>(i);
  Tensor x = Tensor::floats({1, 2, 3, 4}, data);

  Tensor shape = Tensor::ints({3}, {0, -1, 4});
  Tensor r = run1(node("Reshape", 2), {&x, &shape});
  CHECK(r.shape == std::vector<std::int64_t>{1, 6, 4});
  CHECK(r.f32 == x.f32);

  Node t = node("Transpose");
  t.attributes["perm"] = ints({0, 2, 1, 3});
  Tensor tr = run1(t, {&x});
  CHECK(tr.shape == std::vector<std::int64_t>{1, 3, 2, 4});
  // out[0][j][i][k] = x[0][i][j][k]
  CHECK(tr.f32[4] == 12.0f);   // out[0][0][1][0] = x[0][1][0][0]
  CHECK(tr.f32[8] == 4.0f);    // out[0][1][0][0] = x[0][0][1][0]
  CHECK(tr.f32[23] == 23.0f);

  // The default perm reverses the axes; integer tensors move too.
  Tensor ints3 = Tensor::ints({2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor rev = run1(node("Transpose"), {&ints3});
  CHECK(rev.shape == std::vector<std::int64_t>{3, 2});
  CHECK(rev.i64 == std::vector<std::int64_t>{1, 4, 2, 5, 3, 6});

  Tensor flat = run1(node("Flatten"), {&x});
  CHECK(flat.shape == std::vector<std::int64_t>{1, 24});

  Tensor axes = Tensor::ints({1}, {0});
  Tensor sq = run1(node("Squeeze", 2), {&x, &axes});
  CHECK(sq.shape == std::vector<std::int64_t>{2, 3, 4});
  Tensor axes2 = Tensor::ints({2}, {0, -1});
  Tensor un = run1(node("Unsqueeze", 2), {&sq, &axes2});
  CHECK(un.shape == std::vector<std::int64_t>{1, 2, 3, 4, 1});

  Tensor s = run1(node("Shape"), {&x});
  CHECK(s.type == ElemType::i64);
  CHECK(s.i64 == std::vector<std::int64_t>{1, 2, 3, 4});

  Tensor idx = Tensor::ints({2}, {2, -1});
  Node gather = node("Gather", 2);
  gather.attributes["axis"] = one(2);
  Tensor g = run1(gather, {&x, &idx});
  CHECK(g.shape == std::vector<std::int64_t>{1, 2, 2, 4});
  CHECK(g.f32[0] == 8.0f);   // x[0][0][2][0]
  CHECK(g.f32[4] == 8.0f);   // index -1 is 2 too
  Tensor scalar_idx = Tensor::ints({}, {1});
  Node gather0 = node("Gather", 2);
  Tensor dims = run1(gather0, {&s, &scalar_idx});
  CHECK(dims.shape.empty());
  CHECK(dims.i64 == std::vector<std::int64_t>{2});

  // Slice the last axis backwards with step -2, and the second from 1 to the end.
  Tensor starts = Tensor::ints({2}, {-1, 1}), ends = Tensor::ints({2}, {-100, 100});
  Tensor sl_axes = Tensor::ints({2}, {3, 1}), steps = Tensor::ints({2}, {-2, 1});
  Tensor sl = run1(node("Slice", 5), {&x, &starts, &ends, &sl_axes, &steps});
  CHECK(sl.shape == std::vector<std::int64_t>{1, 1, 3, 2});
  expect_floats(sl, {15, 13, 19, 17, 23, 21});

  Node cat = node("Concat", 2);
  cat.attributes["axis"] = one(1);
  Tensor a = Tensor::floats({2, 1}, std::vector<float>{1, 2}), b = Tensor::floats({2, 2}, std::vector<float>{3, 4, 5, 6});
  Tensor c = run1(cat, {&a, &b});
  CHECK(c.shape == std::vector<std::int64_t>{2, 3});
  expect_floats(c, {1, 3, 4, 2, 5, 6});

  Node cast = node("Cast");
  cast.attributes["to"] = one(1);
  expect_floats(run1(cast, {&s}), {1, 2, 3, 4});
  CHECK(run1(node("Identity"), {&a}).f32 == a.f32);
  CHECK(run1(node("Dropout"), {&a}).f32 == a.f32);
}

TEST_CASE("model: portable ops refuse what they do not implement, by node", "[model]") {
  Tensor a = Tensor::floats({2}, 1.0f);
  CHECK_FALSE(has_portable("NonMaxSuppression"));
  CHECK(has_portable("LayerNormalization"));
  CHECK_THROWS_WITH(run1(node("NonMaxSuppression"), {&a}),
                    Catch::Contains("n_NonMaxSuppression") && Catch::Contains("no portable implementation"));
  Node bad_reshape = node("Reshape", 2);
  Tensor shape = Tensor::ints({1}, {3});
  CHECK_THROWS_WITH(run1(bad_reshape, {&a, &shape}), Catch::Contains("cannot reshape [2] to [3]"));
}

// Issue 28: the elementwise operators run four lanes at a time with float exp; across
// their range, on sizes with a tail, they stay within float tolerance of the double
// references, and the broadcast fast paths (coalesced dimensions, scalar and row
// operands, Pow by 2, 3 and 0.5) give what a per-element loop gives.
TEST_CASE("deploy: portable elementwise fast paths match double references", "[deploy][portable]") {
  std::vector<float> xs;
  for (float x = -95.0f; x < 95.0f; x += 0.0371f) xs.push_back(x);
  xs.push_back(1e-6f);
  xs.push_back(-3e-5f);
  Tensor x = Tensor::floats({static_cast<std::int64_t>(xs.size())}, xs);
  auto check = [&](const char* op, auto ref, double eps, bool relative) {
    Tensor out = run1(node(op), {&x});
    REQUIRE(out.f32.size() == xs.size());
    for (std::size_t i = 0; i < xs.size(); ++i) {
      const double want = ref(static_cast<double>(xs[i]));
      const double tol = relative ? eps * std::abs(want) + 1e-37 : eps;
      INFO(op << " at " << xs[i] << ": " << out.f32[i] << " want " << want);
      if (std::isnan(want)) CHECK(std::isnan(out.f32[i]));
      else if (std::isinf(want)) CHECK(out.f32[i] > 3e38f);
      else CHECK(std::abs(out.f32[i] - want) <= tol);
    }
  };
  check("Sigmoid", [](double v) { return 1 / (1 + std::exp(-v)); }, 2e-7, false);
  check("Tanh", [](double v) { return std::tanh(v); }, 3e-7, false);
  check("Erf", [](double v) { return std::erf(v); }, 1e-6, false);
  check("Exp", [](double v) { return v > 88.72 ? HUGE_VAL : v < -87.33 ? 0.0 : std::exp(v); }, 3e-7, true);
  check("Relu", [](double v) { return v > 0 ? v : 0; }, 0, false);
  check("Neg", [](double v) { return -v; }, 0, false);
  check("Sqrt", [](double v) { return std::sqrt(v); }, 1e-7, true);
  Tensor nan = Tensor::floats({3}, std::vector<float>{NAN, INFINITY, -INFINITY});
  Tensor s = run1(node("Sigmoid"), {&nan});
  CHECK(std::isnan(s.f32[0]));
  CHECK(s.f32[1] == 1.0f);
  CHECK(s.f32[2] == 0.0f);
  Tensor t = run1(node("Tanh"), {&nan});
  CHECK(std::isnan(t.f32[0]));
  CHECK(t.f32[1] == 1.0f);
  CHECK(t.f32[2] == -1.0f);

  // Pow by constants (odd sizes: the vector loop and its tail).
  Tensor base = Tensor::floats({7}, std::vector<float>{-2.5f, -1, 0, 0.5f, 1.25f, 3, 7});
  Tensor pos = Tensor::floats({7}, std::vector<float>{0, 0.25f, 1, 2, 3.5f, 9, 100});
  auto pow_by = [&](const Tensor& a, float e) {
    Tensor ex = Tensor::floats({}, std::vector<float>{e});
    Tensor out = run1(node("Pow", 2), {&a, &ex});
    for (std::size_t i = 0; i < a.f32.size(); ++i) {
      INFO("Pow(" << a.f32[i] << ", " << e << ")");
      CHECK(std::abs(out.f32[i] - std::pow(static_cast<double>(a.f32[i]), e)) <= 1e-6 * std::max(1.0, std::abs(std::pow(static_cast<double>(a.f32[i]), static_cast<double>(e)))));
    }
  };
  pow_by(base, 1);
  pow_by(base, 2);
  pow_by(base, 3);
  pow_by(pos, 0.5f);
  pow_by(pos, 1.5f);
  Tensor iexp = Tensor::ints({}, {3});
  expect_floats(run1(node("Pow", 2), {&base, &iexp}), {-15.625f, -1, 0, 0.125f, 1.953125f, 27, 343});

  // [1,C,H,W] op [1,C,1,1], [C,1,1], a row [W], a scalar, and the operands swapped, against
  // a per-element loop.
  const std::int64_t C = 3, H = 5, W = 7;
  std::vector<float> big(static_cast<std::size_t>(C * H * W));
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = 0.25f * static_cast<float>(i % 13) - 1.0f;
  Tensor a = Tensor::floats({1, C, H, W}, big);
  Tensor chan = Tensor::floats({1, C, 1, 1}, std::vector<float>{2, -3, 0.5f});
  Tensor chan3 = Tensor::floats({C, 1, 1}, std::vector<float>{2, -3, 0.5f});
  Tensor row = Tensor::floats({W}, std::vector<float>{1, 2, 3, 4, 5, 6, 8});
  Tensor sc = Tensor::floats({1}, std::vector<float>{4});
  auto at = [&](const Tensor& b, std::int64_t c, std::int64_t w) {
    if (b.f32.size() == 1) return b.f32[0];
    if (b.f32.size() == static_cast<std::size_t>(W)) return b.f32[static_cast<std::size_t>(w)];
    return b.f32[static_cast<std::size_t>(c)];
  };
  for (const char* op : {"Add", "Sub", "Mul", "Div"}) {
    for (const Tensor* b : {&chan, &chan3, &row, &sc}) {
      for (bool swap : {false, true}) {
        Tensor out = swap ? run1(node(op, 2), {b, &a}) : run1(node(op, 2), {&a, b});
        CHECK(out.shape == std::vector<std::int64_t>{1, C, H, W});
        REQUIRE(out.f32.size() == big.size());
        for (std::int64_t c = 0; c < C; ++c) {
          for (std::int64_t h = 0; h < H; ++h) {
            for (std::int64_t w = 0; w < W; ++w) {
              const std::size_t i = static_cast<std::size_t>((c * H + h) * W + w);
              const float u = swap ? at(*b, c, w) : big[i], v = swap ? big[i] : at(*b, c, w);
              const std::string o = op;
              const float want = o == "Add" ? u + v : o == "Sub" ? u - v : o == "Mul" ? u * v : u / v;
              INFO(op << " swap " << swap << " b of " << b->f32.size() << " at " << i);
              CHECK(out.f32[i] == want);
            }
          }
        }
      }
    }
  }
}

TEST_CASE("deploy: portable operators on a pool of threads give the values of one thread", "[deploy][portable]") {
  // Tensors past the operators' grain, so that their loops split; each result compared
  // element for element with the same node run on the calling thread alone.
  kestrel::device::KernelServices pool(3);
  auto values = [](std::vector<std::int64_t> shape, float scale) {
    std::vector<float> v(static_cast<std::size_t>(element_count(shape)));
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = scale * std::sin(0.37f * static_cast<float>(i)) + 0.01f * static_cast<float>(i % 7);
    return Tensor::floats(std::move(shape), v);
  };
  const Tensor x = values({1, 8, 64, 80}, 3.0f);
  const Tensor channel = values({1, 8, 1, 1}, 1.0f);
  const Tensor row = values({80}, 2.0f);
  const Tensor scale = values({80}, 1.0f), bias = values({80}, 0.5f);
  const Tensor bn_scale = values({8}, 1.0f), bn_bias = values({8}, 0.1f), bn_mean = values({8}, 0.2f);
  Tensor bn_var = values({8}, 0.0f);
  for (float& v : bn_var.f32) v = 1.5f + v;
  Tensor mask = Tensor::ints({1, 1, 64, 80}, std::vector<std::int64_t>(64 * 80));
  for (std::size_t i = 0; i < mask.i64.size(); ++i) mask.i64[i] = (i * 7) % 3 == 0;
  const Tensor zero = Tensor::floats({}, std::vector<float>{0.0f});
  const Tensor a = values({4, 64, 80}, 1.0f), b = values({80, 32}, 1.0f);
  const Tensor image = values({1, 8, 40, 40}, 1.0f), dw = values({8, 1, 3, 3}, 1.0f);

  auto same = [&](Node n, std::vector<const Tensor*> in) {
    INFO(n.op_type);
    const std::vector<Tensor> one = run_portable(n, in);
    const std::vector<Tensor> many = run_portable(n, in, pool.table());
    REQUIRE(one.size() == many.size());
    for (std::size_t o = 0; o < one.size(); ++o) {
      CHECK(one[o].shape == many[o].shape);
      CHECK(one[o].i64 == many[o].i64);
      REQUIRE(one[o].f32.size() == many[o].f32.size());
      CHECK(std::equal(one[o].f32.begin(), one[o].f32.end(), many[o].f32.begin(),
                       [](float p, float q) { return p == q || (std::isnan(p) && std::isnan(q)); }));
    }
  };
  same(node("Sigmoid"), {&x});
  same(node("Add", 2), {&x, &channel});
  same(node("Mul", 2), {&row, &x});
  same(node("Sub", 2), {&x, &x});
  same(node("IsNaN"), {&x});
  same(node("Where", 3), {&mask, &zero, &x});
  Node softmax = node("Softmax");
  softmax.attributes["axis"] = one(-1);
  same(softmax, {&x});
  Node softmax_inner = node("Softmax");
  softmax_inner.attributes["axis"] = one(1);
  same(softmax_inner, {&x});
  Node ln = node("LayerNormalization", 3);
  ln.attributes["axis"] = one(-1);
  same(ln, {&x, &scale, &bias});
  same(node("BatchNormalization", 5), {&x, &bn_scale, &bn_bias, &bn_mean, &bn_var});
  same(node("GlobalAveragePool"), {&x});
  Node perm = node("Transpose");
  perm.attributes["perm"] = ints({0, 2, 3, 1});
  same(perm, {&x});
  same(node("MatMul", 2), {&a, &b});
  Node conv = node("Conv", 2);
  conv.attributes["group"] = one(8);
  conv.attributes["pads"] = ints({1, 1, 1, 1});
  same(conv, {&image, &dw});
  Node pool_node = node("MaxPool");
  pool_node.attributes["kernel_shape"] = ints({3, 3});
  pool_node.attributes["strides"] = ints({2, 2});
  same(pool_node, {&image});
}

TEST_CASE("deploy: the squeeze-excite channel op on blocked data matches a scalar loop for every op, order and block", "[deploy][portable]") {
  // blocked_channel_binary runs on clones for the host's widest vectors (AVX-512, AVX2 or
  // baseline on x86): blocks of 4, 8, 16 and 32 lanes take each width's path (32: more
  // lane groups than it keeps in registers), on one thread and split over a pool, in place
  // and not.
  kestrel::device::KernelServices pool(2);
  for (std::int64_t block : {4, 8, 16, 32}) {
    for (const char* op : {"Add", "Sub", "Mul", "Div"}) {
      for (bool vector_first : {false, true}) {
        for (bool in_place : {false, true}) {
          const std::int64_t n = 2, blocks = 3, hw = 37;
          std::vector<float> x(static_cast<std::size_t>(n * blocks * hw * block)), v(static_cast<std::size_t>(blocks * block));
          for (std::size_t i = 0; i < x.size(); ++i) x[i] = 0.5f + std::sin(0.11f * static_cast<float>(i)) * 2.0f;
          for (std::size_t i = 0; i < v.size(); ++i) v[i] = 1.5f + std::cos(0.7f * static_cast<float>(i));
          const std::vector<float> original = x;
          std::vector<float> separate(x.size(), NAN);
          float* out = in_place ? x.data() : separate.data();
          blocked_channel_binary(op, vector_first, x.data(), v.data(), out, n, blocks, hw, block, pool.table());
          std::size_t bad = 0;
          for (std::int64_t nb = 0; nb < n * blocks; ++nb) {
            for (std::int64_t p = 0; p < hw; ++p) {
              for (std::int64_t lane = 0; lane < block; ++lane) {
                const std::size_t i = static_cast<std::size_t>((nb * hw + p) * block + lane);
                float a = original[i], b = v[static_cast<std::size_t>(nb % blocks * block + lane)];
                if (vector_first) std::swap(a, b);
                const float want = op[0] == 'A' ? a + b : op[0] == 'S' ? a - b : op[0] == 'M' ? a * b : a / b;
                if (out[i] != want) ++bad;
              }
            }
          }
          INFO(op << " block " << block << (vector_first ? " vector first" : "") << (in_place ? " in place" : ""));
          CHECK(bad == 0);
        }
      }
    }
  }
  std::vector<float> x(16), v(4);
  CHECK_THROWS_WITH(blocked_channel_binary("Pow", false, x.data(), v.data(), x.data(), 1, 1, 4, 4), Catch::Contains("Pow is not Add, Sub, Mul or Div"));
  CHECK_THROWS_WITH(blocked_channel_binary("Add", false, x.data(), v.data(), x.data(), 1, 1, 4, 6), Catch::Contains("block 6 is not a multiple of 4"));
}
