// The importer: reads a model with ONNX's protobuf schema (libonnx), checks what Kestrel
// reads (opset, IR version, domains, element types, input shapes), reads weights kept in
// an external file (external_data.h), rewrites opset 18 to 21 nodes into opset 17 for
// libonnx 1.12 (opset_upgrade.h), infers shapes with ONNX's shape inference and converts
// the result into the plain structs of graph.h. Constant nodes
// become initializers, layout nodes over constants are folded into initializers
// (fold_constants.h), a spatial ReduceMean becomes GlobalAveragePool and torch's tanh GELU
// one Gelu node (canonical_ops.h)
// and a BatchNormalization after a Conv is folded (fold_batchnorm.h).
#include <onnx/checker.h>
#include <onnx/defs/schema.h>
#include <onnx/onnx_pb.h>
#include <onnx/shape_inference/implementation.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <stdexcept>

#include "fold_batchnorm.h"
#include "canonical_ops.h"
#include "external_data.h"
#include "fold_constants.h"
#include "opset_upgrade.h"
#include "fold_shapes.h"
#include "kestrel/model/graph.h"

namespace kestrel::model {

namespace {

std::string describe(const onnx::NodeProto& node) {
  return "node '" + node.name() + "' (" + node.op_type() + ")";
}

std::int64_t product(const std::vector<std::int64_t>& dims) {
  std::int64_t n = 1;
  for (auto d : dims) n *= d;
  return n;
}

ElemType elem_type(int type) {
  switch (type) {
    case onnx::TensorProto::FLOAT: return ElemType::f32;
    case onnx::TensorProto::INT64: return ElemType::i64;
    case onnx::TensorProto::INT32: return ElemType::i32;
    default: return ElemType::other;
  }
}

template <typename T>
std::vector<T> raw_values(const std::string& raw, std::int64_t count, const std::string& what) {
  if (raw.size() != static_cast<std::size_t>(count) * sizeof(T)) {
    throw ModelError(what + " has " + std::to_string(raw.size()) + " bytes of raw data, expected " +
                     std::to_string(count * static_cast<std::int64_t>(sizeof(T))) + " for " + std::to_string(count) +
                     " elements");
  }
  std::vector<T> out(static_cast<std::size_t>(count));
  if (count) std::memcpy(out.data(), raw.data(), raw.size());
  return out;
}

// A TensorProto (initializer or Constant value) as an Initializer. `what` names it for
// messages ("model.onnx: initializer 'w'").
Initializer convert_tensor(const onnx::TensorProto& tensor, const std::string& name, const std::string& what) {
  // load_external_data (external_data.h) has read every external tensor into the model.
  if (tensor.data_location() == onnx::TensorProto::EXTERNAL) {
    throw std::logic_error(what + " still names external data after load_external_data");
  }
  Initializer out;
  out.name = name;
  out.type = elem_type(tensor.data_type());
  out.shape.assign(tensor.dims().begin(), tensor.dims().end());
  for (auto d : out.shape) {
    if (d < 0) throw ModelError(what + " has a negative dimension");
  }
  const std::int64_t count = product(out.shape);
  auto check_count = [&](std::int64_t have) {
    if (have != count) {
      throw ModelError(what + " has " + std::to_string(have) + " values, expected " + std::to_string(count) +
                       " for its shape");
    }
  };
  switch (tensor.data_type()) {
    case onnx::TensorProto::FLOAT:
      if (tensor.has_raw_data()) {
        out.f32 = raw_values<float>(tensor.raw_data(), count, what);
      } else {
        check_count(tensor.float_data_size());
        out.f32.assign(tensor.float_data().begin(), tensor.float_data().end());
      }
      break;
    case onnx::TensorProto::DOUBLE:
      // Widened constants (a scale written as a double): Kestrel computes in fp32.
      out.type = ElemType::f32;
      if (tensor.has_raw_data()) {
        for (double v : raw_values<double>(tensor.raw_data(), count, what)) out.f32.push_back(static_cast<float>(v));
      } else {
        check_count(tensor.double_data_size());
        for (double v : tensor.double_data()) out.f32.push_back(static_cast<float>(v));
      }
      break;
    case onnx::TensorProto::INT64:
      if (tensor.has_raw_data()) {
        out.i64 = raw_values<std::int64_t>(tensor.raw_data(), count, what);
      } else {
        check_count(tensor.int64_data_size());
        out.i64.assign(tensor.int64_data().begin(), tensor.int64_data().end());
      }
      break;
    case onnx::TensorProto::INT32:
      if (tensor.has_raw_data()) {
        for (std::int32_t v : raw_values<std::int32_t>(tensor.raw_data(), count, what)) out.i64.push_back(v);
      } else {
        check_count(tensor.int32_data_size());
        out.i64.assign(tensor.int32_data().begin(), tensor.int32_data().end());
      }
      break;
    case onnx::TensorProto::BOOL:
      // Masks and flags (the dynamo exporter writes bool constants): as i64 0/1, the type
      // staying `other`, as the runtime holds booleans.
      if (tensor.has_raw_data()) {
        for (std::uint8_t v : raw_values<std::uint8_t>(tensor.raw_data(), count, what)) out.i64.push_back(v != 0);
      } else {
        check_count(tensor.int32_data_size());
        for (std::int32_t v : tensor.int32_data()) out.i64.push_back(v != 0);
      }
      break;
    default:
      break;  // other element types (fp16, int8, ...) are kept without data
  }
  return out;
}

// The shape of a value's type; none when the type carries no shape. A dimension with
// neither a value nor a name gets an empty symbol (unknown).
std::optional<Shape> shape_of(const onnx::TypeProto& type) {
  if (!type.has_tensor_type() || !type.tensor_type().has_shape()) return std::nullopt;
  Shape shape;
  for (const auto& dim : type.tensor_type().shape().dim()) {
    Dim d;
    if (dim.has_dim_value()) {
      d.value = dim.dim_value();
    } else if (dim.has_dim_param()) {
      d.symbol = dim.dim_param();
    }
    shape.push_back(d);
  }
  return shape;
}

ValueInfo convert_value(const onnx::ValueInfoProto& info) {
  ValueInfo out;
  out.name = info.name();
  out.type = info.type().has_tensor_type() ? elem_type(info.type().tensor_type().elem_type()) : ElemType::other;
  out.shape = shape_of(info.type());
  return out;
}

Attribute convert_attribute(const onnx::AttributeProto& attr, const std::string& what) {
  Attribute out;
  switch (attr.type()) {
    case onnx::AttributeProto::INT: out.i = attr.i(); break;
    case onnx::AttributeProto::FLOAT: out.f = attr.f(); break;
    case onnx::AttributeProto::STRING: out.s = attr.s(); break;
    case onnx::AttributeProto::INTS: out.ints.assign(attr.ints().begin(), attr.ints().end()); break;
    case onnx::AttributeProto::FLOATS: out.floats.assign(attr.floats().begin(), attr.floats().end()); break;
    case onnx::AttributeProto::TENSOR: out.t = convert_tensor(attr.t(), "", what + " attribute " + attr.name()); break;
    default: break;  // graphs, sparse tensors, type protos: no op Kestrel plans reads them
  }
  return out;
}

// A Constant node's value as an initializer named after its output.
Initializer constant_value(const onnx::NodeProto& node, const std::string& what) {
  if (node.output_size() != 1 || node.attribute_size() != 1) {
    throw ModelError(what + " must have one output and one value attribute");
  }
  const auto& attr = node.attribute(0);
  const std::string& name = node.output(0);
  Initializer out;
  out.name = name;
  if (attr.name() == "value") {
    out = convert_tensor(attr.t(), name, what);
  } else if (attr.name() == "value_float") {
    out.f32 = {attr.f()};
  } else if (attr.name() == "value_floats") {
    out.f32.assign(attr.floats().begin(), attr.floats().end());
    out.shape = {static_cast<std::int64_t>(out.f32.size())};
  } else if (attr.name() == "value_int") {
    out.type = ElemType::i64;
    out.i64 = {attr.i()};
  } else if (attr.name() == "value_ints") {
    out.type = ElemType::i64;
    out.i64.assign(attr.ints().begin(), attr.ints().end());
    out.shape = {static_cast<std::int64_t>(out.i64.size())};
  } else {
    throw ModelError(what + " has a " + attr.name() + " value, which Kestrel does not read (numeric tensors only)");
  }
  return out;
}

std::string opset_range() {
  return "Kestrel reads opsets " + std::to_string(kMinOpset) + " to " + std::to_string(kNewestOpset);
}

// Checks what Kestrel reads before ONNX's checker (whose messages are less direct): the
// IR version, the default domain's opset, every node's domain, the element types. Then
// makes the model one that libonnx 1.12 reads (IR 8, opset 17): external data read in,
// opset 18 to 21 nodes rewritten (opset_upgrade.h), the IR version set to 8. Returns the
// default domain's opset as written.
std::int64_t check_supported(onnx::ModelProto& proto, const std::string& path) {
  if (proto.ir_version() > kNewestIrVersion) {
    throw ModelError(path + ": IR version " + std::to_string(proto.ir_version()) +
                     " is newer than Kestrel reads (up to " + std::to_string(kNewestIrVersion) +
                     "): export it with an older onnx, or set ir_version to " + std::to_string(kNewestIrVersion) +
                     " if it uses no newer IR feature");
  }
  std::optional<std::int64_t> opset;
  for (const auto& import : proto.opset_import()) {
    if (import.domain().empty() || import.domain() == "ai.onnx") opset = import.version();
  }
  if (!opset) throw ModelError(path + ": the model imports no opset of the ONNX domain (" + opset_range() + ")");
  if (*opset < kMinOpset || *opset > kNewestOpset) {
    throw ModelError(path + ": opset " + std::to_string(*opset) + " is not supported: " + opset_range() + " (" +
                     std::to_string(kLibOpset + 1) + " to " + std::to_string(kNewestOpset) + " rewritten into opset " +
                     std::to_string(kLibOpset) + "; convert it with onnx.version_converter.convert_version)");
  }
  for (const auto& node : proto.graph().node()) {
    if (!node.domain().empty() && node.domain() != "ai.onnx") {
      throw ModelError(path + ": " + describe(node) + " is in the domain '" + node.domain() +
                       "': Kestrel reads standard ONNX operators only");
    }
  }
  check_element_types(proto, path);
  load_external_data(proto, path);
  if (*opset > kLibOpset) rewrite_to_opset17(proto, *opset, path);
  if (proto.ir_version() > kLibIrVersion) proto.set_ir_version(kLibIrVersion);
  return *opset;
}

// Graph inputs that are not initializers (IR < 4 lists initializers as inputs too).
std::vector<const onnx::ValueInfoProto*> real_inputs(const onnx::GraphProto& graph) {
  std::set<std::string> constants;
  for (const auto& init : graph.initializer()) constants.insert(init.name());
  std::vector<const onnx::ValueInfoProto*> out;
  for (const auto& input : graph.input()) {
    if (!constants.contains(input.name())) out.push_back(&input);
  }
  return out;
}

void check_inputs(const onnx::GraphProto& graph, const std::string& path) {
  for (const auto* input : real_inputs(graph)) {
    auto shape = shape_of(input->type());
    if (!shape) {
      throw ModelError(path + ": input '" + input->name() +
                       "' has no shape: Kestrel needs every input's rank and sizes (name a varying dimension, "
                       "e.g. 'seq')");
    }
    for (std::size_t i = 0; i < shape->size(); ++i) {
      const Dim& d = (*shape)[i];
      if (d.symbolic() && d.symbol.empty()) {
        throw ModelError(path + ": input '" + input->name() + "' dimension " + std::to_string(i) +
                         " has neither a size nor a name: give it a size or a symbol such as 'seq'");
      }
    }
  }
}

void infer_shapes(onnx::ModelProto& proto, const std::string& path) {
  try {
    onnx::ShapeInferenceOptions options(/*check_type=*/false, /*strict=*/1, /*data_propagation=*/true);
    onnx::shape_inference::InferShapes(proto, onnx::OpSchemaRegistry::Instance(), options);
  } catch (const std::exception& e) {
    throw ModelError(path + ": shape inference failed: " + e.what());
  }
}

Graph convert(const onnx::ModelProto& proto, const std::string& path, std::int64_t opset) {
  const auto& graph = proto.graph();
  Graph out;
  out.path = path;
  out.opset = opset;
  for (const auto& init : graph.initializer()) {
    out.initializers[init.name()] = convert_tensor(init, init.name(), path + ": initializer '" + init.name() + "'");
  }
  for (const auto* input : real_inputs(graph)) {
    out.inputs.push_back(convert_value(*input));
    out.values[input->name()] = out.inputs.back();
  }
  for (const auto& info : graph.value_info()) out.values[info.name()] = convert_value(info);
  for (const auto& output : graph.output()) {
    out.outputs.push_back(convert_value(output));
    out.values[output.name()] = out.outputs.back();
  }
  for (const auto& [name, init] : out.initializers) {
    Shape shape;
    for (auto d : init.shape) shape.push_back(Dim{d, {}});
    out.values[name] = ValueInfo{name, init.type, shape};
  }
  for (int i = 0; i < graph.node_size(); ++i) {
    const auto& proto_node = graph.node(i);
    const std::string what = path + ": " + describe(proto_node);
    if (proto_node.op_type() == "Constant") {
      Initializer value = constant_value(proto_node, what);
      Shape shape;
      for (auto d : value.shape) shape.push_back(Dim{d, {}});
      out.values[value.name] = ValueInfo{value.name, value.type, shape};
      out.initializers[value.name] = std::move(value);
      continue;
    }
    Node node;
    node.name = proto_node.name().empty() ? proto_node.op_type() + "_" + std::to_string(i) : proto_node.name();
    node.op_type = proto_node.op_type();
    node.domain = proto_node.domain() == "ai.onnx" ? "" : proto_node.domain();
    node.inputs.assign(proto_node.input().begin(), proto_node.input().end());
    node.outputs.assign(proto_node.output().begin(), proto_node.output().end());
    for (const auto& attr : proto_node.attribute()) node.attributes[attr.name()] = convert_attribute(attr, what);
    out.nodes.push_back(std::move(node));
  }
  fold_constants(out);
  canonicalize_ops(out);
  fuse_tanh_gelu(out);
  hoist_activations_over_reshapes(out);
  fold_batchnorm(out);
  return out;
}

}  // namespace

struct Model::Impl {
  std::string path;
  std::int64_t opset = 0;
  onnx::ModelProto proto;  // as read (shapes not inferred), for bind()
  Graph graph;
};

Model::Model(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Model::~Model() = default;
Model::Model(Model&&) noexcept = default;
Model& Model::operator=(Model&&) noexcept = default;

Model Model::load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ModelError(path + ": no such file (or it cannot be read)");
  std::stringstream bytes;
  bytes << in.rdbuf();
  auto impl = std::make_unique<Impl>();
  impl->path = path;
  const std::string data = bytes.str();
  if (data.empty() || !impl->proto.ParseFromString(data) || !impl->proto.has_graph() ||
      impl->proto.ir_version() == 0) {
    throw ModelError(path + ": not an ONNX model (the file is corrupt, truncated or of another format)");
  }
  if (impl->proto.opset_import_size() == 0) {
    throw ModelError(path + ": not an ONNX model: it imports no opset (a truncated file?)");
  }
  impl->opset = check_supported(impl->proto, path);
  check_inputs(impl->proto.graph(), path);
  onnx::ModelProto inferred = impl->proto;
  infer_shapes(inferred, path);
  // ONNX's checker after inference. It wants a shape field on every graph output, which
  // models may leave out (ONNX Runtime does not need it): those get an empty one for the
  // check only.
  std::vector<int> shapeless;
  for (int i = 0; i < inferred.graph().output_size(); ++i) {
    auto* type = inferred.mutable_graph()->mutable_output(i)->mutable_type();
    if (type->has_tensor_type() && !type->tensor_type().has_shape()) {
      type->mutable_tensor_type()->mutable_shape();
      shapeless.push_back(i);
    }
  }
  try {
    onnx::checker::check_model(inferred);
  } catch (const std::exception& e) {
    throw ModelError(path + ": not a valid ONNX model: " + e.what());
  }
  for (int i : shapeless) inferred.mutable_graph()->mutable_output(i)->mutable_type()->mutable_tensor_type()->clear_shape();
  impl->graph = convert(inferred, path, impl->opset);
  return Model(std::move(impl));
}

const Graph& Model::graph() const { return impl_->graph; }

Graph Model::bind(const std::map<std::string, std::int64_t>& symbols) const {
  const std::string& path = impl_->path;
  const std::vector<std::string> known = impl_->graph.symbols();
  auto list = [&] {
    std::string text;
    for (const auto& s : known) text += (text.empty() ? "" : ", ") + s;
    return text.empty() ? std::string("it has none") : "it has " + text;
  };
  for (const auto& [name, value] : symbols) {
    if (std::find(known.begin(), known.end(), name) == known.end()) {
      throw ModelError(path + ": the model has no symbolic dimension '" + name + "' (" + list() + ")");
    }
    if (value < 1) {
      throw ModelError(path + ": symbolic dimension " + name + "=" + std::to_string(value) + " must be at least 1");
    }
  }
  for (const auto& name : known) {
    if (!symbols.contains(name)) {
      throw ModelError(path + ": no value for the symbolic dimension '" + name + "' (" + list() + ")");
    }
  }
  onnx::ModelProto proto = impl_->proto;
  auto* graph = proto.mutable_graph();
  std::set<std::string> constants;
  for (const auto& init : graph->initializer()) constants.insert(init.name());
  for (auto& input : *graph->mutable_input()) {
    if (constants.contains(input.name()) || !input.type().has_tensor_type()) continue;
    for (auto& dim : *input.mutable_type()->mutable_tensor_type()->mutable_shape()->mutable_dim()) {
      if (dim.has_dim_param()) dim.set_dim_value(symbols.at(dim.dim_param()));
    }
  }
  // Shapes recorded with symbols are inferred afresh from the bound inputs.
  graph->clear_value_info();
  for (auto& output : *graph->mutable_output()) {
    if (!output.type().has_tensor_type() || !output.type().tensor_type().has_shape()) continue;
    for (auto& dim : *output.mutable_type()->mutable_tensor_type()->mutable_shape()->mutable_dim()) {
      if (dim.has_dim_param()) dim.clear_dim_param();
    }
  }
  std::string binding;
  for (const auto& [name, value] : symbols) binding += (binding.empty() ? " at " : ",") + name + "=" + std::to_string(value);
  // With every input concrete, shape computations (Shape -> ... -> Reshape) are constants.
  fold_shape_computations(proto, [&](onnx::ModelProto& p) { infer_shapes(p, path + binding); });
  Graph out = convert(proto, path, impl_->opset);
  for (const auto& node : out.nodes) {
    for (const auto& name : node.outputs) {
      if (name.empty()) continue;
      const ValueInfo* value = out.value(name);
      bool known_shape = value && value->shape;
      if (known_shape) {
        for (const auto& d : *value->shape) known_shape = known_shape && !d.symbolic();
      }
      if (!known_shape) {
        throw ModelError(path + binding + ": shape inference cannot tell the shape of '" + name + "' (output of " +
                         node.op_type + " node '" + node.name + "')" +
                         (value && value->shape ? ": " + to_string(*value->shape) : std::string()));
      }
    }
  }
  return out;
}

}  // namespace kestrel::model
