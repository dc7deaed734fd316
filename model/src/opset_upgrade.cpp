// Opset 18..21 -> 17 and IR 9/10 checks (see opset_upgrade.h). The operator semantics
// are the ONNX specification's (docs/Changelog.md of onnx, versions 18 to 21).
#include "opset_upgrade.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <numbers>
#include <optional>
#include <set>
#include <vector>

#include "kestrel/model/graph.h"

namespace kestrel::model {

namespace {

// Element types after BFLOAT16 (16), which libonnx 1.12 does not know (IR 9 and later).
std::string new_type_name(std::int64_t type) {
  switch (type) {
    case 17: return "float8e4m3fn";
    case 18: return "float8e4m3fnuz";
    case 19: return "float8e5m2";
    case 20: return "float8e5m2fnuz";
    case 21: return "uint4";
    case 22: return "int4";
    case 23: return "float4e2m1";
    default: return "element type " + std::to_string(type);
  }
}

bool new_type(std::int64_t type) { return type > onnx::TensorProto::BFLOAT16; }

[[noreturn]] void refuse_type(const std::string& what, std::int64_t type) {
  throw ModelError(what + " is " + new_type_name(type) +
                   ", a type newer ONNX versions added (IR 9 and later) that Kestrel does not read: Kestrel computes "
                   "in float32 (export without float8/int4 quantization)");
}

void check_type(const onnx::TypeProto& type, const std::string& what) {
  if (type.has_tensor_type() && new_type(type.tensor_type().elem_type())) {
    refuse_type(what, type.tensor_type().elem_type());
  }
}

void check_graph_types(const onnx::GraphProto& graph, const std::string& path) {
  for (const auto& t : graph.initializer()) {
    if (new_type(t.data_type())) refuse_type(path + ": initializer '" + t.name() + "'", t.data_type());
  }
  for (const auto& v : graph.input()) check_type(v.type(), path + ": input '" + v.name() + "'");
  for (const auto& v : graph.output()) check_type(v.type(), path + ": output '" + v.name() + "'");
  for (const auto& v : graph.value_info()) check_type(v.type(), path + ": value '" + v.name() + "'");
  for (const auto& node : graph.node()) {
    const std::string what = path + ": node '" + node.name() + "' (" + node.op_type() + ")";
    for (const auto& attr : node.attribute()) {
      if (attr.has_t() && new_type(attr.t().data_type())) refuse_type(what + " attribute " + attr.name(), attr.t().data_type());
      const bool type_attr = attr.name() == "to" || attr.name() == "output_dtype" || attr.name() == "dtype";
      if (type_attr && attr.type() == onnx::AttributeProto::INT && new_type(attr.i())) {
        refuse_type(what + " attribute " + attr.name(), attr.i());
      }
      if (attr.has_g()) check_graph_types(attr.g(), path);
      for (const auto& g : attr.graphs()) check_graph_types(g, path);
    }
  }
}

// ---- rewriting -------------------------------------------------------------------------

std::vector<std::int64_t> tensor_ints(const onnx::TensorProto& t) {
  std::vector<std::int64_t> out;
  if (t.data_type() == onnx::TensorProto::INT64) {
    if (t.has_raw_data()) {
      const std::string& raw = t.raw_data();
      out.resize(raw.size() / sizeof(std::int64_t));
      for (std::size_t i = 0; i < out.size(); ++i) std::memcpy(&out[i], raw.data() + i * 8, 8);
    } else {
      out.assign(t.int64_data().begin(), t.int64_data().end());
    }
  } else if (t.data_type() == onnx::TensorProto::INT32) {
    if (t.has_raw_data()) {
      const std::string& raw = t.raw_data();
      for (std::size_t i = 0; i + 4 <= raw.size(); i += 4) {
        std::int32_t v;
        std::memcpy(&v, raw.data() + i, 4);
        out.push_back(v);
      }
    } else {
      out.assign(t.int32_data().begin(), t.int32_data().end());
    }
  }
  return out;
}

const onnx::AttributeProto* attribute(const onnx::NodeProto& node, const std::string& name) {
  for (const auto& a : node.attribute()) {
    if (a.name() == name) return &a;
  }
  return nullptr;
}

std::int64_t attr_int(const onnx::NodeProto& node, const std::string& name, std::int64_t fallback) {
  const auto* a = attribute(node, name);
  return a ? a->i() : fallback;
}

std::string attr_string(const onnx::NodeProto& node, const std::string& name, const std::string& fallback) {
  const auto* a = attribute(node, name);
  return a ? a->s() : fallback;
}

void remove_attribute(onnx::NodeProto& node, const std::string& name) {
  auto* attrs = node.mutable_attribute();
  for (int i = 0; i < attrs->size(); ++i) {
    if (attrs->Get(i).name() == name) {
      attrs->DeleteSubrange(i, 1);
      return;
    }
  }
}

void set_ints(onnx::NodeProto& node, const std::string& name, const std::vector<std::int64_t>& values) {
  remove_attribute(node, name);
  auto* a = node.add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INTS);
  for (auto v : values) a->add_ints(v);
}

void set_string(onnx::NodeProto& node, const std::string& name, const std::string& value) {
  remove_attribute(node, name);
  auto* a = node.add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::STRING);
  a->set_s(value);
}

// Drops trailing omitted ("") inputs, then keeps the first `n`.
void keep_inputs(onnx::NodeProto& node, int n) {
  while (node.input_size() > n) node.mutable_input()->RemoveLast();
  while (node.input_size() > 0 && node.input(node.input_size() - 1).empty()) node.mutable_input()->RemoveLast();
}

// One graph being rewritten, with what its nodes may read: constants (its own and the
// enclosing graphs'), value shapes, the names in use.
class Rewriter {
 public:
  Rewriter(onnx::GraphProto& graph, std::int64_t opset, std::string path, const Rewriter* outer)
      : graph_(graph), opset_(opset), path_(std::move(path)) {
    if (outer) {
      constants_ = outer->constants_;
      shapes_ = outer->shapes_;
      types_ = outer->types_;
      names_ = outer->names_;
    }
    for (const auto& t : graph.initializer()) {
      constants_[t.name()] = &t;
      names_.insert(t.name());
      std::vector<std::int64_t> dims(t.dims().begin(), t.dims().end());
      shapes_[t.name()] = dims;
      types_[t.name()] = t.data_type();
    }
    auto add_info = [&](const onnx::ValueInfoProto& v) {
      names_.insert(v.name());
      if (!v.type().has_tensor_type()) return;
      types_[v.name()] = v.type().tensor_type().elem_type();
      if (!v.type().tensor_type().has_shape()) return;
      std::vector<std::int64_t> dims;
      for (const auto& d : v.type().tensor_type().shape().dim()) dims.push_back(d.has_dim_value() ? d.dim_value() : -1);
      shapes_[v.name()] = dims;
    };
    for (const auto& v : graph.input()) add_info(v);
    for (const auto& v : graph.output()) add_info(v);
    for (const auto& v : graph.value_info()) add_info(v);
    for (const auto& node : graph.node()) {
      for (const auto& o : node.output()) names_.insert(o);
      if (node.op_type() == "Constant" && node.output_size() == 1) {
        const auto* value = attribute(node, "value");
        if (value && value->has_t()) constants_[node.output(0)] = &value->t();
        const auto* ints = attribute(node, "value_ints");
        if (ints) constant_ints_[node.output(0)].assign(ints->ints().begin(), ints->ints().end());
        const auto* one = attribute(node, "value_int");
        if (one) constant_ints_[node.output(0)] = {one->i()};
      }
    }
  }

  void run() {
    google::protobuf::RepeatedPtrField<onnx::NodeProto> out;
    for (auto& node : *graph_.mutable_node()) {
      if (!node.domain().empty() && node.domain() != "ai.onnx") {
        *out.Add() = node;
        continue;
      }
      for (auto& attr : *node.mutable_attribute()) {
        if (attr.has_g()) Rewriter(*attr.mutable_g(), opset_, path_, this).run();
        for (auto& g : *attr.mutable_graphs()) Rewriter(g, opset_, path_, this).run();
      }
      for (auto& n : rewrite(node)) *out.Add() = std::move(n);
    }
    graph_.mutable_node()->Swap(&out);
  }

 private:
  std::string what(const onnx::NodeProto& node) const {
    return path_ + ": node '" + node.name() + "' (" + node.op_type() + ")";
  }

  [[noreturn]] void refuse(const onnx::NodeProto& node, const std::string& why) const {
    throw ModelError(what(node) + " " + why + " (Kestrel reads opsets 18 to " + std::to_string(kNewestOpset) +
                     " by rewriting each node into its opset-17 form)");
  }

  // The integer values of a constant input (initializer or Constant node); none when the
  // input is computed.
  std::optional<std::vector<std::int64_t>> ints_of(const std::string& name) const {
    auto c = constant_ints_.find(name);
    if (c != constant_ints_.end()) return c->second;
    auto it = constants_.find(name);
    if (it == constants_.end()) return std::nullopt;
    const auto type = it->second->data_type();
    if (type != onnx::TensorProto::INT64 && type != onnx::TensorProto::INT32) return std::nullopt;
    return tensor_ints(*it->second);
  }

  std::string fresh(const std::string& base) {
    std::string name = base;
    for (int i = 1; names_.contains(name); ++i) name = base + "_" + std::to_string(i);
    names_.insert(name);
    return name;
  }

  std::string add_ints(const std::string& base, const std::vector<std::int64_t>& values) {
    auto* t = graph_.add_initializer();
    t->set_name(fresh(base));
    t->set_data_type(onnx::TensorProto::INT64);
    t->add_dims(static_cast<std::int64_t>(values.size()));
    for (auto v : values) t->add_int64_data(v);
    return t->name();
  }

  std::string add_scalar(const std::string& base, double value, int type) {
    auto* t = graph_.add_initializer();
    t->set_name(fresh(base));
    t->set_data_type(type);
    if (type == onnx::TensorProto::DOUBLE) {
      t->add_double_data(value);
    } else {
      t->add_float_data(static_cast<float>(value));
    }
    return t->name();
  }

  static onnx::NodeProto make(const std::string& op, const std::string& name, std::vector<std::string> inputs,
                              const std::string& output) {
    onnx::NodeProto n;
    n.set_op_type(op);
    n.set_name(name);
    for (auto& i : inputs) n.add_input(i);
    n.add_output(output);
    return n;
  }

  // The float type of a decomposed activation's input (its constants get it).
  int float_type(const onnx::NodeProto& node) const {
    auto it = types_.find(node.input(0));
    const int type = it == types_.end() || it->second == 0 ? onnx::TensorProto::FLOAT : static_cast<int>(it->second);
    if (type != onnx::TensorProto::FLOAT && type != onnx::TensorProto::DOUBLE) {
      refuse(node, "has a " + std::string(type == onnx::TensorProto::FLOAT16 ? "float16" : "non-float32") +
                       " input: Kestrel decomposes " + node.op_type() + " for float and double only");
    }
    return type;
  }

  std::vector<onnx::NodeProto> rewrite(onnx::NodeProto& node) {
    const std::string& op = node.op_type();
    static const std::set<std::string> reduce_18 = {"ReduceL1",  "ReduceL2",  "ReduceLogSum", "ReduceLogSumExp",
                                                    "ReduceMax", "ReduceMean", "ReduceMin",   "ReduceProd",
                                                    "ReduceSumSquare"};
    static const std::map<std::string, std::int64_t> no_equivalent = {
        {"BitwiseAnd", 18}, {"BitwiseNot", 18},    {"BitwiseOr", 18},      {"BitwiseXor", 18},
        {"CenterCropPad", 18}, {"Col2Im", 18},     {"GroupNormalization", 18}, {"DeformConv", 19},
        {"AffineGrid", 20}, {"DFT", 20},           {"ImageDecoder", 20},   {"RegexFullMatch", 20},
        {"StringConcat", 20}, {"StringSplit", 20}};
    if (auto it = no_equivalent.find(op); it != no_equivalent.end() && opset_ >= it->second) {
      refuse(node, "is an opset-" + std::to_string(it->second) + " operator (in this form) with no opset-17 equivalent "
                   "that Kestrel rewrites it to" +
                   (op == "GroupNormalization" ? std::string(": export with opset_version=17, where torch writes "
                                                             "GroupNorm as InstanceNormalization and Mul/Add")
                                               : std::string()));
    }
    if (reduce_18.contains(op) && opset_ >= 18) return {reduce(node)};
    if (op == "Split" && opset_ >= 18) return {split(node)};
    if (op == "Pad" && opset_ >= 18) return {pad(node)};
    if (op == "Resize" && opset_ >= 18) return {resize(node)};
    if ((op == "ScatterElements" || op == "ScatterND") && opset_ >= 18) {
      const std::string reduction = attr_string(node, "reduction", "none");
      if (reduction == "max" || reduction == "min") refuse(node, "has reduction '" + reduction + "' (opset 18)");
      return {node};
    }
    if (op == "LpPool" && opset_ >= 18) {
      if (attr_int(node, "ceil_mode", 0) != 0) refuse(node, "has ceil_mode=1 (opset 18)");
      remove_attribute(node, "ceil_mode");
      return {node};
    }
    if (op == "AveragePool" && opset_ >= 19) {
      if (const auto* d = attribute(node, "dilations")) {
        for (auto v : d->ints()) {
          if (v != 1) refuse(node, "has dilations (opset 19)");
        }
        remove_attribute(node, "dilations");
      }
      return {node};
    }
    if ((op == "Cast" || op == "CastLike") && opset_ >= 19) {
      remove_attribute(node, "saturate");  // float8 targets only, which are refused
      return {node};
    }
    if ((op == "QuantizeLinear" || op == "DequantizeLinear") && opset_ >= 19) {
      remove_attribute(node, "saturate");
      if (attr_int(node, "block_size", 0) != 0) refuse(node, "uses blocked quantization (block_size, opset 21)");
      if (attr_int(node, "output_dtype", 0) != 0) refuse(node, "names its output_dtype (opset 21)");
      remove_attribute(node, "block_size");
      remove_attribute(node, "output_dtype");
      return {node};
    }
    if (op == "GridSample" && opset_ >= 20) {
      const std::string mode = attr_string(node, "mode", "linear");
      set_string(node, "mode", mode == "linear" ? "bilinear" : mode == "cubic" ? "bicubic" : mode);
      return {node};
    }
    if (op == "Gelu" && opset_ >= 20) return gelu(node);
    if (op == "Mish" && opset_ >= 18) return mish(node);
    return {node};  // unchanged, or changed in the types it accepts only
  }

  // Reduce*-18: axes is an optional input; no axes reduces all unless noop_with_empty_axes.
  onnx::NodeProto reduce(onnx::NodeProto& node) {
    std::vector<std::int64_t> axes;
    if (node.input_size() >= 2 && !node.input(1).empty()) {
      auto values = ints_of(node.input(1));
      if (!values) refuse(node, "takes its axes from '" + node.input(1) + "', computed at run time: Kestrel reads constant axes only");
      axes = *values;
    }
    const bool noop = attr_int(node, "noop_with_empty_axes", 0) != 0;
    remove_attribute(node, "noop_with_empty_axes");
    keep_inputs(node, 1);
    if (axes.empty() && noop) {
      onnx::NodeProto identity = make("Identity", node.name(), {node.input(0)}, node.output(0));
      return identity;
    }
    if (!axes.empty()) set_ints(node, "axes", axes);
    return node;
  }

  // Split-18: num_outputs splits into parts of ceil(size / n), the last smaller; opset 13
  // without a split input needs equal parts, so uneven ones get explicit sizes.
  onnx::NodeProto split(onnx::NodeProto& node) {
    const std::int64_t n = attr_int(node, "num_outputs", 0);
    remove_attribute(node, "num_outputs");
    const bool sizes_given = node.input_size() >= 2 && !node.input(1).empty();
    if (!n || sizes_given) return node;
    if (n != node.output_size()) refuse(node, "has num_outputs=" + std::to_string(n) + " but " + std::to_string(node.output_size()) + " outputs");
    auto shape = shapes_.find(node.input(0));
    if (shape == shapes_.end()) return node;  // even split assumed; shape inference checks it
    const auto rank = static_cast<std::int64_t>(shape->second.size());
    std::int64_t axis = attr_int(node, "axis", 0);
    if (axis < 0) axis += rank;
    if (axis < 0 || axis >= rank) return node;
    const std::int64_t size = shape->second[static_cast<std::size_t>(axis)];
    if (size < 0 || size % n == 0) return node;
    const std::int64_t part = (size + n - 1) / n;
    std::vector<std::int64_t> sizes;
    for (std::int64_t i = 0, left = size; i < n; ++i, left -= part) sizes.push_back(std::max<std::int64_t>(0, std::min(part, left)));
    keep_inputs(node, 1);
    node.add_input(add_ints(node.output(0) + "_split", sizes));
    return node;
  }

  // Pad-18: optional axes input (the pads then cover those axes only); Pad-19: mode wrap.
  onnx::NodeProto pad(onnx::NodeProto& node) {
    const std::string mode = attr_string(node, "mode", "constant");
    if (mode == "wrap") refuse(node, "has mode 'wrap' (opset 19), which opset 17 does not have");
    if (node.input_size() < 4 || node.input(3).empty()) {
      keep_inputs(node, 3);
      return node;
    }
    auto axes = ints_of(node.input(3));
    auto pads = node.input_size() >= 2 ? ints_of(node.input(1)) : std::nullopt;
    auto shape = shapes_.find(node.input(0));
    if (!axes || !pads || shape == shapes_.end() || pads->size() != 2 * axes->size()) {
      refuse(node, "pads only some axes (the axes input, opset 18) with pads, axes or the input's rank unknown before "
                   "shape inference");
    }
    const auto rank = static_cast<std::int64_t>(shape->second.size());
    std::vector<std::int64_t> full(static_cast<std::size_t>(2 * rank), 0);
    for (std::size_t i = 0; i < axes->size(); ++i) {
      std::int64_t a = (*axes)[i] < 0 ? (*axes)[i] + rank : (*axes)[i];
      if (a < 0 || a >= rank) refuse(node, "has axis " + std::to_string((*axes)[i]) + " outside its input's rank");
      full[static_cast<std::size_t>(a)] = (*pads)[i];
      full[static_cast<std::size_t>(a + rank)] = (*pads)[i + axes->size()];
    }
    keep_inputs(node, 3);
    node.set_input(1, add_ints(node.output(0) + "_pads", full));
    return node;
  }

  // Resize-18: antialias, axes, keep_aspect_ratio_policy; Resize-19: half_pixel_symmetric.
  onnx::NodeProto resize(onnx::NodeProto& node) {
    if (attr_int(node, "antialias", 0) != 0) refuse(node, "has antialias=1 (opset 18)");
    remove_attribute(node, "antialias");
    if (attr_string(node, "keep_aspect_ratio_policy", "stretch") != "stretch") {
      refuse(node, "has keep_aspect_ratio_policy '" + attr_string(node, "keep_aspect_ratio_policy", "") + "' (opset 18)");
    }
    remove_attribute(node, "keep_aspect_ratio_policy");
    if (attr_string(node, "coordinate_transformation_mode", "") == "half_pixel_symmetric") {
      refuse(node, "has coordinate_transformation_mode 'half_pixel_symmetric' (opset 19)");
    }
    if (const auto* axes = attribute(node, "axes")) {
      auto shape = shapes_.find(node.input(0));
      bool all = shape != shapes_.end() && axes->ints_size() == static_cast<int>(shape->second.size());
      for (int i = 0; all && i < axes->ints_size(); ++i) all = axes->ints(i) == i || axes->ints(i) == i - axes->ints_size();
      if (!all) refuse(node, "resizes only some axes (the axes attribute, opset 18)");
      remove_attribute(node, "axes");
    }
    return node;
  }

  // Gelu-20: x * 0.5 * (1 + erf(x / sqrt(2))), or with approximate="tanh"
  // x * 0.5 * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 x^3))), in the node order torch's
  // legacy exporter writes (so that the planner's GELU pattern sees the same graph).
  std::vector<onnx::NodeProto> gelu(const onnx::NodeProto& node) {
    const std::string approximate = attr_string(node, "approximate", "none");
    if (approximate != "none" && approximate != "tanh") refuse(node, "has approximate='" + approximate + "'");
    const int type = float_type(node);
    const std::string& x = node.input(0);
    const std::string& y = node.output(0);
    const std::string base = node.name().empty() ? y : node.name();
    auto value = [&](const std::string& suffix) { return fresh(y + "_" + suffix); };
    std::vector<onnx::NodeProto> out;
    const std::string one = add_scalar(base + "_one", 1.0, type), half = add_scalar(base + "_half", 0.5, type);
    std::string inner;
    if (approximate == "none") {
      const std::string scaled = value("div");
      out.push_back(make("Div", base + "/Div", {x, add_scalar(base + "_sqrt2", std::sqrt(2.0), type)}, scaled));
      inner = value("erf");
      out.push_back(make("Erf", base + "/Erf", {scaled}, inner));
    } else {
      const std::string cube = value("pow"), scaled_cube = value("mul_c"), sum = value("add_x"), scaled = value("mul_s");
      out.push_back(make("Pow", base + "/Pow", {x, add_scalar(base + "_three", 3.0, type)}, cube));
      out.push_back(make("Mul", base + "/MulC", {cube, add_scalar(base + "_c", 0.044715, type)}, scaled_cube));
      out.push_back(make("Add", base + "/AddX", {x, scaled_cube}, sum));
      out.push_back(make("Mul", base + "/MulS", {sum, add_scalar(base + "_s", std::sqrt(2.0 / std::numbers::pi), type)}, scaled));
      inner = value("tanh");
      out.push_back(make("Tanh", base + "/Tanh", {scaled}, inner));
    }
    const std::string plus = value("add1"), product = value("mul");
    out.push_back(make("Add", base + "/Add", {inner, one}, plus));
    out.push_back(make("Mul", base + "/Mul", {x, plus}, product));
    out.push_back(make("Mul", base + "/MulHalf", {product, half}, y));
    return out;
  }

  // Mish-18: x * tanh(softplus(x)).
  std::vector<onnx::NodeProto> mish(const onnx::NodeProto& node) {
    float_type(node);
    const std::string& x = node.input(0);
    const std::string base = node.name().empty() ? node.output(0) : node.name();
    const std::string soft = fresh(node.output(0) + "_softplus"), tanh = fresh(node.output(0) + "_tanh");
    return {make("Softplus", base + "/Softplus", {x}, soft), make("Tanh", base + "/Tanh", {soft}, tanh),
            make("Mul", base + "/Mul", {x, tanh}, node.output(0))};
  }

  onnx::GraphProto& graph_;
  std::int64_t opset_;
  std::string path_;
  std::map<std::string, const onnx::TensorProto*> constants_;
  std::map<std::string, std::vector<std::int64_t>> constant_ints_;
  std::map<std::string, std::vector<std::int64_t>> shapes_;
  std::map<std::string, std::int64_t> types_;
  std::set<std::string> names_;
};

}  // namespace

void check_element_types(const onnx::ModelProto& proto, const std::string& path) {
  check_graph_types(proto.graph(), path);
}

void rewrite_to_opset17(onnx::ModelProto& proto, std::int64_t opset, const std::string& path) {
  Rewriter(*proto.mutable_graph(), opset, path, nullptr).run();
  for (auto& import : *proto.mutable_opset_import()) {
    if (import.domain().empty() || import.domain() == "ai.onnx") import.set_version(kLibOpset);
  }
}

}  // namespace kestrel::model
