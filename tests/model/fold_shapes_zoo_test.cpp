// Folding of shape computations over constants (model/src/fold_shapes.cpp), for the
// chains the legacy torch exporter writes (issue 28, failure class 5 of
// docs/model-zoo.md): one small hand-built model per folded operator, with ONNX's
// semantics (numpy broadcasting), and every legacy transformer of tests/data/zoo/ loaded
// and planned.
#include <catch2/catch.hpp>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "kestrel/model/graph.h"
#include "kestrel/model/tasks.h"
#include "model/onnx_builder.h"
#include "support/process.h"

using kestrel::model::Graph;
using kestrel::model::Model;
using kestrel::model::Plan;
using kestrel::model::PlanOptions;
using kestrel::test::OnnxBuilder;
using kestrel::test::TempDir;

namespace {

using Ints = std::vector<std::int64_t>;

// An initializer of `type` (INT64, INT32 or BOOL) with `dims` and `values`.
void tensor(OnnxBuilder& b, const std::string& name, const Ints& dims, const Ints& values,
            int type = onnx::TensorProto::INT64) {
  auto* t = b.proto().mutable_graph()->add_initializer();
  t->set_name(name);
  t->set_data_type(type);
  for (auto d : dims) t->add_dims(d);
  for (auto v : values) {
    if (type == onnx::TensorProto::INT64) {
      t->add_int64_data(v);
    } else {
      t->add_int32_data(static_cast<std::int32_t>(v));
    }
  }
}

void scalar(OnnxBuilder& b, const std::string& name, std::int64_t v) { tensor(b, name, {}, {v}); }

void bools(OnnxBuilder& b, const std::string& name, const Ints& dims, const Ints& values) {
  tensor(b, name, dims, values, onnx::TensorProto::BOOL);
}

// A ConstantOfShape node (shape from `shape`) whose value is one element of `type`.
void constant_of_shape(OnnxBuilder& b, const std::string& shape, const std::string& out, std::int64_t value,
                       int type = onnx::TensorProto::INT64) {
  auto* a = b.node("ConstantOfShape", {shape}, {out}).proto()->add_attribute();
  a->set_name("value");
  a->set_type(onnx::AttributeProto::TENSOR);
  a->mutable_t()->set_data_type(type);
  a->mutable_t()->add_dims(1);
  if (type == onnx::TensorProto::INT64) {
    a->mutable_t()->add_int64_data(value);
  } else {
    a->mutable_t()->add_int32_data(static_cast<std::int32_t>(value));
  }
}

struct Folded {
  Graph graph;
  Ints dims;
  Ints values;
};

// Gathers rows of a float table at the integer tensor `indices` (output "y"), loads the
// model and binds it: `indices` must have been folded into an initializer, and Gather is
// the one node left.
Folded gather_at(OnnxBuilder& b, const std::string& indices) {
  TempDir dir;
  b.input("x", {1}).output("y");
  b.weight("table", {100, 2});
  b.node("Gather", {"table", indices}, {"y"}).i("axis", 0);
  b.save(dir.file("m.onnx"));
  Graph g = Model::load(dir.file("m.onnx")).bind({});
  Folded out{g, {}, {}};
  REQUIRE(g.nodes.size() == 1);
  CHECK(g.nodes[0].op_type == "Gather");
  const auto* init = g.initializer(indices);
  REQUIRE(init);
  out.dims = init->shape;
  out.values = init->i64;
  return out;
}

std::vector<std::string> op_types(const Graph& g) {
  std::vector<std::string> ops;
  for (const auto& n : g.nodes) ops.push_back(n.op_type);
  return ops;
}

}  // namespace

TEST_CASE("fold shapes: the legacy exporter's expand(1, -1, -1): ConstantOfShape, Mul, Equal, Where into Expand") {
  // Expand(x, Where(Equal(C, ConstantOfShape([3], 1) * -1), ConstantOfShape(...), C)), C = [2, -1, -1]:
  // the -1 entries become 1 (keep the input's size), x [1, 1, 4] -> [2, 1, 4].
  TempDir dir;
  OnnxBuilder b;
  b.input("x", {1, 1, 4}).output("y");
  tensor(b, "c", {3}, {2, -1, -1});
  tensor(b, "three", {1}, {3});
  scalar(b, "minus_one", -1);
  constant_of_shape(b, "three", "ones", 1);
  b.node("Mul", {"ones", "minus_one"}, {"neg"});
  b.node("Equal", {"c", "neg"}, {"eq"});
  b.node("Where", {"eq", "ones", "c"}, {"shape"});
  b.node("Expand", {"x", "shape"}, {"y"});
  b.save(dir.file("m.onnx"));
  Graph g = Model::load(dir.file("m.onnx")).bind({});
  CHECK(op_types(g) == std::vector<std::string>{"Expand"});
  REQUIRE(g.initializer("shape"));
  CHECK(g.initializer("shape")->i64 == Ints{2, 1, 1});
  CHECK(kestrel::model::to_string(*g.value("y")->shape) == "[2,1,4]");
  CHECK(!g.initializer("eq"));  // bool, read by folded nodes only: gone
}

TEST_CASE("fold shapes: ConstantOfShape with an integer value") {
  OnnxBuilder b;
  tensor(b, "s", {2}, {2, 3});
  constant_of_shape(b, "s", "c", 7);
  auto f = gather_at(b, "c");
  CHECK(f.dims == Ints{2, 3});
  CHECK(f.values == Ints{7, 7, 7, 7, 7, 7});
}

TEST_CASE("fold shapes: Equal broadcasts, and its bool result folds through Cast to int64") {
  OnnxBuilder b;
  tensor(b, "a", {2, 1}, {1, 2});
  tensor(b, "b", {3}, {1, 2, 3});
  b.node("Equal", {"a", "b"}, {"eq"});
  b.node("Cast", {"eq"}, {"i"}).i("to", onnx::TensorProto::INT64);
  auto f = gather_at(b, "i");
  CHECK(f.dims == Ints{2, 3});
  CHECK(f.values == Ints{1, 0, 0, 0, 1, 0});
}

TEST_CASE("fold shapes: Where broadcasts condition, X and Y") {
  OnnxBuilder b;
  bools(b, "cond", {3}, {1, 0, 1});
  tensor(b, "then", {2, 1}, {10, 20});
  scalar(b, "else", 5);
  b.node("Where", {"cond", "then", "else"}, {"w"});
  auto f = gather_at(b, "w");
  CHECK(f.dims == Ints{2, 3});
  CHECK(f.values == Ints{10, 5, 10, 20, 5, 20});
}

TEST_CASE("fold shapes: Add, Sub, Mul, Div broadcast (Div truncates)") {
  OnnxBuilder b;
  tensor(b, "a", {2, 1}, {1, -7});
  tensor(b, "b", {3}, {1, 2, 3});
  b.node("Mul", {"a", "b"}, {"mul"});
  b.node("Div", {"a", "b"}, {"div"});
  b.node("Add", {"a", "b"}, {"add"});
  b.node("Sub", {"a", "b"}, {"sub"});
  auto f = gather_at(b, "mul");
  const Graph& g = f.graph;
  CHECK(f.dims == Ints{2, 3});
  CHECK(f.values == Ints{1, 2, 3, -7, -14, -21});
  REQUIRE(g.initializer("div"));
  REQUIRE(g.initializer("add"));
  REQUIRE(g.initializer("sub"));
  CHECK(g.initializer("div")->i64 == Ints{1, 0, 0, -7, -3, -2});
  CHECK(g.initializer("add")->i64 == Ints{2, 3, 4, -6, -5, -4});
  CHECK(g.initializer("sub")->i64 == Ints{0, -1, -2, -8, -9, -10});
}

TEST_CASE("fold shapes: Range counts ceil((limit - start) / delta) elements, none when empty") {
  OnnxBuilder b;
  scalar(b, "zero", 0);
  scalar(b, "seven", 7);
  scalar(b, "three", 3);
  scalar(b, "five", 5);
  scalar(b, "one", 1);
  scalar(b, "minus_two", -2);
  b.node("Range", {"zero", "seven", "three"}, {"up"});
  b.node("Range", {"five", "one", "minus_two"}, {"down"});
  b.node("Range", {"seven", "zero", "three"}, {"none"});
  b.node("Concat", {"up", "down", "none"}, {"r"}).i("axis", 0);
  auto f = gather_at(b, "r");
  CHECK(f.values == Ints{0, 3, 6, 5, 3});
}

TEST_CASE("fold shapes: Expand broadcasts both ways") {
  OnnxBuilder b;
  tensor(b, "a", {2, 1}, {1, 2});
  tensor(b, "s", {3}, {2, 1, 3});
  b.node("Expand", {"a", "s"}, {"e"});
  auto f = gather_at(b, "e");
  CHECK(f.dims == Ints{2, 2, 3});
  CHECK(f.values == Ints{1, 1, 1, 2, 2, 2, 1, 1, 1, 2, 2, 2});
}

TEST_CASE("fold shapes: Shape of a folded constant, with start and end") {
  OnnxBuilder b;
  tensor(b, "s", {3}, {3, 4, 5});
  constant_of_shape(b, "s", "c", 0);
  b.node("Shape", {"c"}, {"all"});
  b.node("Shape", {"c"}, {"tail"}).i("start", 1).i("end", -1);
  b.node("Concat", {"all", "tail"}, {"r"}).i("axis", 0);
  auto f = gather_at(b, "r");
  CHECK(f.values == Ints{3, 4, 5, 4});
}

TEST_CASE("fold shapes: Min and Max over several broadcast inputs") {
  OnnxBuilder b;
  tensor(b, "a", {2, 1}, {3, 9});
  tensor(b, "b", {3}, {5, 2, 7});
  scalar(b, "c", 4);
  b.node("Min", {"a", "b"}, {"min"});
  b.node("Max", {"a", "b", "c"}, {"max"});
  auto f = gather_at(b, "min");
  CHECK(f.dims == Ints{2, 3});
  CHECK(f.values == Ints{3, 2, 3, 5, 2, 7});
  REQUIRE(f.graph.initializer("max"));
  CHECK(f.graph.initializer("max")->shape == Ints{2, 3});
  CHECK(f.graph.initializer("max")->i64 == Ints{5, 4, 7, 9, 9, 9});
}

TEST_CASE("fold shapes: Not, And, Or, Xor of bools") {
  OnnxBuilder b;
  bools(b, "p", {4}, {1, 1, 0, 0});
  bools(b, "q", {4}, {1, 0, 1, 0});
  b.node("Not", {"p"}, {"not"});
  b.node("And", {"p", "q"}, {"and"});
  b.node("Or", {"p", "q"}, {"or"});
  b.node("Xor", {"p", "q"}, {"xor"});
  for (const std::string v : {"not", "and", "or", "xor"}) b.node("Cast", {v}, {v + "_i"}).i("to", onnx::TensorProto::INT64);
  b.node("Concat", {"not_i", "and_i", "or_i", "xor_i"}, {"r"}).i("axis", 0);
  auto f = gather_at(b, "r");
  CHECK(f.values == Ints{0, 0, 1, 1, 1, 0, 0, 0, 1, 1, 1, 0, 0, 1, 1, 0});
}

TEST_CASE("fold shapes: Less, Greater, LessOrEqual, GreaterOrEqual") {
  OnnxBuilder b;
  tensor(b, "a", {3}, {1, 2, 3});
  scalar(b, "two", 2);
  const std::vector<std::string> ops{"Less", "Greater", "LessOrEqual", "GreaterOrEqual"};
  std::vector<std::string> parts;
  for (const auto& op : ops) {
    b.node(op, {"a", "two"}, {op});
    b.node("Cast", {op}, {op + "_i"}).i("to", onnx::TensorProto::INT64);
    parts.push_back(op + "_i");
  }
  b.node("Concat", parts, {"r"}).i("axis", 0);
  auto f = gather_at(b, "r");
  CHECK(f.values == Ints{1, 0, 0, 0, 0, 1, 1, 1, 0, 0, 1, 1});
}

TEST_CASE("fold shapes: Cast between int64, bool and int32 (int32 wraps)") {
  OnnxBuilder b;
  tensor(b, "a", {3}, {0, 5, -1});
  tensor(b, "big", {1}, {(std::int64_t{1} << 32) + 3});
  b.node("Cast", {"a"}, {"ab"}).i("to", onnx::TensorProto::BOOL);
  b.node("Cast", {"ab"}, {"ai"}).i("to", onnx::TensorProto::INT64);
  b.node("Cast", {"big"}, {"b32"}).i("to", onnx::TensorProto::INT32);
  b.node("Cast", {"b32"}, {"bi"}).i("to", onnx::TensorProto::INT64);
  b.node("Concat", {"ai", "bi"}, {"r"}).i("axis", 0);
  auto f = gather_at(b, "r");
  CHECK(f.values == Ints{0, 1, 1, 3});
}

TEST_CASE("fold shapes: Reshape of a constant (0 copies a dimension, -1 is inferred)") {
  OnnxBuilder b;
  scalar(b, "zero", 0);
  scalar(b, "six", 6);
  scalar(b, "one", 1);
  tensor(b, "s1", {2}, {2, -1});
  tensor(b, "s2", {3}, {0, 1, -1});
  b.node("Range", {"zero", "six", "one"}, {"r"});
  b.node("Reshape", {"r", "s1"}, {"m"});
  b.node("Reshape", {"m", "s2"}, {"n"});
  auto f = gather_at(b, "n");
  CHECK(f.dims == Ints{2, 1, 3});
  CHECK(f.values == Ints{0, 1, 2, 3, 4, 5});
}

TEST_CASE("fold shapes: nothing over 4096 elements is made; a bool ConstantOfShape becomes int64 + Cast") {
  OnnxBuilder b;
  tensor(b, "s", {2}, {100, 100});
  constant_of_shape(b, "s", "big", 1);
  constant_of_shape(b, "s", "big_bool", 1, onnx::TensorProto::BOOL);
  TempDir dir;
  b.input("x", {100, 100}).output("y").output("z");
  b.weight("table", {2, 2});
  b.node("Gather", {"table", "big"}, {"y"}).i("axis", 0);
  b.node("Where", {"big_bool", "x", "x"}, {"z"});
  b.save(dir.file("m.onnx"));
  Graph g = Model::load(dir.file("m.onnx")).bind({});
  CHECK(op_types(g) == std::vector<std::string>{"ConstantOfShape", "ConstantOfShape", "Cast", "Gather", "Where"});
  CHECK(!g.initializer("big"));
  REQUIRE(g.nodes[1].attributes.at("value").t);
  CHECK(g.nodes[1].attributes.at("value").t->type == kestrel::model::ElemType::i64);
  CHECK(g.nodes[2].outputs == std::vector<std::string>{"big_bool"});
  CHECK(g.nodes[2].inputs == g.nodes[1].outputs);
  CHECK(g.nodes[2].attr_int("to", 0) == onnx::TensorProto::BOOL);
}

TEST_CASE("fold shapes: a bool constant read by a node that stays is an int64 initializer cast to bool") {
  // The importer keeps bool constants without values: the folded mask is kept as int64.
  OnnxBuilder b;
  TempDir dir;
  b.input("x", {2, 3}).output("y");
  tensor(b, "a", {2, 1}, {1, 2});
  tensor(b, "c", {3}, {1, 2, 3});
  b.node("LessOrEqual", {"c", "a"}, {"mask"});
  b.node("Where", {"mask", "x", "x"}, {"y"});
  b.save(dir.file("m.onnx"));
  Graph g = Model::load(dir.file("m.onnx")).bind({});
  REQUIRE(op_types(g) == std::vector<std::string>{"Cast", "Where"});
  CHECK(g.nodes[0].outputs == std::vector<std::string>{"mask"});
  const auto* init = g.initializer(g.nodes[0].inputs.at(0));
  REQUIRE(init);
  CHECK(init->shape == Ints{2, 3});
  CHECK(init->i64 == Ints{1, 0, 0, 1, 1, 0});
}

TEST_CASE("fold shapes: every legacy transformer export of the zoo loads and plans") {
  struct Case {
    std::string file;
    std::map<std::string, std::int64_t> symbols;
    double min_share;
  };
  const std::vector<Case> cases{
      {"vit_tiny.legacy.onnx", {}, 0.99},
      {"bert_tiny.legacy.onnx", {}, 0.98},
      {"bert_tiny_dyn.legacy.onnx", {{"batch", 1}, {"sequence", 16}}, 0.98},
      {"distilbert_tiny.legacy.onnx", {}, 0.98},
      {"gpt2_tiny.legacy.onnx", {}, 0.96},
  };
  for (const auto& c : cases) {
    INFO(c.file);
    Model model = Model::load(std::string(KESTREL_SOURCE_DIR) + "/tests/data/zoo/" + c.file);
    const Graph g = model.bind(c.symbols);
    for (const auto& n : g.nodes) {
      CHECK(n.op_type != "ConstantOfShape");  // every shape chain folded
      CHECK(n.op_type != "Equal");
    }
    PlanOptions options;
    options.block = 16;
    options.symbols = c.symbols;
    const Plan p = kestrel::model::plan_model(model, options);
    double tuned = 0;
    for (const auto& t : p.tasks) tuned += t.flops * t.occurrences;
    CHECK(!p.tasks.empty());
    CHECK(tuned / p.total_flops > c.min_share);
    // The attention's Where(IsNaN(softmax), 0, softmax) guard is the softmax kernel's.
    for (const auto& t : p.tasks) {
      if (t.op_name() != "softmax") continue;
      const bool guarded = t.pattern == "Softmax+IsNaN+Where";
      CHECK(guarded == (t.params.count("nan_zero") == 1));
    }
    for (const auto& u : p.untuned) CHECK(u.op_type != "IsNaN");
  }
}
