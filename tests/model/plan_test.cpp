// Task extraction: which ONNX patterns become which Kestrel task (op, workload, fused
// epilogue, argument layouts), what stays untuned and why, FLOP shares, and the
// parameters that follow a symbolic dimension.
#include <catch2/catch.hpp>

#include <set>

#include "kestrel/model/tasks.h"
#include "model/onnx_builder.h"
#include "support/process.h"

using kestrel::model::ArgLayout;
using kestrel::model::DynamicParam;
using kestrel::model::Model;
using kestrel::model::ModelTask;
using kestrel::model::Plan;
using kestrel::model::PlanOptions;
using kestrel::model::Step;
using kestrel::test::OnnxBuilder;
using kestrel::test::TempDir;
using Catch::Matchers::Contains;
using Params = kestrel::ops::Params;

namespace {

Plan plan(const OnnxBuilder& builder, std::int64_t block = 8, std::map<std::string, std::int64_t> symbols = {}) {
  TempDir dir;
  builder.save(dir.file("m.onnx"));
  Model model = Model::load(dir.file("m.onnx"));
  PlanOptions options;
  options.block = block;
  options.symbols = std::move(symbols);
  Plan p = kestrel::model::plan_model(model, options);
  // Every node is covered exactly once, steps in an order where inputs exist.
  const auto g = model.bind(options.symbols);
  std::vector<int> covered(g.nodes.size(), 0);
  std::set<std::string> ready;
  for (const auto& input : g.inputs) ready.insert(input.name);
  for (const auto& [name, init] : g.initializers) ready.insert(name);
  for (const auto& step : p.steps) {
    std::set<std::string> inside;
    for (auto n : step.nodes) {
      ++covered[n];
      for (const auto& o : g.nodes[n].outputs) inside.insert(o);
    }
    for (auto n : step.nodes) {
      for (const auto& i : g.nodes[n].inputs) {
        if (!i.empty() && !inside.contains(i)) CHECK(ready.contains(i));
      }
    }
    ready.insert(inside.begin(), inside.end());
  }
  for (auto c : covered) CHECK(c == 1);
  return p;
}

const Step& task_step(const Plan& p, std::size_t index) {
  std::size_t seen = 0;
  for (const auto& step : p.steps) {
    if (step.kind == Step::Kind::task && seen++ == index) return step;
  }
  FAIL("no task step " << index);
  return p.steps.front();
}

std::vector<ArgLayout> layouts(const Step& step) {
  std::vector<ArgLayout> out;
  for (const auto& a : step.args) out.push_back(a.layout);
  return out;
}

std::vector<std::string> values(const Step& step) {
  std::vector<std::string> out;
  for (const auto& a : step.args) out.push_back(a.value);
  return out;
}

}  // namespace

TEST_CASE("plan: conv + bias + relu is one conv2d_nchwc task with the epilogue fused") {
  OnnxBuilder b;
  b.input("x", {1, 16, 14, 14}).output("y");
  b.weight("w", {32, 16, 3, 3}).weight("b", {32});
  b.node("Conv", {"x", "w", "b"}, {"c"}).ints("pads", {1, 1, 1, 1}).ints("strides", {2, 2});
  b.node("Relu", {"c"}, {"y"});
  Plan p = plan(b);
  CHECK(p.block == 8);
  REQUIRE(p.tasks.size() == 1);
  const ModelTask& t = p.tasks[0];
  CHECK(t.op_name() == "conv2d_nchwc");
  CHECK(t.params == Params{{"N", 1}, {"C", 16}, {"H", 14}, {"W", 14}, {"K", 32}, {"R", 3}, {"S", 3}, {"stride", 2},
                           {"pad", 1}, {"dilation", 1}, {"block", 8}, {"bias", 1}, {"act", 1}});
  CHECK(t.pattern == "Conv+Relu");
  CHECK(t.occurrences == 1);
  CHECK(t.flops == Approx(2.0 * 32 * 7 * 7 * 16 * 9));
  CHECK(t.key() == "conv2d_nchwc/" + kestrel::ops::format_params(t.params));
  CHECK(t.dynamic.empty());
  const Step& s = task_step(p, 0);
  CHECK(s.nodes == std::vector<std::size_t>{0, 1});
  CHECK(values(s) == std::vector<std::string>{"x", "w", "b", "y"});
  CHECK(layouts(s) ==
        std::vector<ArgLayout>{ArgLayout::nchwc, ArgLayout::conv_weight, ArgLayout::channel_vector, ArgLayout::nchwc});
  CHECK(p.untuned.empty());
  CHECK(p.total_flops == Approx(t.flops));
}

TEST_CASE("plan: a residual block fuses the Add and the Relu into the second conv, twice the same task") {
  OnnxBuilder b;
  b.input("x", {1, 8, 8, 8}).output("y");
  b.weight("w1", {8, 8, 3, 3}).weight("w2", {8, 8, 3, 3}).weight("w3", {8, 8, 3, 3}).weight("w4", {8, 8, 3, 3});
  auto conv = [&](const std::string& in, const std::string& w, const std::string& out) {
    b.node("Conv", {in, w}, {out}).ints("pads", {1, 1, 1, 1});
  };
  conv("x", "w1", "c1");
  b.node("Relu", {"c1"}, {"r1"});
  conv("r1", "w2", "c2");
  b.node("Add", {"c2", "x"}, {"s1"});
  b.node("Relu", {"s1"}, {"r2"});
  conv("r2", "w3", "c3");
  b.node("Relu", {"c3"}, {"r3"});
  conv("r3", "w4", "c4");
  b.node("Add", {"r2", "c4"}, {"s2"});  // the residual first this time
  b.node("Relu", {"s2"}, {"y"});
  Plan p = plan(b);
  REQUIRE(p.tasks.size() == 2);
  CHECK(p.tasks[0].pattern == "Conv+Relu");
  CHECK(p.tasks[0].occurrences == 2);
  CHECK(p.tasks[1].pattern == "Conv+Add+Relu");
  CHECK(p.tasks[1].occurrences == 2);
  CHECK(p.tasks[1].params.at("residual") == 1);
  CHECK(p.tasks[1].params.at("act") == 1);
  CHECK(!p.tasks[1].params.contains("bias"));
  const Step& second = task_step(p, 1);
  CHECK(values(second) == std::vector<std::string>{"r1", "w2", "x", "r2"});
  CHECK(layouts(second) ==
        std::vector<ArgLayout>{ArgLayout::nchwc, ArgLayout::conv_weight, ArgLayout::nchwc, ArgLayout::nchwc});
  CHECK(values(task_step(p, 3)) == std::vector<std::string>{"r3", "w4", "r2", "y"});
  CHECK(p.steps.size() == 4);
  CHECK(p.untuned.empty());
}

TEST_CASE("plan: depthwise conv with Clip(0,6), grouped convs, and conv + BatchNormalization") {
  OnnxBuilder b;
  b.input("x", {1, 16, 10, 10}).output("y");
  b.weight("dw", {16, 1, 3, 3}).scalar("zero", 0.0f).scalar("six", 6.0f);
  b.node("Conv", {"x", "dw"}, {"d"}).i("group", 16).ints("pads", {1, 1, 1, 1});
  b.node("Clip", {"d", "zero", "six"}, {"d6"});
  b.weight("g2", {16, 8, 1, 1});  // 2 groups of 8 channels: conv2d_nchwc with groups at block 8
  b.node("Conv", {"d6", "g2"}, {"e"}).i("group", 2);
  b.weight("g4", {16, 4, 1, 1});  // 4 groups of 4: not a multiple of 8, plain conv2d
  b.node("Conv", {"e", "g4"}, {"f"}).i("group", 4);
  b.weight("w", {8, 16, 1, 1});
  b.weight("scale", {8}).weight("shift", {8}).weight("mean", {8}).weight("var", {8}, std::vector<float>(8, 1.0f));
  b.node("Conv", {"f", "w"}, {"g"});
  b.node("BatchNormalization", {"g", "scale", "shift", "mean", "var"}, {"bn"});
  b.node("Relu", {"bn"}, {"y"});
  Plan p = plan(b);
  REQUIRE(p.tasks.size() == 4);
  CHECK(p.tasks[0].op_name() == "depthwise_conv2d");
  CHECK(p.tasks[0].params == Params{{"N", 1}, {"C", 16}, {"H", 10}, {"W", 10}, {"R", 3}, {"S", 3}, {"stride", 1},
                                    {"pad", 1}, {"dilation", 1}, {"block", 8}, {"act", 2}});
  CHECK(p.tasks[0].pattern == "Conv+Clip");
  CHECK(layouts(task_step(p, 0)) == std::vector<ArgLayout>{ArgLayout::nchwc, ArgLayout::dw_weight, ArgLayout::nchwc});
  CHECK(p.tasks[1].op_name() == "conv2d_nchwc");
  CHECK(p.tasks[1].params.at("groups") == 2);
  CHECK(p.tasks[2].op_name() == "conv2d");
  CHECK(p.tasks[2].params.at("groups") == 4);
  CHECK(layouts(task_step(p, 2)) == std::vector<ArgLayout>{ArgLayout::plain, ArgLayout::plain, ArgLayout::plain});
  CHECK(p.tasks[3].op_name() == "conv2d_nchwc");
  CHECK(p.tasks[3].pattern == "Conv+BatchNormalization+Relu");
  CHECK(p.tasks[3].params.at("bias") == 1);
  CHECK(p.tasks[3].params.at("act") == 1);
  CHECK(layouts(task_step(p, 3))[2] == ArgLayout::channel_vector);
}

TEST_CASE("plan: Gemm with transB and a bias, MatMul + Add + GELU subgraphs in three association orders") {
  OnnxBuilder b;
  b.input("x", {4, 64}).output("y");
  b.weight("wt", {32, 64}).weight("c", {32});
  b.node("Gemm", {"x", "wt", "c"}, {"g"}).i("transB", 1);
  b.node("Relu", {"g"}, {"h0"});
  b.scalar("sqrt2", 1.4142135f).scalar("one", 1.0f).scalar("half", 0.5f).scalar("rsqrt2", 0.70710677f);
  // Order 1: (x * (1 + erf)) * 0.5, scale as Div.
  b.weight("w1", {32, 48}).weight("b1", {48});
  b.node("MatMul", {"h0", "w1"}, {"m1"});
  b.node("Add", {"b1", "m1"}, {"a1"});
  b.node("Div", {"a1", "sqrt2"}, {"d1"});
  b.node("Erf", {"d1"}, {"e1"});
  b.node("Add", {"e1", "one"}, {"p1"});
  b.node("Mul", {"a1", "p1"}, {"q1"});
  b.node("Mul", {"q1", "half"}, {"h1"});
  // Order 2: x * ((1 + erf) * 0.5), scale as Mul.
  b.weight("w2", {48, 48}).weight("b2", {48});
  b.node("MatMul", {"h1", "w2"}, {"m2"});
  b.node("Add", {"m2", "b2"}, {"a2"});
  b.node("Mul", {"rsqrt2", "a2"}, {"d2"});
  b.node("Erf", {"d2"}, {"e2"});
  b.node("Add", {"one", "e2"}, {"p2"});
  b.node("Mul", {"p2", "half"}, {"q2"});
  b.node("Mul", {"a2", "q2"}, {"h2"});
  // Order 3: (x * 0.5) * (1 + erf).
  b.weight("w3", {48, 16}).weight("b3", {16});
  b.node("MatMul", {"h2", "w3"}, {"m3"});
  b.node("Add", {"m3", "b3"}, {"a3"});
  b.node("Mul", {"a3", "half"}, {"q3"});
  b.node("Div", {"a3", "sqrt2"}, {"d3"});
  b.node("Erf", {"d3"}, {"e3"});
  b.node("Add", {"e3", "one"}, {"p3"});
  b.node("Mul", {"q3", "p3"}, {"y"});
  Plan p = plan(b);
  REQUIRE(p.tasks.size() == 4);
  CHECK(p.tasks[0].op_name() == "gemm");
  // Constant B in panels as wide as the default traits' gemm micro-tile (SSE: 8 columns).
  CHECK(p.tasks[0].params == Params{{"M", 4}, {"N", 32}, {"K", 64}, {"bias", 1}, {"act", 1}, {"panels", 8}});
  CHECK(p.tasks[0].pattern == "Gemm+Relu");
  CHECK(layouts(task_step(p, 0)) ==
        std::vector<ArgLayout>{ArgLayout::plain, ArgLayout::gemm_panels_transposed, ArgLayout::plain, ArgLayout::plain});
  CHECK(layouts(task_step(p, 1))[1] == ArgLayout::gemm_panels);
  CHECK(values(task_step(p, 0)) == std::vector<std::string>{"x", "wt", "c", "h0"});
  CHECK(p.tasks[1].params == Params{{"M", 4}, {"N", 48}, {"K", 32}, {"bias", 1}, {"act", 3}, {"panels", 8}});
  CHECK(p.tasks[1].pattern == "MatMul+Add+Gelu");
  CHECK(values(task_step(p, 1)) == std::vector<std::string>{"h0", "w1", "b1", "h1"});
  CHECK(p.tasks[2].params == Params{{"M", 4}, {"N", 48}, {"K", 48}, {"bias", 1}, {"act", 3}, {"panels", 8}});
  CHECK(values(task_step(p, 2)) == std::vector<std::string>{"h1", "w2", "b2", "h2"});
  CHECK(p.tasks[3].params == Params{{"M", 4}, {"N", 16}, {"K", 48}, {"bias", 1}, {"act", 3}, {"panels", 8}});
  CHECK(values(task_step(p, 3)) == std::vector<std::string>{"h2", "w3", "b3", "y"});
  CHECK(p.steps.size() == 4);
  CHECK(p.untuned.empty());
}

TEST_CASE("plan: a constant B is packed in panels as wide as the target's gemm micro-tile, unless switched off") {
  // MatMul by a weight, Gemm by a transposed weight, a weight narrower than a panel, and a
  // product of two activations (batch_matmul: nothing to pack once).
  OnnxBuilder b;
  b.input("x", {8, 64}).input("q", {2, 8, 16}).input("k", {2, 16, 8}).output("y").output("n").output("s");
  b.weight("w", {64, 96}).weight("wt", {80, 96}).weight("narrow", {80, 20});
  b.node("MatMul", {"x", "w"}, {"m"});
  b.node("Gemm", {"m", "wt"}, {"y"}).i("transB", 1);
  b.node("MatMul", {"y", "narrow"}, {"n"});
  b.node("MatMul", {"q", "k"}, {"s"});
  TempDir dir;
  b.save(dir.file("m.onnx"));
  Model model = Model::load(dir.file("m.onnx"));
  auto panels_of = [&](PlanOptions options) {
    Plan p = kestrel::model::plan_model(model, options);
    std::vector<std::string> out;
    for (std::size_t t = 0; t < p.tasks.size(); ++t) {
      const auto it = p.tasks[t].params.find("panels");
      out.push_back(p.tasks[t].op_name() + ":" + (it == p.tasks[t].params.end() ? "-" : std::to_string(it->second)) +
                    ":" + std::to_string(static_cast<int>(layouts(task_step(p, t))[1])));
    }
    return out;
  };
  const auto code = [](ArgLayout l) { return std::to_string(static_cast<int>(l)); };
  PlanOptions avx512;
  avx512.traits = kestrel::ops::TargetTraits::of(kestrel::ops::Isa::avx512);
  CHECK(panels_of(avx512) == std::vector<std::string>{"gemm:32:" + code(ArgLayout::gemm_panels),
                                                      "gemm:32:" + code(ArgLayout::gemm_panels_transposed),
                                                      "gemm:-:" + code(ArgLayout::plain),  // N=20 < 32
                                                      "batch_matmul:-:" + code(ArgLayout::plain)});
  PlanOptions avx2;
  avx2.traits = kestrel::ops::TargetTraits::of(kestrel::ops::Isa::avx2);
  CHECK(panels_of(avx2) == std::vector<std::string>{"gemm:16:" + code(ArgLayout::gemm_panels),
                                                    "gemm:16:" + code(ArgLayout::gemm_panels_transposed),
                                                    "gemm:16:" + code(ArgLayout::gemm_panels),
                                                    "batch_matmul:-:" + code(ArgLayout::plain)});
  PlanOptions off = avx512;
  off.gemm_panels = false;
  CHECK(panels_of(off) == std::vector<std::string>{"gemm:-:" + code(ArgLayout::plain),
                                                   "gemm:-:" + code(ArgLayout::transposed),
                                                   "gemm:-:" + code(ArgLayout::plain),
                                                   "batch_matmul:-:" + code(ArgLayout::plain)});
  CHECK(kestrel::ops::gemm_tile_columns(kestrel::ops::TargetTraits::of(kestrel::ops::Isa::neon)) == 16);
}

TEST_CASE("plan: SiLU, HardSwish, HardSigmoid, Sigmoid and Tanh fuse into the conv and gemm epilogues") {
  OnnxBuilder b;
  b.input("x", {1, 16, 8, 8}).input("v", {4, 32}).output("y").output("z");
  b.weight("w1", {16, 16, 1, 1}).weight("b1", {16}).weight("dw", {16, 1, 3, 3}).weight("w3", {16, 16, 3, 3});
  b.weight("w4", {16, 16, 1, 1}).weight("w5", {16, 16, 3, 3}).weight("w6", {16, 16, 1, 1});
  b.weight("w7", {16, 16, 1, 1}).weight("w8", {16, 16, 3, 3});
  // EfficientNet's SiLU as both exporters write it: x * Sigmoid(x), and the operands swapped.
  b.node("Conv", {"x", "w1", "b1"}, {"c1"});
  b.node("Sigmoid", {"c1"}, {"s1"});
  b.node("Mul", {"c1", "s1"}, {"m1"});
  b.node("Conv", {"m1", "dw"}, {"c2"}).i("group", 16).ints("pads", {1, 1, 1, 1});
  b.node("Sigmoid", {"c2"}, {"s2"});
  b.node("Mul", {"s2", "c2"}, {"m2"});
  // MobileNetV3: HardSwish, x * HardSigmoid(x) with torch's constants, bare HardSigmoid.
  b.node("Conv", {"m2", "w3"}, {"c3"}).ints("pads", {1, 1, 1, 1});
  b.node("HardSwish", {"c3"}, {"h3"});
  b.node("Conv", {"h3", "w4"}, {"c4"});
  b.node("HardSigmoid", {"c4"}, {"g4"}).f("alpha", 1.0f / 6.0f);
  b.node("Mul", {"g4", "c4"}, {"m4"});
  b.node("Conv", {"m4", "w5"}, {"c5"}).ints("pads", {1, 1, 1, 1});
  b.node("HardSigmoid", {"c5"}, {"g5"}).f("alpha", 1.0f / 6.0f).f("beta", 0.5f);
  b.node("Conv", {"g5", "w6"}, {"c6"});
  b.node("Tanh", {"c6"}, {"t6"});
  // A squeeze-excite gate: the Sigmoid fuses, the Mul by the other value stays.
  b.node("Conv", {"t6", "w7"}, {"c7"});
  b.node("Sigmoid", {"c7"}, {"s7"});
  b.node("Conv", {"t6", "w8"}, {"c8"}).ints("pads", {1, 1, 1, 1});
  b.node("Mul", {"c8", "s7"}, {"y"});
  // A gemm: MatMul + bias + SiLU, then Gemm + HardSwish.
  b.weight("wm", {32, 24}).weight("bm", {24}).weight("wg", {24, 8});
  b.node("MatMul", {"v", "wm"}, {"mm"});
  b.node("Add", {"mm", "bm"}, {"am"});
  b.node("Sigmoid", {"am"}, {"sm"});
  b.node("Mul", {"am", "sm"}, {"um"});
  b.node("Gemm", {"um", "wg"}, {"gg"});
  b.node("HardSwish", {"gg"}, {"z"});
  Plan p = plan(b);
  std::vector<std::string> tasks;
  for (const auto& t : p.tasks) {
    const auto act = t.params.find("act");
    tasks.push_back(t.op_name() + ":" + t.pattern + ":act=" + std::to_string(act == t.params.end() ? 0 : act->second));
  }
  CHECK(tasks == std::vector<std::string>{
                     "conv2d_nchwc:Conv+Sigmoid+Mul:act=5", "depthwise_conv2d:Conv+Sigmoid+Mul:act=5",
                     "conv2d_nchwc:Conv+HardSwish:act=6", "conv2d_nchwc:Conv+HardSigmoid+Mul:act=6",
                     "conv2d_nchwc:Conv+HardSigmoid:act=7", "conv2d_nchwc:Conv+Tanh:act=8",
                     "conv2d_nchwc:Conv+Sigmoid:act=4", "conv2d_nchwc:Conv:act=0", "elementwise:Mul:act=0",
                     "gemm:MatMul+Add+Sigmoid+Mul:act=5", "gemm:Gemm+HardSwish:act=6"});
  CHECK(values(task_step(p, 0)) == std::vector<std::string>{"x", "w1", "b1", "m1"});
  CHECK(task_step(p, 0).nodes == std::vector<std::size_t>{0, 1, 2});
  CHECK(values(task_step(p, 1)) == std::vector<std::string>{"m1", "dw", "m2"});
  CHECK(values(task_step(p, 3)) == std::vector<std::string>{"h3", "w4", "m4"});
  CHECK(values(task_step(p, 6)) == std::vector<std::string>{"t6", "w7", "s7"});
  CHECK(values(task_step(p, 9)) == std::vector<std::string>{"v", "wm", "bm", "um"});
  CHECK(p.tasks[9].params == Params{{"M", 4}, {"N", 24}, {"K", 32}, {"bias", 1}, {"act", 5}, {"panels", 8}});
  CHECK(values(task_step(p, 10)) == std::vector<std::string>{"um", "wg", "z"});
  CHECK(p.untuned.empty());
}

TEST_CASE("plan: an activation with another reader of its input or output, or ONNX's HardSigmoid, does not fuse") {
  OnnxBuilder b;
  b.input("x", {1, 8, 6, 6}).output("y").output("s2");
  b.weight("w1", {8, 8, 1, 1}).weight("w2", {8, 8, 1, 1}).weight("w3", {8, 8, 1, 1}).weight("w4", {8, 8, 1, 1});
  b.weight("w5", {8, 8, 1, 1});
  // x * Sigmoid(x) whose pre-activation value has a third reader (the Add).
  b.node("Conv", {"x", "w1"}, {"c1"});
  b.node("Sigmoid", {"c1"}, {"s1"});
  b.node("Mul", {"c1", "s1"}, {"m1"});
  b.node("Add", {"m1", "c1"}, {"a1"});
  // x * Sigmoid(x) whose sigmoid is also a graph output.
  b.node("Conv", {"a1", "w2"}, {"c2"});
  b.node("Sigmoid", {"c2"}, {"s2"});
  b.node("Mul", {"c2", "s2"}, {"m2"});
  // HardSigmoid at ONNX's defaults (alpha 0.2): neither alone nor as x * HardSigmoid(x).
  b.node("Conv", {"m2", "w3"}, {"c3"});
  b.node("HardSigmoid", {"c3"}, {"g3"});
  b.node("Conv", {"g3", "w4"}, {"c4"});
  b.node("HardSigmoid", {"c4"}, {"g4"}).f("alpha", 0.2f);
  b.node("Mul", {"c4", "g4"}, {"m4"});
  // beta other than 1/2.
  b.node("Conv", {"m4", "w5"}, {"c5"});
  b.node("HardSigmoid", {"c5"}, {"y"}).f("alpha", 1.0f / 6.0f).f("beta", 0.6f);
  Plan p = plan(b);
  std::vector<std::string> tasks;
  for (const auto& t : p.tasks) tasks.push_back(t.op_name() + ":" + t.pattern);
  CHECK(tasks == std::vector<std::string>{"conv2d_nchwc:Conv", "elementwise:Sigmoid", "elementwise:Mul",
                                          "elementwise:Add"});
  for (const auto& t : p.tasks) CHECK(!t.params.contains("act"));
  CHECK(p.tasks[0].occurrences == 5);
  CHECK(p.tasks[1].occurrences == 2);
  CHECK(p.tasks[2].occurrences == 3);
  REQUIRE(p.untuned.size() == 1);
  CHECK(p.untuned[0].op_type == "HardSigmoid");
  CHECK(p.untuned[0].occurrences == 3);
}

TEST_CASE("plan: attention with a symbolic sequence: batch_matmul, softmax, dynamic params per symbol") {
  OnnxBuilder b;
  b.input("x", {1, "seq", 32}).output("y");
  b.weight("wq", {32, 32}).weight("wk", {32, 32}).weight("wv", {32, 32});
  b.ints("heads", {1, -1, 4, 8});
  b.node("MatMul", {"x", "wq"}, {"q"});
  b.node("MatMul", {"x", "wk"}, {"k"});
  b.node("MatMul", {"x", "wv"}, {"v"});
  b.node("Reshape", {"q", "heads"}, {"q4"});
  b.node("Reshape", {"k", "heads"}, {"k4"});
  b.node("Reshape", {"v", "heads"}, {"v4"});
  b.node("Transpose", {"q4"}, {"qt"}).ints("perm", {0, 2, 1, 3});
  b.node("Transpose", {"k4"}, {"kt"}).ints("perm", {0, 2, 3, 1});
  b.node("Transpose", {"v4"}, {"vt"}).ints("perm", {0, 2, 1, 3});
  b.node("MatMul", {"qt", "kt"}, {"s"});
  b.node("Softmax", {"s"}, {"pr"}).i("axis", -1);
  b.node("MatMul", {"pr", "vt"}, {"y"});
  Plan p = plan(b, 8, {{"seq", 16}});
  CHECK(p.symbols == std::map<std::string, std::int64_t>{{"seq", 16}});
  REQUIRE(p.tasks.size() == 4);
  CHECK(p.tasks[0].op_name() == "gemm");
  CHECK(p.tasks[0].params == Params{{"M", 16}, {"N", 32}, {"K", 32}, {"panels", 8}});
  CHECK(p.tasks[0].occurrences == 3);
  CHECK(p.tasks[0].dynamic == std::vector<DynamicParam>{{"M", "seq", 1}});
  CHECK(p.tasks[1].op_name() == "batch_matmul");
  CHECK(p.tasks[1].params == Params{{"batch", 4}, {"M", 16}, {"N", 16}, {"K", 8}});
  CHECK(p.tasks[1].dynamic == std::vector<DynamicParam>{{"M", "seq", 1}, {"N", "seq", 1}});
  CHECK(p.tasks[2].op_name() == "softmax");
  CHECK(p.tasks[2].params == Params{{"rows", 64}, {"cols", 16}});
  CHECK(p.tasks[2].dynamic == std::vector<DynamicParam>{{"cols", "seq", 1}, {"rows", "seq", 4}});
  CHECK(p.tasks[3].op_name() == "batch_matmul");
  CHECK(p.tasks[3].params == Params{{"batch", 4}, {"M", 16}, {"N", 8}, {"K", 16}});
  CHECK(p.tasks[3].dynamic == std::vector<DynamicParam>{{"K", "seq", 1}, {"M", "seq", 1}});
  REQUIRE(p.untuned.size() == 2);
  CHECK(p.untuned[0].op_type == "Reshape");
  CHECK(p.untuned[0].reason == "layout operator");
  CHECK(p.untuned[0].occurrences == 3);
  CHECK(p.untuned[1].op_type == "Transpose");
  CHECK(p.untuned[1].flops == 0);
  // At another bucket the same model gives the same tasks at that size.
  Plan other = plan(b, 8, {{"seq", 128}});
  CHECK(other.tasks[2].params == Params{{"rows", 512}, {"cols", 128}});
  CHECK(other.tasks[2].dynamic == p.tasks[2].dynamic);
  // At seq = 8 (the head size) QK^T and PV have one workload, but seq enters it through
  // different parameters: two tasks, each with its own run-time parameters.
  Plan equal = plan(b, 8, {{"seq", 8}});
  REQUIRE(equal.tasks.size() == 4);
  CHECK(equal.tasks[1].params == equal.tasks[3].params);
  CHECK(equal.tasks[1].occurrences == 1);
  CHECK(equal.tasks[3].occurrences == 1);
  CHECK(equal.tasks[1].dynamic == std::vector<DynamicParam>{{"M", "seq", 1}, {"N", "seq", 1}});
  CHECK(equal.tasks[3].dynamic == std::vector<DynamicParam>{{"K", "seq", 1}, {"M", "seq", 1}});
  std::size_t qk_steps = 0;
  for (const auto& step : equal.steps) qk_steps += step.kind == Step::Kind::task && step.task == 1;
  CHECK(qk_steps == 1);
}

TEST_CASE("plan: layernorm fuses the residual Add before it, its epsilon must be a power of ten") {
  OnnxBuilder b;
  b.input("x", {2, 6, 16}).input("r", {2, 6, 16}).output("y").output("z");
  b.weight("gamma", {16}).weight("beta", {16});
  b.node("Add", {"x", "r"}, {"s"});
  b.node("LayerNormalization", {"s", "gamma", "beta"}, {"y"}).f("epsilon", 1e-12f).i("axis", -1);
  b.node("LayerNormalization", {"y", "gamma", "beta"}, {"z"}).f("epsilon", 3e-5f);
  Plan p = plan(b);
  REQUIRE(p.tasks.size() == 1);
  CHECK(p.tasks[0].op_name() == "layernorm");
  CHECK(p.tasks[0].params == Params{{"rows", 12}, {"cols", 16}, {"eps", 12}, {"residual", 1}});
  CHECK(p.tasks[0].pattern == "Add+LayerNormalization");
  CHECK(values(task_step(p, 0)) == std::vector<std::string>{"x", "gamma", "beta", "r", "y"});
  REQUIRE(p.untuned.size() == 1);
  CHECK(p.untuned[0].op_type == "LayerNormalization");
  CHECK_THAT(p.untuned[0].reason, Contains("not a power of ten"));
}

TEST_CASE("plan: elementwise nodes, pools, and what stays untuned with its reason") {
  OnnxBuilder b;
  b.input("x", {1, 8, 9, 9}).output("y").output("z");
  b.weight("w", {8, 8, 3, 3}).weight("big", {8, 1, 17, 17});
  b.node("MaxPool", {"x"}, {"p"}).ints("kernel_shape", {3, 3}).ints("strides", {2, 2}).ints("pads", {1, 1, 1, 1});
  b.node("Conv", {"p", "w"}, {"c"}).ints("pads", {0, 0, 1, 1});  // asymmetric: untuned
  b.node("Sigmoid", {"c"}, {"s"});
  b.node("Mul", {"c", "s"}, {"m"});
  b.node("AveragePool", {"m"}, {"a"}).ints("kernel_shape", {2, 2}).ints("strides", {1, 1});
  b.node("GlobalAveragePool", {"a"}, {"y"});
  b.node("Conv", {"a", "big"}, {"d"}).i("group", 8).ints("pads", {8, 8, 8, 8});  // 17x17 depthwise: refused
  b.ints("sizes", {1, 8, 8, 8});
  b.node("Resize", {"d", "", "", "sizes"}, {"z"});
  Plan p = plan(b);
  std::vector<std::string> ops;
  for (const auto& t : p.tasks) ops.push_back(t.op_name() + ":" + t.pattern);
  CHECK(ops == std::vector<std::string>{"pool2d:MaxPool", "elementwise:Sigmoid", "elementwise:Mul",
                                        "pool2d:AveragePool", "pool2d:GlobalAveragePool"});
  CHECK(p.tasks[0].params == Params{{"N", 1}, {"C", 8}, {"H", 9}, {"W", 9}, {"R", 3}, {"S", 3}, {"stride", 2},
                                    {"pad", 1}, {"kind", 0}, {"block", 8}});
  CHECK(p.tasks[1].params == Params{{"n", 8 * 4 * 4}, {"kind", 6}});
  CHECK(p.tasks[2].params == Params{{"n", 8 * 4 * 4}, {"kind", 2}});
  CHECK(p.tasks[3].params == Params{{"N", 1}, {"C", 8}, {"H", 4}, {"W", 4}, {"R", 2}, {"S", 2}, {"kind", 1},
                                    {"block", 8}});
  CHECK(p.tasks[4].params == Params{{"N", 1}, {"C", 8}, {"H", 3}, {"W", 3}, {"kind", 1}, {"global", 1}, {"block", 8}});
  CHECK(layouts(task_step(p, 0)) == std::vector<ArgLayout>{ArgLayout::nchwc, ArgLayout::nchwc});
  REQUIRE(p.untuned.size() == 3);
  CHECK(p.untuned[0].op_type == "Conv");
  CHECK(p.untuned[0].reason == "asymmetric padding (pads 0,0,1,1)");
  CHECK(p.untuned[0].flops == Approx(2.0 * 8 * 4 * 4 * 8 * 9));
  CHECK(p.untuned[1].op_type == "Conv");
  CHECK_THAT(p.untuned[1].reason, Contains("depthwise_conv2d") && Contains("R=17"));
  CHECK(p.untuned[2].op_type == "Resize");
  CHECK(p.untuned[2].reason == "no Kestrel op");
  double tasks = 0, untuned = 0;
  for (const auto& t : p.tasks) tasks += t.flops * t.occurrences;
  for (const auto& u : p.untuned) untuned += u.flops;
  CHECK(p.total_flops == Approx(tasks + untuned));
}

TEST_CASE("plan: the block follows the target's traits unless given, a wrong block or a missing symbol is an error") {
  CHECK(kestrel::model::default_block(kestrel::ops::TargetTraits::of(kestrel::ops::Isa::avx512)) == 16);
  CHECK(kestrel::model::default_block(kestrel::ops::TargetTraits::of(kestrel::ops::Isa::avx2)) == 8);
  CHECK(kestrel::model::default_block(kestrel::ops::TargetTraits::of(kestrel::ops::Isa::neon)) == 4);
  CHECK(kestrel::model::default_block(kestrel::ops::TargetTraits::of(kestrel::ops::Isa::scalar)) == 4);
  CHECK(kestrel::model::default_buckets() == std::vector<std::int64_t>{8, 32, 128});

  TempDir dir;
  OnnxBuilder b;
  b.input("x", {1, "seq", 8}).output("y");
  b.node("Relu", {"x"}, {"y"});
  b.save(dir.file("m.onnx"));
  Model model = Model::load(dir.file("m.onnx"));
  PlanOptions options;
  options.traits = kestrel::ops::TargetTraits::of(kestrel::ops::Isa::avx512);
  options.symbols = {{"seq", 4}};
  Plan p = kestrel::model::plan_model(model, options);
  CHECK(p.block == 16);
  REQUIRE(p.tasks.size() == 1);
  CHECK(p.tasks[0].dynamic == std::vector<DynamicParam>{{"n", "seq", 8}});
  options.block = 5;
  CHECK_THROWS_WITH(kestrel::model::plan_model(model, options), Contains("block 5 is not 4, 8 or 16"));
  options.block = 0;
  options.symbols = {};
  CHECK_THROWS_AS(kestrel::model::plan_model(model, options), kestrel::model::ModelError);
}

TEST_CASE("plan: 3x3 stride-1 convolutions of 14x14 outputs and more run on conv2d_winograd, F(4x4) from 28x28") {
  // (input side, stride, input channels) -> the op and the tile side the plan gives them.
  struct Case {
    std::int64_t side, stride, channels;
    const char* op;
    std::int64_t m;  // 0: no m parameter
    ArgLayout weight;
  };
  const Case cases[] = {{28, 1, 16, "conv2d_winograd", 0, ArgLayout::winograd_weight},
                        {14, 1, 16, "conv2d_winograd", 2, ArgLayout::winograd2_weight},
                        {13, 1, 16, "conv2d_nchwc", 0, ArgLayout::conv_weight},  // 13x13 outputs: too few
                        {28, 2, 16, "conv2d_nchwc", 0, ArgLayout::conv_weight},  // stride 2
                        {28, 1, 4, "conv2d_nchwc", 0, ArgLayout::conv_weight}};  // C < block: read plain
  for (const Case& c : cases) {
    INFO("side " << c.side << ", stride " << c.stride << ", C " << c.channels);
    OnnxBuilder b;
    b.input("x", {1, c.channels, c.side, c.side}).output("y");
    b.weight("w", {16, c.channels, 3, 3}).weight("b", {16});
    b.node("Conv", {"x", "w", "b"}, {"c"}).ints("pads", {1, 1, 1, 1}).ints("strides", {c.stride, c.stride});
    b.node("Relu", {"c"}, {"y"});
    Plan p = plan(b);
    REQUIRE(p.tasks.size() == 1);
    CHECK(p.tasks[0].op_name() == c.op);
    const auto m = p.tasks[0].params.find("m");
    CHECK((m == p.tasks[0].params.end() ? 0 : m->second) == c.m);
    CHECK(layouts(task_step(p, 0))[1] == c.weight);
  }
  // PlanOptions::winograd off: the direct kernel.
  OnnxBuilder b;
  b.input("x", {1, 16, 28, 28}).output("y");
  b.weight("w", {16, 16, 3, 3});
  b.node("Conv", {"x", "w"}, {"y"}).ints("pads", {1, 1, 1, 1});
  TempDir dir;
  b.save(dir.file("m.onnx"));
  Model model = Model::load(dir.file("m.onnx"));
  PlanOptions options;
  options.block = 8;
  CHECK(kestrel::model::plan_model(model, options).tasks[0].op_name() == "conv2d_winograd");
  options.winograd = false;
  CHECK(kestrel::model::plan_model(model, options).tasks[0].op_name() == "conv2d_nchwc");
}
