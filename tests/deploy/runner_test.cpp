// The runner on hand-built graphs and plans (conv + relu + pool + gemm; depthwise with a
// residual and ReLU6; attention-style softmax and batch_matmul), its task steps on kernels
// compiled for this host, checked against the all-portable execution of the same graph.
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>

#include <sys/resource.h>

#include "kestrel/deploy/runner.h"
#include "support/process.h"

using namespace kestrel;
using namespace kestrel::deploy;
using namespace kestrel::model;

namespace {

struct GraphBuilder {
  Graph g;
  std::mt19937 rng{7};

  void value(const std::string& name, std::vector<std::int64_t> shape) {
    ValueInfo v;
    v.name = name;
    Shape s;
    for (auto d : shape) s.push_back(Dim{d, ""});
    v.shape = s;
    g.values[name] = v;
  }
  void input(const std::string& name, std::vector<std::int64_t> shape) {
    value(name, shape);
    g.inputs.push_back(g.values[name]);
  }
  void output(const std::string& name) { g.outputs.push_back(g.values.at(name)); }
  void weight(const std::string& name, std::vector<std::int64_t> shape, float scale = 0.3f) {
    Initializer w;
    w.name = name;
    w.shape = shape;
    std::uniform_real_distribution<float> u(-scale, scale);
    for (std::int64_t i = 0; i < element_count(shape); ++i) w.f32.push_back(u(rng));
    g.initializers[name] = w;
    value(name, shape);
  }
  std::size_t node(const std::string& op, std::vector<std::string> in, const std::string& out,
                   std::vector<std::int64_t> out_shape, std::map<std::string, Attribute> attrs = {}) {
    Node n;
    n.name = out + "_node";
    n.op_type = op;
    n.inputs = std::move(in);
    n.outputs = {out};
    n.attributes = std::move(attrs);
    g.nodes.push_back(n);
    value(out, out_shape);
    return g.nodes.size() - 1;
  }
};

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

std::size_t add_task(Plan& plan, const ops::Registry& ops, const std::string& op, const std::string& params,
                     std::vector<std::size_t> nodes, std::vector<StepArg> args, const std::string& pattern) {
  ModelTask t;
  t.op = &ops.get(op, ops::Backend::cpu);
  t.params = ops::parse_params(*t.op, params);
  t.pattern = pattern;
  t.occurrences = 1;
  plan.tasks.push_back(t);
  Step s;
  s.kind = Step::Kind::task;
  s.task = plan.tasks.size() - 1;
  s.nodes = std::move(nodes);
  s.args = std::move(args);
  plan.steps.push_back(s);
  return plan.steps.size() - 1;
}

void add_portable(Plan& plan, std::size_t node) {
  Step s;
  s.nodes = {node};
  plan.steps.push_back(s);
}

Tensor random_input(std::vector<std::int64_t> shape, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1, 1);
  Tensor t = Tensor::floats(shape);
  for (float& v : t.f32) v = u(rng);
  return t;
}

// max |a - b| relative to max |b|.
double relative_error(const Tensor& a, const Tensor& b) {
  REQUIRE(a.shape == b.shape);
  REQUIRE(a.f32.size() == b.f32.size());
  double err = 0, mag = 1e-30;
  for (std::size_t i = 0; i < a.f32.size(); ++i) {
    err = std::max(err, static_cast<double>(std::abs(a.f32[i] - b.f32[i])));
    mag = std::max(mag, static_cast<double>(std::abs(b.f32[i])));
  }
  return err / mag;
}

}  // namespace

TEST_CASE("model: the runner's conv+relu+pool+gemm tasks on compiled kernels match the portable execution", "[model]") {
  ops::Registry ops = ops::builtin_ops();
  GraphBuilder b;
  b.input("x", {1, 5, 10, 10});
  b.weight("w", {16, 5, 3, 3});
  b.weight("bias", {16});
  b.weight("fc_w", {10, 16});
  b.weight("fc_b", {10});
  std::size_t conv = b.node("Conv", {"x", "w", "bias"}, "c", {1, 16, 10, 10},
                            {{"pads", ints({1, 1, 1, 1})}, {"kernel_shape", ints({3, 3})}});
  std::size_t relu = b.node("Relu", {"c"}, "r", {1, 16, 10, 10});
  std::size_t pool = b.node("MaxPool", {"r"}, "p", {1, 16, 5, 5},
                            {{"kernel_shape", ints({3, 3})}, {"strides", ints({2, 2})}, {"pads", ints({1, 1, 1, 1})}});
  std::size_t gap = b.node("GlobalAveragePool", {"p"}, "g", {1, 16, 1, 1});
  std::size_t flat = b.node("Flatten", {"g"}, "f", {1, 16});
  std::size_t gemm = b.node("Gemm", {"f", "fc_w", "fc_b"}, "y", {1, 10}, {{"transB", one(1)}});
  b.output("y");

  Plan plan;
  plan.block = 8;
  add_task(plan, ops, "conv2d_nchwc", "N=1,C=5,H=10,W=10,K=16,R=3,S=3,pad=1,block=8,bias=1,act=1", {conv, relu},
           {{"x", ArgLayout::nchwc}, {"w", ArgLayout::conv_weight}, {"bias", ArgLayout::channel_vector},
            {"r", ArgLayout::nchwc}},
           "Conv+Relu");
  add_task(plan, ops, "pool2d", "N=1,C=16,H=10,W=10,R=3,S=3,stride=2,pad=1,kind=0,block=8", {pool},
           {{"r", ArgLayout::nchwc}, {"p", ArgLayout::nchwc}}, "MaxPool");
  add_task(plan, ops, "pool2d", "N=1,C=16,H=5,W=5,kind=1,global=1,block=8", {gap},
           {{"p", ArgLayout::nchwc}, {"g", ArgLayout::nchwc}}, "GlobalAveragePool");
  add_portable(plan, flat);
  add_task(plan, ops, "gemm", "M=1,N=10,K=16,bias=1", {gemm},
           {{"f", ArgLayout::plain}, {"fc_w", ArgLayout::transposed}, {"fc_b", ArgLayout::channel_vector},
            {"y", ArgLayout::plain}},
           "Gemm");

  CompiledKernels kernels(2);
  Runner runner(b.g, plan, kernels);
  CHECK(runner.kernels_used().size() == 4);
  CHECK_THAT(runner.kernels_used().front(), Catch::Contains("conv2d_nchwc") && Catch::Contains("compiled default"));

  Plan reference = portable_plan(b.g);
  CompiledKernels none(1);
  Runner portable(b.g, reference, none);

  for (unsigned seed : {1u, 2u}) {
    std::map<std::string, Tensor> in = {{"x", random_input({1, 5, 10, 10}, seed)}};
    auto got = runner.run(in);
    auto want = portable.run(in);
    REQUIRE(got.count("y"));
    CHECK(got.at("y").shape == std::vector<std::int64_t>{1, 10});
    CHECK(relative_error(got.at("y"), want.at("y")) < 1e-4);
  }
  // A second run of the same runner gives the same answer (no state left behind).
  std::map<std::string, Tensor> in = {{"x", random_input({1, 5, 10, 10}, 3)}};
  CHECK(runner.run(in).at("y").f32 == runner.run(in).at("y").f32);

  // A misshapen input is refused by name.
  std::map<std::string, Tensor> bad = {{"x", random_input({1, 5, 10, 9}, 1)}};
  CHECK_THROWS_WITH(runner.run(bad), Catch::Contains("model input x") && Catch::Contains("[1,5,10,10]"));
}

TEST_CASE("model: the runner's depthwise residual ReLU6, softmax and batch_matmul tasks match the portable execution",
          "[model]") {
  ops::Registry ops = ops::builtin_ops();
  GraphBuilder b;
  b.input("x", {1, 16, 6, 6});
  b.weight("dw", {16, 1, 3, 3});
  b.weight("dw_b", {16});
  b.weight("lo", {}, 0);
  b.g.initializers["lo"].f32 = {0.0f};
  b.weight("hi", {}, 0);
  b.g.initializers["hi"].f32 = {6.0f};
  b.weight("proj", {36, 6});
  b.weight("proj_b", {6});
  std::size_t dw = b.node("Conv", {"x", "dw", "dw_b"}, "d", {1, 16, 6, 6},
                          {{"pads", ints({1, 1, 1, 1})}, {"group", one(16)}, {"kernel_shape", ints({3, 3})}});
  std::size_t add = b.node("Add", {"d", "x"}, "a", {1, 16, 6, 6});
  std::size_t clip = b.node("Clip", {"a", "lo", "hi"}, "c", {1, 16, 6, 6});
  // [1,16,36] x [36,6] + bias -> [1,16,6]; then scores [1,16,16] = h h^T and softmax.
  b.weight("flat_shape", {3});
  b.g.initializers["flat_shape"].type = ElemType::i64;
  b.g.initializers["flat_shape"].f32.clear();
  b.g.initializers["flat_shape"].i64 = {1, 16, -1};
  std::size_t reshape = b.node("Reshape", {"c", "flat_shape"}, "flat", {1, 16, 36});
  std::size_t mm = b.node("MatMul", {"flat", "proj"}, "h0", {1, 16, 6});
  std::size_t bias = b.node("Add", {"h0", "proj_b"}, "h", {1, 16, 6});
  std::size_t tr = b.node("Transpose", {"h"}, "ht", {1, 6, 16}, {{"perm", ints({0, 2, 1})}});
  std::size_t scores = b.node("MatMul", {"h", "ht"}, "s", {1, 16, 16});
  std::size_t soft = b.node("Softmax", {"s"}, "y", {1, 16, 16}, {{"axis", one(-1)}});
  b.output("y");

  Plan plan;
  plan.block = 8;
  add_task(plan, ops, "depthwise_conv2d", "N=1,C=16,H=6,W=6,R=3,S=3,pad=1,block=8,bias=1,residual=1,act=2",
           {dw, add, clip},
           {{"x", ArgLayout::nchwc}, {"dw", ArgLayout::dw_weight}, {"dw_b", ArgLayout::channel_vector},
            {"x", ArgLayout::nchwc}, {"c", ArgLayout::nchwc}},
           "Conv+Add+Clip");
  add_portable(plan, reshape);
  add_task(plan, ops, "gemm", "M=16,N=6,K=36,bias=1", {mm, bias},
           {{"flat", ArgLayout::plain}, {"proj", ArgLayout::plain}, {"proj_b", ArgLayout::plain}, {"h", ArgLayout::plain}},
           "MatMul+Add");
  add_portable(plan, tr);
  add_task(plan, ops, "batch_matmul", "batch=1,M=16,N=16,K=6", {scores},
           {{"h", ArgLayout::plain}, {"ht", ArgLayout::plain}, {"s", ArgLayout::plain}}, "MatMul");
  add_task(plan, ops, "softmax", "rows=16,cols=16", {soft}, {{"s", ArgLayout::plain}, {"y", ArgLayout::plain}},
           "Softmax");

  CompiledKernels kernels(1);
  Runner runner(b.g, plan, kernels);
  Plan reference = portable_plan(b.g);
  Runner portable(b.g, reference, kernels);
  std::map<std::string, Tensor> in = {{"x", random_input({1, 16, 6, 6}, 11)}};
  // Large enough inputs that ReLU6 clips some values at 6.
  for (float& v : in["x"].f32) v *= 5.0f;
  auto got = runner.run(in);
  auto want = portable.run(in);
  CHECK(relative_error(got.at("y"), want.at("y")) < 1e-4);
}

TEST_CASE("model: the runner refuses a plan it cannot execute, naming the node or task", "[model]") {
  ops::Registry ops = ops::builtin_ops();
  GraphBuilder b;
  b.input("x", {1, 4});
  b.node("NonMaxSuppression", {"x"}, "y", {1, 4});
  b.output("y");
  Plan plan = portable_plan(b.g);
  CompiledKernels kernels(1);
  CHECK_THROWS_WITH(Runner(b.g, plan, kernels),
                    Catch::Contains("y_node") && Catch::Contains("no portable implementation"));

  GraphBuilder c;
  c.input("x", {2, 8});
  std::size_t relu = c.node("Relu", {"x"}, "y", {2, 8});
  c.output("y");
  Plan wrong;
  // An elementwise task whose n does not match the tensor it is given.
  add_task(wrong, ops, "elementwise", "n=15,kind=3", {relu}, {{"x", ArgLayout::plain}, {"y", ArgLayout::plain}}, "Relu");
  Runner runner(c.g, wrong, kernels);
  std::map<std::string, Tensor> in = {{"x", random_input({2, 8}, 1)}};
  CHECK_THROWS_WITH(runner.run(in), Catch::Contains("elementwise/") && Catch::Contains("holds 16 floats"));
}

TEST_CASE("model: the runner calls an exported library through kestrel_dispatch with the op's params in order",
          "[model]") {
  ops::Registry ops = ops::builtin_ops();
  GraphBuilder b;
  b.input("x", {2, 8});
  b.weight("w", {2, 8});
  std::size_t add = b.node("Add", {"x", "w"}, "s", {2, 8});
  std::size_t relu = b.node("Relu", {"s"}, "r", {2, 8});
  std::size_t soft = b.node("Softmax", {"r"}, "y", {2, 8}, {{"axis", one(-1)}});
  b.output("y");
  Plan plan;
  add_task(plan, ops, "elementwise", "n=16,kind=0", {add},
           {{"x", ArgLayout::plain}, {"w", ArgLayout::plain}, {"s", ArgLayout::plain}}, "Add");
  add_task(plan, ops, "elementwise", "n=16,kind=3", {relu}, {{"s", ArgLayout::plain}, {"r", ArgLayout::plain}}, "Relu");
  add_portable(plan, soft);

  ExportedLibrary library(KESTREL_FAKE_EXPORT_DIR, 2);
  Runner runner(b.g, plan, library);
  REQUIRE(runner.kernels_used().size() == 2);
  CHECK_THAT(runner.kernels_used()[1], Catch::EndsWith(": tuned fake"));
  Plan reference = portable_plan(b.g);
  Runner portable(b.g, reference, library);
  std::map<std::string, Tensor> in = {{"x", random_input({2, 8}, 5)}};
  CHECK(relative_error(runner.run(in).at("y"), portable.run(in).at("y")) < 1e-6);

  // An op the library does not have: "none" at preparation, a clear error when run.
  Plan missing;
  add_task(missing, ops, "softmax", "rows=2,cols=8", {soft}, {{"r", ArgLayout::plain}, {"y", ArgLayout::plain}},
           "Softmax");
  GraphBuilder c;
  c.input("r", {2, 8});
  c.node("Softmax", {"r"}, "y", {2, 8});
  c.output("y");
  missing.steps[0].nodes = {0};
  Runner without(c.g, missing, library);
  CHECK_THAT(without.kernels_used()[0], Catch::EndsWith(": none"));
  std::map<std::string, Tensor> rin = {{"r", random_input({2, 8}, 5)}};
  CHECK_THROWS_WITH(without.run(rin), Catch::Contains("softmax/") && Catch::Contains("no kernel"));

  CHECK_THROWS_WITH(ExportedLibrary("/nonexistent-dir", 1),
                    Catch::Contains("no kernel library /nonexistent-dir/libkestrel_kernels.so"));
}

TEST_CASE("model: a plan made at a bucket runs at another size of its symbol, dynamic params following it", "[model]") {
  ops::Registry ops = ops::builtin_ops();
  // The graph bound at seq = 5; the plan's gemm made at the bucket seq = 8 (M = seq).
  GraphBuilder b;
  b.input("x", {1, 5, 12});
  b.weight("w", {12, 6});
  b.weight("bias", {6});
  std::size_t mm = b.node("MatMul", {"x", "w"}, "h", {1, 5, 6});
  std::size_t add = b.node("Add", {"h", "bias"}, "y", {1, 5, 6});
  b.output("y");
  Plan plan;
  plan.symbols = {{"seq", 8}};
  add_task(plan, ops, "gemm", "M=8,N=6,K=12,bias=1", {mm, add},
           {{"x", ArgLayout::plain}, {"w", ArgLayout::plain}, {"bias", ArgLayout::channel_vector}, {"y", ArgLayout::plain}},
           "MatMul+Add");
  plan.tasks[0].dynamic = {DynamicParam{"M", "seq", 1}};

  CompiledKernels kernels(1);
  Runner runner(b.g, plan, kernels, {{"seq", 5}});
  REQUIRE(runner.kernels_used().size() == 1);
  CHECK_THAT(runner.kernels_used()[0], Catch::StartsWith("gemm/K=12,M=5,N=6,bias=1"));
  Plan reference = portable_plan(b.g);
  Runner portable(b.g, reference, kernels);
  std::map<std::string, Tensor> in = {{"x", random_input({1, 5, 12}, 9)}};
  CHECK(relative_error(runner.run(in).at("y"), portable.run(in).at("y")) < 1e-5);

  // Without the run's symbol values the task keeps the bucket's M = 8 and its arguments
  // do not fit: refused by the runner, naming the argument.
  Runner stale(b.g, plan, kernels);
  CHECK_THROWS_WITH(stale.run(in), Catch::Contains("holds 60 floats, the kernel takes 96"));
}

TEST_CASE("model: elementwise steps on blocked values run blocked, and repeated runs take no fresh memory", "[model]") {
  // Conv (20 channels in blocks of 8: a part-filled last block) -> GlobalAveragePool ->
  // Sigmoid -> Mul back onto the conv's output (a squeeze-excite scale), Sigmoid, Add of a
  // value to itself, Div by a scalar, Sub from the channel vector, then a second Conv: the
  // portable steps between the convolutions read values that tasks wrote blocked.
  ops::Registry ops = ops::builtin_ops();
  GraphBuilder b;
  b.input("x", {1, 20, 48, 48});
  b.weight("w1", {20, 20, 1, 1});
  b.weight("b1", {20});
  b.weight("w2", {8, 20, 3, 3});
  Initializer two;
  two.name = "two";
  two.f32 = {2.0f};
  b.g.initializers["two"] = two;
  b.value("two", {});
  std::size_t conv1 = b.node("Conv", {"x", "w1", "b1"}, "c", {1, 20, 48, 48}, {{"kernel_shape", ints({1, 1})}});
  std::size_t gap = b.node("GlobalAveragePool", {"c"}, "g", {1, 20, 1, 1});
  std::size_t sig = b.node("Sigmoid", {"g"}, "s", {1, 20, 1, 1});
  std::size_t mul = b.node("Mul", {"s", "c"}, "m", {1, 20, 48, 48});
  std::size_t sig2 = b.node("Sigmoid", {"m"}, "u", {1, 20, 48, 48});
  std::size_t add = b.node("Add", {"u", "u"}, "a", {1, 20, 48, 48});
  std::size_t div = b.node("Div", {"a", "two"}, "d", {1, 20, 48, 48});
  std::size_t sub = b.node("Sub", {"s", "d"}, "e", {1, 20, 48, 48});  // the channel vector first
  std::size_t conv2 = b.node("Conv", {"e", "w2"}, "y", {1, 8, 48, 48}, {{"pads", ints({1, 1, 1, 1})}, {"kernel_shape", ints({3, 3})}});
  b.output("y");

  Plan plan;
  plan.block = 8;
  add_task(plan, ops, "conv2d_nchwc", "N=1,C=20,H=48,W=48,K=20,R=1,S=1,block=8,bias=1", {conv1},
           {{"x", ArgLayout::nchwc}, {"w1", ArgLayout::conv_weight}, {"b1", ArgLayout::channel_vector}, {"c", ArgLayout::nchwc}},
           "Conv");
  add_task(plan, ops, "pool2d", "N=1,C=20,H=48,W=48,kind=1,global=1,block=8", {gap},
           {{"c", ArgLayout::nchwc}, {"g", ArgLayout::nchwc}}, "GlobalAveragePool");
  for (std::size_t n : {sig, mul, sig2, add, div, sub}) add_portable(plan, n);
  add_task(plan, ops, "conv2d_nchwc", "N=1,C=20,H=48,W=48,K=8,R=3,S=3,pad=1,block=8", {conv2},
           {{"e", ArgLayout::nchwc}, {"w2", ArgLayout::conv_weight}, {"y", ArgLayout::nchwc}}, "Conv");

  CompiledKernels kernels(2);
  Runner runner(b.g, plan, kernels);
  Plan reference = portable_plan(b.g);
  CompiledKernels none(1);
  Runner portable(b.g, reference, none);
  std::map<std::string, Tensor> in = {{"x", random_input({1, 20, 48, 48}, 5)}};
  const Tensor want = portable.run(in).at("y");
  CHECK(relative_error(runner.run(in).at("y"), want) < 1e-4);

  // After two runs every buffer of a run is one kept from an earlier run: ten more runs
  // touch no fresh page (each tensor here is 221 KB, 54 pages, so one allocation per run
  // that missed would show hundreds of faults).
  runner.run(in);
  rusage before{}, after{};
  ::getrusage(RUSAGE_SELF, &before);
  for (int i = 0; i < 10; ++i) CHECK(relative_error(runner.run(in).at("y"), want) < 1e-4);
  ::getrusage(RUSAGE_SELF, &after);
  CHECK(after.ru_minflt - before.ru_minflt < 60);
}

TEST_CASE("model: a run that fails midway leaves nothing behind for the next", "[model]") {
  // A conv task writes c, then a Gather of a graph input's index fails (out of range);
  // the next run, with a good index, gives the all-portable answer.
  ops::Registry ops = ops::builtin_ops();
  GraphBuilder b;
  b.input("x", {1, 8, 6, 6});
  b.input("idx", {1});
  b.g.values["idx"].type = ElemType::i64;
  b.g.inputs.back().type = ElemType::i64;
  b.weight("w", {8, 8, 1, 1});
  b.weight("table", {4, 8});
  Initializer shape;
  shape.name = "shape";
  shape.type = ElemType::i64;
  shape.shape = {4};
  shape.i64 = {1, 8, 1, 1};
  b.g.initializers["shape"] = shape;
  b.value("shape", {4});
  std::size_t conv = b.node("Conv", {"x", "w"}, "c", {1, 8, 6, 6}, {{"kernel_shape", ints({1, 1})}});
  std::size_t gather = b.node("Gather", {"table", "idx"}, "g", {1, 8});
  std::size_t reshape = b.node("Reshape", {"g", "shape"}, "gs", {1, 8, 1, 1});
  std::size_t mul = b.node("Mul", {"c", "gs"}, "y", {1, 8, 6, 6});
  b.output("y");

  Plan plan;
  plan.block = 8;
  add_task(plan, ops, "conv2d_nchwc", "N=1,C=8,H=6,W=6,K=8,R=1,S=1,block=8", {conv},
           {{"x", ArgLayout::nchwc}, {"w", ArgLayout::conv_weight}, {"c", ArgLayout::nchwc}}, "Conv");
  for (std::size_t n : {gather, reshape, mul}) add_portable(plan, n);
  CompiledKernels kernels(2);
  Runner runner(b.g, plan, kernels);
  Plan reference = portable_plan(b.g);
  CompiledKernels none(1);
  Runner portable(b.g, reference, none);

  std::map<std::string, Tensor> bad = {{"x", random_input({1, 8, 6, 6}, 4)}, {"idx", Tensor::ints({1}, {9})}};
  CHECK_THROWS_WITH(runner.run(bad), Catch::Contains("Gather") && Catch::Contains("out of range"));
  std::map<std::string, Tensor> good = {{"x", random_input({1, 8, 6, 6}, 4)}, {"idx", Tensor::ints({1}, {2})}};
  CHECK(relative_error(runner.run(good).at("y"), portable.run(good).at("y")) < 1e-4);
}

namespace {

// The conv+relu+pool+gemm graph of the first test, as its plan says.
struct SmallModel {
  ops::Registry ops = ops::builtin_ops();
  GraphBuilder b;
  Plan plan;
  SmallModel() {
    b.input("x", {1, 5, 10, 10});
    b.weight("w", {16, 5, 3, 3});
    b.weight("bias", {16});
    b.weight("fc_w", {10, 16});
    b.weight("fc_b", {10});
    std::size_t conv = b.node("Conv", {"x", "w", "bias"}, "c", {1, 16, 10, 10},
                              {{"pads", ints({1, 1, 1, 1})}, {"kernel_shape", ints({3, 3})}});
    std::size_t relu = b.node("Relu", {"c"}, "r", {1, 16, 10, 10});
    std::size_t gap = b.node("GlobalAveragePool", {"r"}, "g", {1, 16, 1, 1});
    std::size_t flat = b.node("Flatten", {"g"}, "f", {1, 16});
    std::size_t gemm = b.node("Gemm", {"f", "fc_w", "fc_b"}, "y", {1, 10}, {{"transB", one(1)}});
    b.output("y");
    plan.block = 8;
    add_task(plan, ops, "conv2d_nchwc", "N=1,C=5,H=10,W=10,K=16,R=3,S=3,pad=1,block=8,bias=1,act=1", {conv, relu},
             {{"x", ArgLayout::nchwc}, {"w", ArgLayout::conv_weight}, {"bias", ArgLayout::channel_vector},
              {"r", ArgLayout::nchwc}},
             "Conv+Relu");
    add_portable(plan, gap);
    add_portable(plan, flat);
    add_portable(plan, gemm);
  }
};


}  // namespace

TEST_CASE("model: a lowered program saved and loaded runs as the runner runs the plan", "[model]") {
  SmallModel m;
  CompiledKernels kernels(2);
  Runner runner(m.b.g, m.plan, kernels);
  const Program& program = runner.program();
  // Lowered: the weights the conv reads packed (w, bias), the ones portable Gemm reads plain.
  CHECK(program.packed.size() == 2);
  CHECK(program.constants.size() == 2);
  REQUIRE(program.steps.size() == 4);
  CHECK(program.steps[0].task);
  CHECK(program.steps[0].op == "conv2d_nchwc");
  CHECK(program.steps[0].args.back().layout == ArgLayout::nchwc);

  char dir_template[] = "/tmp/kestrel-program-XXXXXX";
  REQUIRE(::mkdtemp(dir_template));
  const std::string dir = dir_template;
  const std::string path = dir + "/model.kprog";
  save_program(program, path);
  auto loaded = std::make_shared<const Program>(load_program(path));
  // The same program: written again, the same bytes.
  save_program(*loaded, dir + "/again.kprog");
  CHECK(test::file_bytes(path) == test::file_bytes(dir + "/again.kprog"));

  // Run from the file with the same kernels: the same outputs as the runner's.
  std::vector<BoundKernel> bound(loaded->steps.size());
  bound[0] = kernels.bind(m.plan.tasks[0], m.plan.tasks[0].params);
  ProgramRunner from_file(loaded, bound, kernels.services(), [](std::int32_t code) { return std::to_string(code); });
  const std::map<std::string, Tensor> in = {{"x", random_input({1, 5, 10, 10}, 5)}};
  CHECK(from_file.run(in).at("y").f32 == runner.run(in).at("y").f32);
  CHECK(from_file.step_times().size() == 4);
  // Steps are timed only when asked.
  for (const auto& t : from_file.step_times()) CHECK(t.seconds == 0);
  from_file.time_steps(true);
  from_file.run(in);
  double timed = 0;
  for (const auto& t : from_file.step_times()) timed += t.seconds;
  CHECK(timed > 0);

  // A task step without a kernel is refused before any run.
  CHECK_THROWS_WITH(ProgramRunner(loaded, std::vector<BoundKernel>(loaded->steps.size()), nullptr, {}),
                    Catch::Contains("no kernel") && Catch::Contains("conv2d_nchwc"));

  // Bad files: each a ModelError naming the file and what is wrong.
  const std::string good = test::file_bytes(path);
  const std::string bad = dir + "/bad.kprog";
  test::write_bytes(bad, good.substr(0, good.size() / 2));
  CHECK_THROWS_WITH(load_program(bad), Catch::Contains(bad) && Catch::Contains("corrupt"));
  std::string flipped = good;
  flipped[flipped.size() / 2] ^= 0x10;
  test::write_bytes(bad, flipped);
  CHECK_THROWS_WITH(load_program(bad), Catch::Contains("checksum"));
  test::write_bytes(bad, "PK\x03\x04 not a program");
  CHECK_THROWS_WITH(load_program(bad), Catch::Contains("not a Kestrel model program"));
  std::string future = good;
  future[8] = 9;  // the format version
  test::write_bytes(bad, future);
  CHECK_THROWS_WITH(load_program(bad), Catch::Contains("format 9") && Catch::Contains("reads format 2"));
  CHECK_THROWS_WITH(load_program(dir + "/missing.kprog"), Catch::Contains("missing.kprog"));
  // Consistent checksum, inconsistent contents (a step reading a value that does not exist).
  Program broken = *loaded;
  broken.steps[1].nodes = {99};
  save_program(broken, bad);
  CHECK_THROWS_WITH(load_program(bad), Catch::Contains("corrupt") && Catch::Contains("names no node"));
  // Argument layouts: the last the format knows loads, one past it is corrupt.
  Program layouts = *loaded;
  layouts.steps[0].args[0].layout = ArgLayout::gemm_panels_transposed;
  save_program(layouts, bad);
  CHECK(load_program(bad).steps[0].args[0].layout == ArgLayout::gemm_panels_transposed);
  layouts.steps[0].args[0].layout = static_cast<ArgLayout>(static_cast<int>(ArgLayout::gemm_panels_transposed) + 1);
  save_program(layouts, bad);
  CHECK_THROWS_WITH(load_program(bad), Catch::Contains("corrupt") && Catch::Contains("unknown argument layout"));
  // A folder that cannot be written: the error names it, no partial file is left.
  CHECK_THROWS_WITH(save_program(program, dir + "/no/such/dir/model.kprog"), Catch::Contains("cannot write"));
  std::filesystem::remove_all(dir);
}
