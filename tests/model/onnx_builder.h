// Test support: small ONNX models built in C++ with ONNX's protobuf API, written to a
// file for Model::load (no Python, no downloads).
#pragma once

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <fstream>
#include <initializer_list>
#include <random>
#include <string>
#include <variant>
#include <vector>

namespace kestrel::test {

// One dimension of an input: a size or a symbol ("seq").
struct DimSpec {
  DimSpec(std::int64_t v) : value(v) {}  // NOLINT: implicit on purpose
  DimSpec(const char* s) : symbol(s) {}  // NOLINT
  std::int64_t value = -1;
  std::string symbol;
};

// A node under construction: attributes by chaining.
class NodeRef {
 public:
  explicit NodeRef(onnx::NodeProto* node) : node_(node) {}
  NodeRef& i(const std::string& name, std::int64_t v) {
    auto* a = add(name, onnx::AttributeProto::INT);
    a->set_i(v);
    return *this;
  }
  NodeRef& f(const std::string& name, float v) {
    auto* a = add(name, onnx::AttributeProto::FLOAT);
    a->set_f(v);
    return *this;
  }
  NodeRef& s(const std::string& name, const std::string& v) {
    auto* a = add(name, onnx::AttributeProto::STRING);
    a->set_s(v);
    return *this;
  }
  NodeRef& ints(const std::string& name, std::vector<std::int64_t> v) {
    auto* a = add(name, onnx::AttributeProto::INTS);
    for (auto x : v) a->add_ints(x);
    return *this;
  }
  NodeRef& domain(const std::string& d) {
    node_->set_domain(d);
    return *this;
  }
  onnx::NodeProto* proto() { return node_; }

 private:
  onnx::AttributeProto* add(const std::string& name, onnx::AttributeProto::AttributeType type) {
    auto* a = node_->add_attribute();
    a->set_name(name);
    a->set_type(type);
    return a;
  }
  onnx::NodeProto* node_;
};

class OnnxBuilder {
 public:
  explicit OnnxBuilder(std::int64_t opset = 17) {
    model_.set_ir_version(8);
    model_.set_producer_name("kestrel-tests");
    auto* import = model_.add_opset_import();
    import->set_domain("");
    import->set_version(opset);
    model_.mutable_graph()->set_name("test");
  }

  OnnxBuilder& input(const std::string& name, std::vector<DimSpec> dims) {
    auto* info = model_.mutable_graph()->add_input();
    info->set_name(name);
    auto* tensor = info->mutable_type()->mutable_tensor_type();
    tensor->set_elem_type(onnx::TensorProto::FLOAT);
    auto* shape = tensor->mutable_shape();
    for (const auto& d : dims) {
      auto* dim = shape->add_dim();
      if (d.symbol.empty()) {
        dim->set_dim_value(d.value);
      } else {
        dim->set_dim_param(d.symbol);
      }
    }
    return *this;
  }

  // An input with a type but no shape.
  OnnxBuilder& shapeless_input(const std::string& name) {
    auto* info = model_.mutable_graph()->add_input();
    info->set_name(name);
    info->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
    return *this;
  }

  OnnxBuilder& output(const std::string& name) {
    auto* info = model_.mutable_graph()->add_output();
    info->set_name(name);
    info->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
    return *this;
  }

  // An f32 initializer: `values` when given, else seeded random values in [-1, 1].
  // raw_data unless `typed`.
  OnnxBuilder& weight(const std::string& name, std::vector<std::int64_t> dims, std::vector<float> values = {},
                      bool typed = false) {
    std::int64_t n = 1;
    for (auto d : dims) n *= d;
    if (values.empty()) {
      std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
      for (std::int64_t i = 0; i < n; ++i) values.push_back(dist(rng_));
    }
    auto* t = model_.mutable_graph()->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::FLOAT);
    for (auto d : dims) t->add_dims(d);
    if (typed) {
      for (float v : values) t->add_float_data(v);
    } else {
      t->set_raw_data(std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float)));
    }
    return *this;
  }

  OnnxBuilder& scalar(const std::string& name, float value) { return weight(name, {}, {value}); }

  OnnxBuilder& ints(const std::string& name, std::vector<std::int64_t> values, bool typed = false) {
    auto* t = model_.mutable_graph()->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::INT64);
    t->add_dims(static_cast<std::int64_t>(values.size()));
    if (typed) {
      for (auto v : values) t->add_int64_data(v);
    } else {
      t->set_raw_data(
          std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(std::int64_t)));
    }
    return *this;
  }

  NodeRef node(const std::string& op, std::vector<std::string> inputs, std::vector<std::string> outputs,
               const std::string& name = "") {
    auto* n = model_.mutable_graph()->add_node();
    n->set_op_type(op);
    n->set_name(name.empty() ? op + "_" + std::to_string(model_.graph().node_size() - 1) : name);
    for (const auto& i : inputs) n->add_input(i);
    for (const auto& o : outputs) n->add_output(o);
    return NodeRef(n);
  }

  onnx::ModelProto& proto() { return model_; }
  std::string bytes() const { return model_.SerializeAsString(); }

  void save(const std::string& path) const {
    std::ofstream out(path, std::ios::binary);
    out << bytes();
  }

 private:
  onnx::ModelProto model_;
  std::mt19937 rng_{42};
};

// A small model the export and zero-shot e2e tests share: x [1, seq, 16] -> MatMul + Add +
// Relu (a gemm with M = seq) -> Softmax.
inline OnnxBuilder gemm_softmax_model() {
  OnnxBuilder b;
  b.input("x", {1, "seq", 16}).output("y");
  b.weight("w", {16, 24}).weight("bias", {24});
  b.node("MatMul", {"x", "w"}, {"m"});
  b.node("Add", {"m", "bias"}, {"a"});
  b.node("Relu", {"a"}, {"r"});
  b.node("Softmax", {"r"}, {"y"}).i("axis", -1);
  return b;
}

}  // namespace kestrel::test
