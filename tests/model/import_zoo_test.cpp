// Import of real exports, as torch's exporters write them (issue 28, docs/model-zoo.md):
// constant folding of initializer-only layout nodes, IR 9/10 and opsets 18 to 21 read as
// written (rewritten to opset 17 for libonnx), weights in an external data file, and the
// small-tier zoo files of tests/data/zoo/ loaded and planned.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "kestrel/model/graph.h"
#include "kestrel/model/tasks.h"
#include "model/onnx_builder.h"
#include "support/process.h"

using kestrel::model::ElemType;
using kestrel::model::Model;
using kestrel::model::ModelError;
using kestrel::model::Plan;
using kestrel::model::PlanOptions;
using kestrel::test::OnnxBuilder;
using kestrel::test::TempDir;
using Catch::Matchers::Contains;

namespace {

std::string zoo(const std::string& name) { return std::string(KESTREL_SOURCE_DIR) + "/tests/data/zoo/" + name; }

[[maybe_unused]] std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ModelError& e) {
    return e.what();
  }
  return "(no error)";
}

Plan plan_of(const Model& model, std::map<std::string, std::int64_t> symbols = {}) {
  PlanOptions options;
  options.block = 16;
  options.symbols = std::move(symbols);
  return kestrel::model::plan_model(model, options);
}

double tuned_share(const Plan& p) {
  double tuned = 0;
  for (const auto& t : p.tasks) tuned += t.flops * t.occurrences;
  return p.total_flops > 0 ? tuned / p.total_flops : 0;
}

bool untuned_has(const Plan& p, const std::string& op) {
  for (const auto& u : p.untuned) {
    if (u.op_type == op) return true;
  }
  return false;
}

}  // namespace

TEST_CASE("import zoo: Identity, Cast, Reshape, Transpose, Unsqueeze, Squeeze, Flatten, Concat of constants fold") {
  TempDir dir;
  OnnxBuilder b;
  b.input("x", {1, 4, 8, 8}).output("y").output("t").output("c");
  b.weight("w", {4, 4, 3, 3}).weight("zero", {4}, {0, 0, 0, 0});
  b.weight("m", {2, 3}, {1, 2, 3, 4, 5, 6});
  b.ints("shape", {3, 2}).ints("axes0", {0});
  b.node("Identity", {"zero"}, {"bias"});
  b.node("Conv", {"x", "w", "bias"}, {"conv"}).ints("pads", {1, 1, 1, 1}).ints("kernel_shape", {3, 3});
  b.node("Relu", {"conv"}, {"y"});
  // [[1,2,3],[4,5,6]] -> Transpose -> [[1,4],[2,5],[3,6]] -> Unsqueeze 0 -> Squeeze 0 ->
  // Reshape [3,2] -> Flatten axis 0 -> [1,6]; Cast to int64 and back.
  b.node("Transpose", {"m"}, {"mt"}).ints("perm", {1, 0});
  b.node("Unsqueeze", {"mt", "axes0"}, {"mu"});
  b.node("Squeeze", {"mu", "axes0"}, {"ms"});
  b.node("Reshape", {"ms", "shape"}, {"mr"});
  b.node("Flatten", {"mr"}, {"mf"}).i("axis", 0);
  b.node("Cast", {"mf"}, {"mi"}).i("to", onnx::TensorProto::INT64);
  b.node("Cast", {"mi"}, {"mc"}).i("to", onnx::TensorProto::FLOAT);
  b.node("Concat", {"mc", "mf"}, {"cat"}).i("axis", 0);
  b.node("Add", {"x", "x"}, {"c"});
  b.node("Identity", {"cat"}, {"t"});  // a graph output: kept
  b.save(dir.file("m.onnx"));
  Model model = Model::load(dir.file("m.onnx"));
  const auto& g = model.graph();
  std::vector<std::string> ops;
  for (const auto& n : g.nodes) ops.push_back(n.op_type);
  CHECK(ops == std::vector<std::string>{"Conv", "Relu", "Add", "Identity"});
  REQUIRE(g.initializer("bias"));
  CHECK(g.initializer("bias")->f32 == std::vector<float>{0, 0, 0, 0});
  CHECK(!g.initializer("zero"));  // read only by the folded Identity: removed
  REQUIRE(g.initializer("cat"));
  CHECK(g.initializer("cat")->shape == std::vector<std::int64_t>{2, 6});
  CHECK(g.initializer("cat")->f32 == std::vector<float>{1, 4, 2, 5, 3, 6, 1, 4, 2, 5, 3, 6});
  CHECK(!g.initializer("mi"));  // a step of the chain: folded into the next, removed
  // The conv's bias is a constant again: conv + bias + relu is one task, nothing untuned.
  Plan p = plan_of(model);
  CHECK(!untuned_has(p, "Conv"));
  REQUIRE(!p.tasks.empty());
  CHECK(p.tasks[0].pattern == "Conv+Relu");
}

TEST_CASE("import zoo: cnn_bn_tiny.legacy (zero biases through Identity) plans every conv and the Gemm") {
  Model model = Model::load(zoo("cnn_bn_tiny.legacy.onnx"));
  for (const auto& n : model.graph().nodes) CHECK(n.op_type != "Identity");
  Plan p = plan_of(model);
  CHECK(!untuned_has(p, "Conv"));
  CHECK(!untuned_has(p, "Gemm"));
  CHECK(!untuned_has(p, "Identity"));
  CHECK(tuned_share(p) > 0.99);
}
