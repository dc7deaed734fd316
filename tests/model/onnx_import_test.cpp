// Model import: ONNX models built in C++ (onnx_builder.h), read back with Model::load,
// their shapes inferred, symbols bound, Constant nodes and initializers converted,
// BatchNormalization folded, and the errors a user meets.
#include <catch2/catch.hpp>

#include <cmath>

#include "support/errors.h"
#include "kestrel/model/graph.h"
#include "model/onnx_builder.h"
#include "support/process.h"

using kestrel::model::Dim;
using kestrel::model::ElemType;
using kestrel::model::Model;
using kestrel::model::ModelError;
using kestrel::test::OnnxBuilder;
using kestrel::test::TempDir;
using Catch::Matchers::Contains;

namespace {

Model load(const OnnxBuilder& builder, const TempDir& dir, const std::string& name = "m.onnx") {
  builder.save(dir.file(name));
  return Model::load(dir.file(name));
}

OnnxBuilder conv_model() {
  OnnxBuilder b;
  b.input("x", {1, 8, 16, 16}).output("y");
  b.weight("w", {16, 8, 3, 3}).weight("b", {16});
  b.node("Conv", {"x", "w", "b"}, {"c"}).ints("pads", {1, 1, 1, 1}).ints("kernel_shape", {3, 3});
  b.node("Relu", {"c"}, {"y"});
  return b;
}

const auto error_of = &kestrel::test::error_message<ModelError>;

}  // namespace

TEST_CASE("import reads nodes, initializers and inferred shapes of a conv model") {
  TempDir dir;
  Model model = load(conv_model(), dir);
  const auto& g = model.graph();
  CHECK(g.opset == 17);
  REQUIRE(g.nodes.size() == 2);
  CHECK(g.nodes[0].op_type == "Conv");
  CHECK(g.nodes[0].attr_ints("pads") == std::vector<std::int64_t>{1, 1, 1, 1});
  CHECK(g.nodes[0].attr_int("group", 1) == 1);
  REQUIRE(g.inputs.size() == 1);
  CHECK(g.inputs[0].name == "x");
  REQUIRE(g.initializer("w"));
  CHECK(g.initializer("w")->shape == std::vector<std::int64_t>{16, 8, 3, 3});
  CHECK(g.initializer("w")->f32.size() == 16 * 8 * 9);
  const auto* c = g.value("c");
  REQUIRE(c);
  REQUIRE(c->shape);
  CHECK(kestrel::model::to_string(*c->shape) == "[1,16,16,16]");
  CHECK(kestrel::model::to_string(*g.value("y")->shape) == "[1,16,16,16]");
  CHECK(g.symbols().empty());
  // No symbols: bind({}) gives the same shapes.
  auto bound = model.bind({});
  CHECK(kestrel::model::to_string(*bound.value("y")->shape) == "[1,16,16,16]");
}

TEST_CASE("import reads raw and typed initializer data, f32 and int64, and turns Constant nodes into initializers") {
  TempDir dir;
  OnnxBuilder b;
  b.input("x", {2, 3}).output("y").output("z");
  b.weight("raw", {3}, {1.5f, -2.0f, 3.25f}).weight("typed", {3}, {4.0f, 5.0f, 6.0f}, true);
  b.ints("shape_raw", {3, 2}).ints("shape_typed", {6}, true);
  auto* constant = b.node("Constant", {}, {"k"}).proto();
  auto* attr = constant->add_attribute();
  attr->set_name("value");
  attr->set_type(onnx::AttributeProto::TENSOR);
  attr->mutable_t()->set_data_type(onnx::TensorProto::FLOAT);
  attr->mutable_t()->add_dims(1);
  attr->mutable_t()->add_float_data(0.5f);
  b.node("Add", {"x", "raw"}, {"a"});
  b.node("Mul", {"a", "typed"}, {"m"});
  b.node("Mul", {"m", "k"}, {"n"});
  b.node("Reshape", {"n", "shape_raw"}, {"y"});
  b.node("Reshape", {"n", "shape_typed"}, {"z"});
  Model model = load(b, dir);
  const auto& g = model.graph();
  CHECK(g.initializer("raw")->f32 == std::vector<float>{1.5f, -2.0f, 3.25f});
  CHECK(g.initializer("typed")->f32 == std::vector<float>{4.0f, 5.0f, 6.0f});
  CHECK(g.initializer("shape_raw")->type == ElemType::i64);
  CHECK(g.initializer("shape_raw")->i64 == std::vector<std::int64_t>{3, 2});
  CHECK(g.initializer("shape_typed")->i64 == std::vector<std::int64_t>{6});
  REQUIRE(g.initializer("k"));
  CHECK(g.initializer("k")->f32 == std::vector<float>{0.5f});
  // The Constant node itself is gone from the nodes.
  CHECK(g.nodes.size() == 5);
  for (const auto& node : g.nodes) CHECK(node.op_type != "Constant");
  CHECK(kestrel::model::to_string(*g.value("y")->shape) == "[3,2]");
  CHECK(kestrel::model::to_string(*g.value("z")->shape) == "[6]");
}

TEST_CASE("import keeps a symbolic dimension and bind() makes every shape concrete") {
  TempDir dir;
  OnnxBuilder b;
  b.input("x", {1, "seq", 16}).output("y");
  b.weight("w", {16, 32});
  b.node("MatMul", {"x", "w"}, {"h"});
  b.node("Softmax", {"h"}, {"y"}).i("axis", -1);
  Model model = load(b, dir);
  const auto& g = model.graph();
  CHECK(g.symbols() == std::vector<std::string>{"seq"});
  CHECK(kestrel::model::to_string(*g.value("h")->shape) == "[1,seq,32]");
  auto bound = model.bind({{"seq", 50}});
  CHECK(kestrel::model::to_string(*bound.value("h")->shape) == "[1,50,32]");
  CHECK(kestrel::model::to_string(*bound.value("y")->shape) == "[1,50,32]");
  CHECK(kestrel::model::to_string(*bound.inputs[0].shape) == "[1,50,16]");
  CHECK_THAT(error_of([&] { model.bind({}); }), Contains("no value for the symbolic dimension 'seq'"));
  CHECK_THAT(error_of([&] { model.bind({{"seq", 8}, {"batch", 2}}); }),
             Contains("has no symbolic dimension 'batch'") && Contains("it has seq"));
  CHECK_THAT(error_of([&] { model.bind({{"seq", 0}}); }), Contains("seq=0 must be at least 1"));
}

TEST_CASE("import folds a BatchNormalization after a Conv into new weight and bias initializers") {
  TempDir dir;
  OnnxBuilder b;
  b.input("x", {1, 4, 5, 5}).output("y");
  b.weight("w", {2, 4, 1, 1}, {1, 1, 1, 1, 2, 2, 2, 2});
  b.weight("scale", {2}, {2.0f, 0.5f}).weight("shift", {2}, {1.0f, -1.0f});
  b.weight("mean", {2}, {0.5f, 1.0f}).weight("var", {2}, {3.0f, 0.0f});
  b.node("Conv", {"x", "w"}, {"c"}, "conv");
  b.node("BatchNormalization", {"c", "scale", "shift", "mean", "var"}, {"bn"}, "bn").f("epsilon", 1.0f);
  b.node("Relu", {"bn"}, {"y"});
  Model model = load(b, dir);
  const auto& g = model.graph();
  REQUIRE(g.nodes.size() == 2);
  const auto& conv = g.nodes[0];
  CHECK(conv.op_type == "Conv");
  CHECK(conv.outputs[0] == "bn");
  REQUIRE(conv.inputs.size() == 3);
  const auto* w = g.initializer(conv.inputs[1]);
  const auto* bias = g.initializer(conv.inputs[2]);
  REQUIRE(w);
  REQUIRE(bias);
  CHECK(conv.inputs[1] != "w");
  // channel 0: factor 2/sqrt(3+1) = 1; channel 1: 0.5/sqrt(0+1) = 0.5
  CHECK(w->f32 == std::vector<float>{1, 1, 1, 1, 1, 1, 1, 1});
  CHECK(bias->f32[0] == Approx((0 - 0.5) * 1.0 + 1.0));
  CHECK(bias->f32[1] == Approx((0 - 1.0) * 0.5 - 1.0));
  // The originals are gone (nothing else uses them); the bound graph is folded too.
  CHECK(!g.initializer("w"));
  CHECK(!g.initializer("scale"));
  auto bound = model.bind({});
  CHECK(bound.nodes.size() == 2);
  CHECK(kestrel::model::to_string(*bound.value("bn")->shape) == "[1,2,5,5]");
}

TEST_CASE("import refuses a missing file, garbage, a truncated model, opset 99, a custom domain") {
  TempDir dir;
  CHECK_THAT(error_of([&] { Model::load(dir.file("nope.onnx")); }), Contains("nope.onnx: no such file"));

  { std::ofstream(dir.file("garbage.onnx")) << "this is not a protobuf \x01\x02\xff\xfe at all"; }
  CHECK_THAT(error_of([&] { Model::load(dir.file("garbage.onnx")); }),
             Contains("garbage.onnx: not an ONNX model"));
  { std::ofstream(dir.file("empty.onnx")); }
  CHECK_THAT(error_of([&] { Model::load(dir.file("empty.onnx")); }), Contains("not an ONNX model"));

  const std::string bytes = conv_model().bytes();
  for (std::size_t keep : {bytes.size() / 2, bytes.size() - 3, std::size_t{10}}) {
    { std::ofstream(dir.file("truncated.onnx"), std::ios::binary) << bytes.substr(0, keep); }
    INFO("kept " << keep << " of " << bytes.size() << " bytes");
    CHECK_THAT(error_of([&] { Model::load(dir.file("truncated.onnx")); }), Contains("not an ONNX model"));
  }

  OnnxBuilder future(99);
  future.input("x", {1, 4}).output("y");
  future.node("Relu", {"x"}, {"y"});
  CHECK_THAT(error_of([&] { load(future, dir); }),
             Contains("opset 99 is not supported") && Contains("opsets 11 to 21"));
  OnnxBuilder old(9);
  old.input("x", {1, 4}).output("y");
  old.node("Relu", {"x"}, {"y"});
  CHECK_THAT(error_of([&] { load(old, dir); }), Contains("opset 9 is not supported"));

  OnnxBuilder custom;
  custom.input("x", {1, 4}).output("y");
  custom.node("FusedThing", {"x"}, {"y"}, "fused").domain("com.example");
  CHECK_THAT(error_of([&] { load(custom, dir); }),
             Contains("node 'fused' (FusedThing) is in the domain 'com.example'"));

  OnnxBuilder shapeless;
  shapeless.shapeless_input("x").output("y");
  shapeless.node("Relu", {"x"}, {"y"});
  CHECK_THAT(error_of([&] { load(shapeless, dir); }), Contains("input 'x' has no shape"));
}

TEST_CASE("import refuses weights kept in a too short external file and raw data of the wrong size") {
  TempDir dir;
  OnnxBuilder b = conv_model();
  auto* w = b.proto().mutable_graph()->mutable_initializer(0);
  w->clear_raw_data();
  w->set_data_location(onnx::TensorProto::EXTERNAL);
  auto* entry = w->add_external_data();
  entry->set_key("location");
  entry->set_value("weights.bin");
  { std::ofstream(dir.file("weights.bin")) << std::string(16 * 8 * 9 * 4 - 4, '\0'); }
  CHECK_THAT(error_of([&] { load(b, dir); }), Contains("initializer 'w'") && Contains("'weights.bin'") &&
                                                  Contains("truncated"));

  OnnxBuilder short_raw = conv_model();
  short_raw.proto().mutable_graph()->mutable_initializer(1)->set_raw_data(std::string(12, '\0'));
  std::string message = error_of([&] { load(short_raw, dir); });
  CHECK_THAT(message, Contains("m.onnx") && Contains("12 bytes of raw data, expected"));
}

TEST_CASE("import: bind() folds shape computations (Shape, Gather, Unsqueeze, Concat) that feed a Reshape") {
  TempDir dir;
  OnnxBuilder b(13);
  b.input("x", {1, "seq", 32}).output("y");
  b.weight("w", {32, 32});
  auto* one = b.proto().mutable_graph()->add_initializer();  // a scalar index
  one->set_name("one");
  one->set_data_type(onnx::TensorProto::INT64);
  one->add_int64_data(1);
  b.ints("zero", {0}).ints("batch", {1}).ints("heads", {4, 8});
  b.node("Shape", {"x"}, {"s"});
  b.node("Gather", {"s", "one"}, {"g"}).i("axis", 0);
  b.node("Unsqueeze", {"g", "zero"}, {"gu"});
  b.node("Concat", {"batch", "gu", "heads"}, {"shape"}).i("axis", 0);
  b.node("MatMul", {"x", "w"}, {"q"});
  b.node("Reshape", {"q", "shape"}, {"y"});
  Model model = load(b, dir);
  CHECK(model.graph().nodes.size() == 6);
  auto bound = model.bind({{"seq", 10}});
  REQUIRE(bound.nodes.size() == 2);
  CHECK(bound.nodes[0].op_type == "MatMul");
  CHECK(bound.nodes[1].op_type == "Reshape");
  REQUIRE(bound.initializer("shape"));
  CHECK(bound.initializer("shape")->i64 == std::vector<std::int64_t>{1, 10, 4, 8});
  CHECK(kestrel::model::to_string(*bound.value("y")->shape) == "[1,10,4,8]");
}

TEST_CASE("import: bind() names a value whose shape stays unknown") {
  TempDir dir;
  OnnxBuilder b;
  b.input("x", {2, 6}).output("y");
  auto* shape = b.proto().mutable_graph()->add_input();  // a run-time shape: unknowable
  shape->set_name("shape");
  shape->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::INT64);
  shape->mutable_type()->mutable_tensor_type()->mutable_shape()->add_dim()->set_dim_value(2);
  b.node("Reshape", {"x", "shape"}, {"y"}, "reshape");
  Model model = load(b, dir);
  CHECK_THAT(error_of([&] { model.bind({}); }),
             Contains("cannot tell the shape of 'y' (output of Reshape node 'reshape')"));
}
