// The portable operators torch's exporters write around the ones Kestrel tunes
// (HardSwish, HardSigmoid, GatherElements, IsNaN, Where, comparisons, Expand,
// ConstantOfShape, Range, Split, Cast to bool) on small cases computed by hand from the
// ONNX definitions, and missing_portable over a plan.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>

#include "kestrel/deploy/portable_ops.h"

using namespace kestrel::deploy;
using namespace kestrel::model;

namespace {

Node node(std::string op, std::size_t inputs = 1, std::size_t outputs = 1) {
  Node n;
  n.name = "n_" + op;
  n.op_type = std::move(op);
  for (std::size_t i = 0; i < inputs; ++i) n.inputs.push_back("in" + std::to_string(i));
  for (std::size_t i = 0; i < outputs; ++i) n.outputs.push_back("out" + std::to_string(i));
  return n;
}

Attribute one(std::int64_t v) {
  Attribute a;
  a.i = v;
  return a;
}
Attribute real(float v) {
  Attribute a;
  a.f = v;
  return a;
}

Tensor run1(const Node& n, std::vector<const Tensor*> in) { return run_portable(n, in).at(0); }

void expect_floats(const Tensor& t, std::vector<float> want, double eps = 1e-6) {
  REQUIRE(t.type == ElemType::f32);
  REQUIRE(t.f32.size() == want.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    INFO("element " << i);
    CHECK(std::abs(t.f32[i] - want[i]) <= eps);
  }
}

using Ints = std::vector<std::int64_t>;

}  // namespace

TEST_CASE("deploy: portable HardSigmoid and HardSwish follow ONNX's definitions", "[deploy][portable]") {
  Tensor x = Tensor::floats({6}, std::vector<float>{-4, -3, -1, 0, 1.5f, 4});
  // HardSigmoid defaults: alpha 0.2, beta 0.5 -> max(0, min(1, 0.2x + 0.5)).
  expect_floats(run1(node("HardSigmoid"), {&x}), {0, 0, 0.3f, 0.5f, 0.8f, 1});
  Node hs = node("HardSigmoid");
  hs.attributes["alpha"] = real(0.5f);
  hs.attributes["beta"] = real(0.25f);
  expect_floats(run1(hs, {&x}), {0, 0, 0, 0.25f, 1, 1});
  // HardSwish: x * max(0, min(1, x/6 + 1/2)): 0 at or below -3, x at or above 3.
  expect_floats(run1(node("HardSwish"), {&x}), {0, 0, -1.0f / 3.0f, 0, 1.5f * 0.75f, 4});
  CHECK(has_portable("HardSwish"));
  CHECK(has_portable("HardSigmoid"));
}

TEST_CASE("deploy: portable Gelu follows ONNX's definition, exact (erf) and approximate=tanh", "[deploy][portable]") {
  const std::vector<float> xs = {-5, -2, -0.5f, 0, 0.3f, 1, 3, 6};
  Tensor x = Tensor::floats({8}, xs);
  std::vector<float> exact, approx;
  for (float v : xs) {
    const double d = v;
    exact.push_back(static_cast<float>(0.5 * d * (1 + std::erf(d / std::sqrt(2.0)))));
    approx.push_back(static_cast<float>(0.5 * d * (1 + std::tanh(std::sqrt(2 / M_PI) * (d + 0.044715 * d * d * d)))));
  }
  expect_floats(run1(node("Gelu"), {&x}), exact, 1e-5);
  Node tanh_gelu = node("Gelu");
  tanh_gelu.attributes["approximate"].s = "tanh";
  expect_floats(run1(tanh_gelu, {&x}), approx, 1e-5);
  Node other = node("Gelu");
  other.attributes["approximate"].s = "sigmoid";
  CHECK_THROWS_WITH(run1(other, {&x}), Catch::Contains("approximate=\"sigmoid\""));
  CHECK(has_portable("Gelu"));
}

TEST_CASE("deploy: portable IsNaN, Where, comparisons and logic (booleans as 0/1 integers)", "[deploy][portable]") {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  Tensor x = Tensor::floats({4}, std::vector<float>{1, nan, -2, nan});
  Tensor isnan = run1(node("IsNaN"), {&x});
  CHECK(isnan.type == ElemType::i64);
  CHECK(isnan.i64 == Ints{0, 1, 0, 1});

  // Where(IsNaN(x), 0, x): the masked softmax of SDPA exports.
  Tensor zero = Tensor::floats({}, std::vector<float>{0});
  expect_floats(run1(node("Where", 3), {&isnan, &zero, &x}), {1, 0, -2, 0});

  // Broadcast: condition [2,1], X [1,3], Y scalar.
  Tensor cond = Tensor::ints({2, 1}, {1, 0});
  Tensor xs = Tensor::floats({1, 3}, std::vector<float>{1, 2, 3});
  Tensor y = Tensor::floats({}, std::vector<float>{-1});
  Tensor w = run1(node("Where", 3), {&cond, &xs, &y});
  CHECK(w.shape == Ints{2, 3});
  expect_floats(w, {1, 2, 3, -1, -1, -1});
  // Integer X and Y stay integers.
  Tensor xi = Tensor::ints({2}, {7, 8}), yi = Tensor::ints({2}, {-7, -8}), c2 = Tensor::ints({2}, {0, 1});
  Tensor wi = run1(node("Where", 3), {&c2, &xi, &yi});
  CHECK(wi.type == ElemType::i64);
  CHECK(wi.i64 == Ints{-7, 8});

  Tensor a = Tensor::ints({3}, {1, 2, 3});
  Tensor b = Tensor::ints({}, {2});
  CHECK(run1(node("Equal", 2), {&a, &b}).i64 == Ints{0, 1, 0});
  CHECK(run1(node("Less", 2), {&a, &b}).i64 == Ints{1, 0, 0});
  CHECK(run1(node("LessOrEqual", 2), {&a, &b}).i64 == Ints{1, 1, 0});
  CHECK(run1(node("Greater", 2), {&a, &b}).i64 == Ints{0, 0, 1});
  CHECK(run1(node("GreaterOrEqual", 2), {&a, &b}).i64 == Ints{0, 1, 1});
  // Integers beyond 2^53 compare exactly.
  Tensor big1 = Tensor::ints({1}, {(std::int64_t{1} << 60) + 1}), big2 = Tensor::ints({1}, {std::int64_t{1} << 60});
  CHECK(run1(node("Equal", 2), {&big1, &big2}).i64 == Ints{0});
  // Floats, broadcast [2,1] against [2].
  Tensor f1 = Tensor::floats({2, 1}, std::vector<float>{0.5f, 2});
  Tensor f2 = Tensor::floats({2}, std::vector<float>{0.5f, 1});
  Tensor ge = run1(node("GreaterOrEqual", 2), {&f1, &f2});
  CHECK(ge.shape == Ints{2, 2});
  CHECK(ge.i64 == Ints{1, 0, 1, 1});

  Tensor p = Tensor::ints({4}, {0, 0, 1, 1}), q = Tensor::ints({4}, {0, 1, 0, 1});
  CHECK(run1(node("And", 2), {&p, &q}).i64 == Ints{0, 0, 0, 1});
  CHECK(run1(node("Or", 2), {&p, &q}).i64 == Ints{0, 1, 1, 1});
  CHECK(run1(node("Xor", 2), {&p, &q}).i64 == Ints{0, 1, 1, 0});
  CHECK(run1(node("Not"), {&p}).i64 == Ints{1, 1, 0, 0});

  // Cast to BOOL (9): nonzero is true; back to float gives 0/1.
  Tensor fl = Tensor::floats({3}, std::vector<float>{0, -0.5f, 3});
  Node to_bool = node("Cast");
  to_bool.attributes["to"] = one(9);
  Tensor bl = run1(to_bool, {&fl});
  CHECK(bl.i64 == Ints{0, 1, 1});
  Node to_float = node("Cast");
  to_float.attributes["to"] = one(1);
  expect_floats(run1(to_float, {&bl}), {0, 1, 1});
}

TEST_CASE("deploy: portable Expand, ConstantOfShape and Range", "[deploy][portable]") {
  // Expand broadcasts both ways: [3,1] to [2,1,6] gives [2,3,6].
  Tensor x = Tensor::floats({3, 1}, std::vector<float>{1, 2, 3});
  Tensor shape = Tensor::ints({3}, {2, 1, 6});
  Tensor e = run1(node("Expand", 2), {&x, &shape});
  CHECK(e.shape == Ints{2, 3, 6});
  REQUIRE(e.f32.size() == 36);
  CHECK(e.f32[0] == 1);
  CHECK(e.f32[5] == 1);
  CHECK(e.f32[6] == 2);
  CHECK(e.f32[17] == 3);
  CHECK(e.f32[18] == 1);
  // A target of ones keeps the input's shape; integers stay integers.
  Tensor ids = Tensor::ints({1, 3}, {4, 5, 6}), ones = Tensor::ints({1}, {1});
  Tensor same = run1(node("Expand", 2), {&ids, &ones});
  CHECK(same.shape == Ints{1, 3});
  CHECK(same.i64 == Ints{4, 5, 6});
  Tensor bad = Tensor::ints({2}, {4, 1});  // 3 against 4
  CHECK_THROWS_WITH(run1(node("Expand", 2), {&x, &bad}), Catch::Contains("n_Expand") && Catch::Contains("broadcast"));

  // ConstantOfShape: float 0 without a value, else the value's type.
  Tensor dims = Tensor::ints({2}, {2, 3});
  Tensor zeros = run1(node("ConstantOfShape"), {&dims});
  CHECK(zeros.shape == Ints{2, 3});
  expect_floats(zeros, {0, 0, 0, 0, 0, 0});
  Node cos = node("ConstantOfShape");
  Attribute value;
  value.t = Initializer{"v", ElemType::i64, {1}, {}, {1}};
  cos.attributes["value"] = value;
  Tensor filled = run1(cos, {&dims});
  CHECK(filled.type == ElemType::i64);
  CHECK(filled.i64 == Ints{1, 1, 1, 1, 1, 1});
  Node fcos = node("ConstantOfShape");
  value.t = Initializer{"v", ElemType::f32, {1}, {-2.5f}, {}};
  fcos.attributes["value"] = value;
  expect_floats(run1(fcos, {&dims}), {-2.5f, -2.5f, -2.5f, -2.5f, -2.5f, -2.5f});
  // A bool value (kept without data by the importer) is refused by name.
  Node bcos = node("ConstantOfShape");
  value.t = Initializer{"v", ElemType::other, {1}, {}, {}};
  bcos.attributes["value"] = value;
  CHECK_THROWS_WITH(run1(bcos, {&dims}), Catch::Contains("n_ConstantOfShape") && Catch::Contains("bool"));

  // Range: ceil((limit - start) / delta) values.
  Tensor s = Tensor::ints({}, {1}), l = Tensor::ints({}, {8}), d = Tensor::ints({}, {3});
  Tensor r = run1(node("Range", 3), {&s, &l, &d});
  CHECK(r.shape == Ints{3});
  CHECK(r.i64 == Ints{1, 4, 7});
  Tensor fs = Tensor::floats({}, std::vector<float>{1}), fl = Tensor::floats({}, std::vector<float>{0});
  Tensor fd = Tensor::floats({}, std::vector<float>{-0.25f});
  expect_floats(run1(node("Range", 3), {&fs, &fl, &fd}), {1, 0.75f, 0.5f, 0.25f});
  Tensor empty = run1(node("Range", 3), {&l, &s, &d});  // limit below start, positive delta
  CHECK(empty.shape == Ints{0});
}

TEST_CASE("deploy: portable GatherElements and Split", "[deploy][portable]") {
  // ONNX's own example: axis 1, data [[1,2],[3,4]], indices [[0,0],[1,0]] -> [[1,1],[4,3]].
  Tensor data = Tensor::floats({2, 2}, std::vector<float>{1, 2, 3, 4});
  Tensor idx = Tensor::ints({2, 2}, {0, 0, 1, 0});
  Node ge = node("GatherElements", 2);
  ge.attributes["axis"] = one(1);
  Tensor out = run1(ge, {&data, &idx});
  CHECK(out.shape == Ints{2, 2});
  expect_floats(out, {1, 1, 4, 3});
  // Axis 0 with a negative index and indices smaller than the data: [[1,2,3],[4,5,6],[7,8,9]],
  // indices [[1,2,0],[2,0,-3]] -> [[4,8,3],[7,2,3]].
  Tensor d3 = Tensor::floats({3, 3}, std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8, 9});
  Tensor i3 = Tensor::ints({2, 3}, {1, 2, 0, 2, 0, -3});
  Tensor o3 = run1(node("GatherElements", 2), {&d3, &i3});
  CHECK(o3.shape == Ints{2, 3});
  expect_floats(o3, {4, 8, 3, 7, 2, 3});
  // Integer data (BERT's position ids).
  Tensor pos = Tensor::ints({1, 4}, {0, 1, 2, 3}), pick = Tensor::ints({1, 2}, {3, 1});
  Tensor op = run1(ge, {&pos, &pick});
  CHECK(op.i64 == Ints{3, 1});
  Tensor out_of_range = Tensor::ints({2, 2}, {0, 2, 0, 0});
  CHECK_THROWS_WITH(run1(ge, {&data, &out_of_range}), Catch::Contains("n_GatherElements") && Catch::Contains("out of range"));
  Tensor wrong_rank = Tensor::ints({4}, {0, 0, 0, 0});
  CHECK_THROWS_WITH(run1(ge, {&data, &wrong_rank}), Catch::Contains("rank"));

  // Split by sizes (opset 13: an input) along axis 1.
  Tensor x = Tensor::floats({2, 5}, std::vector<float>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
  Tensor sizes = Tensor::ints({2}, {2, 3});
  Node sp = node("Split", 2, 2);
  sp.attributes["axis"] = one(1);
  std::vector<Tensor> parts = run_portable(sp, {&x, &sizes});
  REQUIRE(parts.size() == 2);
  CHECK(parts[0].shape == Ints{2, 2});
  expect_floats(parts[0], {0, 1, 5, 6});
  CHECK(parts[1].shape == Ints{2, 3});
  expect_floats(parts[1], {2, 3, 4, 7, 8, 9});
  // Equal parts without sizes (GPT-2's q, k, v), along the last axis.
  Tensor qkv = Tensor::floats({1, 6}, std::vector<float>{1, 2, 3, 4, 5, 6});
  Node three = node("Split", 1, 3);
  three.attributes["axis"] = one(-1);
  parts = run_portable(three, {&qkv});
  REQUIRE(parts.size() == 3);
  expect_floats(parts[2], {5, 6});
  Tensor wrong = Tensor::ints({2}, {2, 2});
  CHECK_THROWS_WITH(run_portable(sp, {&x, &wrong}), Catch::Contains("n_Split") && Catch::Contains("add up to 4"));
}

TEST_CASE("deploy: missing_portable lists every operator of a plan's portable steps that cannot run", "[deploy][portable]") {
  Graph g;
  auto add = [&](std::string op, std::string name, std::string domain = "") {
    Node n;
    n.op_type = std::move(op);
    n.name = std::move(name);
    n.domain = std::move(domain);
    g.nodes.push_back(n);
  };
  add("Relu", "r");
  add("Sin", "s1");
  add("HardSwish", "h");
  add("Cos", "c");
  add("Sin", "s2");
  add("Relu", "custom", "com.example");
  Plan plan;
  for (std::size_t i = 0; i < g.nodes.size(); ++i) {
    Step step;
    step.kind = Step::Kind::portable;
    step.nodes = {i};
    plan.steps.push_back(step);
  }
  const auto missing = missing_portable(g, plan);
  REQUIRE(missing.size() == 3);
  CHECK(missing[0].op_type == "Sin");
  CHECK(missing[0].nodes == 2);
  CHECK(missing[0].first_node == "s1");
  CHECK(missing[1].op_type == "Cos");
  CHECK(missing[2].op_type == "com.example.Relu");
  const std::string text = missing_portable_text(missing);
  CHECK_THAT(text, Catch::Contains("no portable implementation of Sin (2 nodes, first s1)") &&
                       Catch::Contains("Cos (1 node: c)") && Catch::Contains("com.example.Relu"));
  CHECK(missing_portable_text({}).empty());
  // A task step's nodes are the kernels' business.
  plan.steps[1].kind = Step::Kind::task;
  CHECK(missing_portable(g, plan)[0].nodes == 1);
}

TEST_CASE("deploy: portable Max, Min, the Reduce operators and GatherND (dynamo exports)", "[deploy][portable]") {
  Tensor a = Tensor::floats({2, 2}, std::vector<float>{1, 5, -3, 2});
  Tensor b = Tensor::floats({2}, std::vector<float>{0, 4});
  expect_floats(run1(node("Max", 2), {&a, &b}), {1, 5, 0, 4});
  expect_floats(run1(node("Min", 2), {&a, &b}), {0, 4, -3, 2});
  Tensor i1 = Tensor::ints({1}, {3}), i2 = Tensor::ints({3}, {1, 7, 3}), i3 = Tensor::ints({}, {2});
  CHECK(run1(node("Max", 3), {&i1, &i2, &i3}).i64 == Ints{3, 7, 3});

  // ReduceMean over the spatial axes with keepdims (squeeze-excite), and the others.
  Tensor x = Tensor::floats({1, 2, 2, 2}, std::vector<float>{1, 2, 3, 4, -1, -2, -3, 10});
  Node mean = node("ReduceMean");
  Attribute axes;
  axes.ints = {2, 3};
  mean.attributes["axes"] = axes;
  Tensor m = run1(mean, {&x});
  CHECK(m.shape == Ints{1, 2, 1, 1});
  expect_floats(m, {2.5f, 1});
  // Axes as an input (opset 18), keepdims 0, a negative axis.
  Node sum = node("ReduceSum", 2);
  sum.attributes["keepdims"] = one(0);
  Tensor ax = Tensor::ints({1}, {-1});
  Tensor s = run1(sum, {&x, &ax});
  CHECK(s.shape == Ints{1, 2, 2});
  expect_floats(s, {3, 7, -3, 7});
  Tensor mx = run1(node("ReduceMax"), {&x});  // every axis, kept
  CHECK(mx.shape == Ints{1, 1, 1, 1});
  expect_floats(mx, {10});
  expect_floats(run1(node("ReduceMin"), {&x}), {-3});
  Node noop = node("ReduceMean");
  noop.attributes["noop_with_empty_axes"] = one(1);
  CHECK(run1(noop, {&x}).shape == Ints{1, 2, 2, 2});

  // GatherND, ONNX's examples: data [[0,1],[2,3]], indices [[0,0],[1,1]] -> [0,3];
  // indices [[1],[0]] -> [[2,3],[0,1]]; batch_dims 1: data [[[0,1],[2,3]],[[4,5],[6,7]]],
  // indices [[1],[0]] -> [[2,3],[4,5]].
  Tensor d = Tensor::floats({2, 2}, std::vector<float>{0, 1, 2, 3});
  Tensor pairs = Tensor::ints({2, 2}, {0, 0, 1, 1});
  Tensor g1 = run1(node("GatherND", 2), {&d, &pairs});
  CHECK(g1.shape == Ints{2});
  expect_floats(g1, {0, 3});
  Tensor rows = Tensor::ints({2, 1}, {1, 0});
  Tensor g2 = run1(node("GatherND", 2), {&d, &rows});
  CHECK(g2.shape == Ints{2, 2});
  expect_floats(g2, {2, 3, 0, 1});
  Tensor d3 = Tensor::floats({2, 2, 2}, std::vector<float>{0, 1, 2, 3, 4, 5, 6, 7});
  Node batched = node("GatherND", 2);
  batched.attributes["batch_dims"] = one(1);
  Tensor g3 = run1(batched, {&d3, &rows});
  CHECK(g3.shape == Ints{2, 2});
  expect_floats(g3, {2, 3, 4, 5});
  // A negative index counts from the end; one out of range is refused.
  Tensor neg = Tensor::ints({1, 2}, {-1, 0});
  expect_floats(run1(node("GatherND", 2), {&d, &neg}), {2});
  Tensor far = Tensor::ints({1, 2}, {2, 0});
  CHECK_THROWS_WITH(run1(node("GatherND", 2), {&d, &far}), Catch::Contains("n_GatherND") && Catch::Contains("out of range"));
}

TEST_CASE("deploy: a portable step refuses an input without its values, except what Dropout ignores", "[deploy][portable]") {
  // A bool constant as the importer keeps it: a shape, no values.
  Tensor no_data;
  no_data.type = ElemType::i64;
  no_data.shape = {1, 4};
  Tensor x = Tensor::ints({1, 4}, {1, 0, 1, 1});
  CHECK_THROWS_WITH(run1(node("And", 2), {&x, &no_data}),
                    Catch::Contains("n_And") && Catch::Contains("in1") && Catch::Contains("holds 0 values"));
  Tensor training_mode;
  training_mode.type = ElemType::i64;  // a scalar bool, no values
  Tensor f = Tensor::floats({2}, std::vector<float>{1, 2});
  expect_floats(run1(node("Dropout", 3), {&f, nullptr, &training_mode}), {1, 2});
}
