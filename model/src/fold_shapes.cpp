// Folding of integer shape computations (see fold_shapes.h).
#include "fold_shapes.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace kestrel::model {

namespace {

struct IntTensor {
  std::vector<std::int64_t> dims;
  std::vector<std::int64_t> values;
};

std::optional<IntTensor> int_tensor(const onnx::TensorProto& t) {
  IntTensor out;
  out.dims.assign(t.dims().begin(), t.dims().end());
  std::int64_t n = 1;
  for (auto d : out.dims) n *= d;
  if (t.data_location() == onnx::TensorProto::EXTERNAL) return std::nullopt;
  if (t.data_type() == onnx::TensorProto::INT64) {
    if (t.has_raw_data()) {
      if (t.raw_data().size() != static_cast<std::size_t>(n) * 8) return std::nullopt;
      out.values.resize(static_cast<std::size_t>(n));
      if (n) std::memcpy(out.values.data(), t.raw_data().data(), t.raw_data().size());
    } else {
      out.values.assign(t.int64_data().begin(), t.int64_data().end());
    }
  } else if (t.data_type() == onnx::TensorProto::INT32) {
    if (t.has_raw_data()) {
      if (t.raw_data().size() != static_cast<std::size_t>(n) * 4) return std::nullopt;
      std::vector<std::int32_t> raw(static_cast<std::size_t>(n));
      if (n) std::memcpy(raw.data(), t.raw_data().data(), t.raw_data().size());
      out.values.assign(raw.begin(), raw.end());
    } else {
      out.values.assign(t.int32_data().begin(), t.int32_data().end());
    }
  } else {
    return std::nullopt;
  }
  if (static_cast<std::int64_t>(out.values.size()) != n) return std::nullopt;
  return out;
}

std::int64_t attr_int(const onnx::NodeProto& node, const std::string& name, std::int64_t fallback) {
  for (const auto& a : node.attribute()) {
    if (a.name() == name) return a.i();
  }
  return fallback;
}

std::optional<std::vector<std::int64_t>> attr_ints(const onnx::NodeProto& node, const std::string& name) {
  for (const auto& a : node.attribute()) {
    if (a.name() == name) return std::vector<std::int64_t>(a.ints().begin(), a.ints().end());
  }
  return std::nullopt;
}

class Folder {
 public:
  explicit Folder(onnx::ModelProto& proto) : graph_(*proto.mutable_graph()) {
    for (const auto& init : graph_.initializer()) {
      if (auto t = int_tensor(init)) constants_[init.name()] = *t;
    }
    auto add_shape = [&](const onnx::ValueInfoProto& info) {
      if (!info.type().has_tensor_type() || !info.type().tensor_type().has_shape()) return;
      std::vector<std::int64_t> dims;
      for (const auto& d : info.type().tensor_type().shape().dim()) {
        if (!d.has_dim_value()) return;
        dims.push_back(d.dim_value());
      }
      shapes_[info.name()] = dims;
    };
    for (const auto& v : graph_.input()) add_shape(v);
    for (const auto& v : graph_.value_info()) add_shape(v);
    for (const auto& v : graph_.output()) add_shape(v);
    for (const auto& init : graph_.initializer()) {
      shapes_[init.name()] = std::vector<std::int64_t>(init.dims().begin(), init.dims().end());
    }
  }

  // One round: folds what is computable now. Returns the nodes folded.
  int round() {
    int folded = 0;
    google::protobuf::RepeatedPtrField<onnx::NodeProto> kept;
    for (auto& node : *graph_.mutable_node()) {
      std::optional<IntTensor> result = node.output_size() == 1 ? evaluate(node) : std::nullopt;
      if (!result) {
        *kept.Add() = node;
        continue;
      }
      constants_[node.output(0)] = *result;
      auto* init = graph_.add_initializer();
      init->set_name(node.output(0));
      init->set_data_type(onnx::TensorProto::INT64);
      for (auto d : result->dims) init->add_dims(d);
      for (auto v : result->values) init->add_int64_data(v);
      ++folded;
    }
    if (folded) graph_.mutable_node()->Swap(&kept);
    return folded;
  }

 private:
  const IntTensor* constant(const onnx::NodeProto& node, int index) const {
    if (index >= node.input_size() || node.input(index).empty()) return nullptr;
    auto it = constants_.find(node.input(index));
    return it == constants_.end() ? nullptr : &it->second;
  }

  static std::int64_t norm_axis(std::int64_t axis, std::int64_t rank) { return axis < 0 ? axis + rank : axis; }

  std::optional<IntTensor> evaluate(const onnx::NodeProto& node) const {
    if (!node.domain().empty() && node.domain() != "ai.onnx") return std::nullopt;
    const std::string& op = node.op_type();
    if (op == "Constant") {
      for (const auto& a : node.attribute()) {
        if (a.name() == "value") return int_tensor(a.t());
        if (a.name() == "value_int") return IntTensor{{}, {a.i()}};
        if (a.name() == "value_ints") {
          return IntTensor{{a.ints_size()}, std::vector<std::int64_t>(a.ints().begin(), a.ints().end())};
        }
      }
      return std::nullopt;
    }
    if (op == "Shape") {
      auto it = shapes_.find(node.input(0));
      if (it == shapes_.end()) return std::nullopt;
      const auto& dims = it->second;
      const auto rank = static_cast<std::int64_t>(dims.size());
      std::int64_t start = std::clamp<std::int64_t>(norm_axis(attr_int(node, "start", 0), rank), 0, rank);
      std::int64_t end = std::clamp<std::int64_t>(norm_axis(attr_int(node, "end", rank), rank), 0, rank);
      IntTensor out;
      for (std::int64_t i = start; i < end; ++i) out.values.push_back(dims[static_cast<std::size_t>(i)]);
      out.dims = {static_cast<std::int64_t>(out.values.size())};
      return out;
    }
    const IntTensor* a = constant(node, 0);
    if (!a) return std::nullopt;
    if (op == "Identity") return *a;
    if (op == "Cast") {
      const std::int64_t to = attr_int(node, "to", 0);
      if (to != onnx::TensorProto::INT64) return std::nullopt;
      return *a;
    }
    if (op == "Gather") {
      const IntTensor* idx = constant(node, 1);
      if (!idx || a->dims.size() != 1 || norm_axis(attr_int(node, "axis", 0), 1) != 0) return std::nullopt;
      IntTensor out{idx->dims, {}};
      const auto n = static_cast<std::int64_t>(a->values.size());
      for (auto i : idx->values) {
        if (i < 0) i += n;
        if (i < 0 || i >= n) return std::nullopt;
        out.values.push_back(a->values[static_cast<std::size_t>(i)]);
      }
      return out;
    }
    if (op == "Unsqueeze" || op == "Squeeze") {
      std::vector<std::int64_t> axes;
      if (auto attr = attr_ints(node, "axes")) {
        axes = *attr;
      } else if (const IntTensor* ax = constant(node, 1)) {
        axes = ax->values;
      } else if (op == "Unsqueeze" || node.input_size() > 1) {
        return std::nullopt;
      }
      IntTensor out{{}, a->values};
      if (op == "Unsqueeze") {
        const auto rank = static_cast<std::int64_t>(a->dims.size() + axes.size());
        for (auto& ax : axes) ax = norm_axis(ax, rank);
        std::sort(axes.begin(), axes.end());
        std::size_t src = 0;
        for (std::int64_t i = 0; i < rank; ++i) {
          if (std::binary_search(axes.begin(), axes.end(), i)) {
            out.dims.push_back(1);
          } else if (src < a->dims.size()) {
            out.dims.push_back(a->dims[src++]);
          } else {
            return std::nullopt;
          }
        }
      } else {
        const auto rank = static_cast<std::int64_t>(a->dims.size());
        for (auto& ax : axes) ax = norm_axis(ax, rank);
        for (std::int64_t i = 0; i < rank; ++i) {
          const bool drop = axes.empty() ? a->dims[static_cast<std::size_t>(i)] == 1
                                         : std::find(axes.begin(), axes.end(), i) != axes.end();
          if (!drop) out.dims.push_back(a->dims[static_cast<std::size_t>(i)]);
        }
      }
      return out;
    }
    if (op == "Concat") {
      IntTensor out;
      for (int i = 0; i < node.input_size(); ++i) {
        const IntTensor* part = constant(node, i);
        if (!part || part->dims.size() != 1) return std::nullopt;
        out.values.insert(out.values.end(), part->values.begin(), part->values.end());
      }
      out.dims = {static_cast<std::int64_t>(out.values.size())};
      return out;
    }
    if (op == "Slice") {
      const IntTensor* starts = constant(node, 1);
      const IntTensor* ends = constant(node, 2);
      if (!starts || !ends || a->dims.size() != 1 || starts->values.size() != 1 || ends->values.size() != 1) {
        return std::nullopt;
      }
      const IntTensor* axes = constant(node, 3);
      const IntTensor* steps = constant(node, 4);
      if ((node.input_size() > 3 && !node.input(3).empty() && !axes) ||
          (node.input_size() > 4 && !node.input(4).empty() && !steps)) {
        return std::nullopt;
      }
      if (axes && norm_axis(axes->values.at(0), 1) != 0) return std::nullopt;
      const std::int64_t step = steps ? steps->values.at(0) : 1;
      if (step != 1) return std::nullopt;
      const auto n = static_cast<std::int64_t>(a->values.size());
      std::int64_t s = starts->values[0], e = ends->values[0];
      if (s < 0) s += n;
      if (e < 0) e += n;
      s = std::clamp<std::int64_t>(s, 0, n);
      e = std::clamp<std::int64_t>(e, 0, n);
      IntTensor out;
      for (std::int64_t i = s; i < e; ++i) out.values.push_back(a->values[static_cast<std::size_t>(i)]);
      out.dims = {static_cast<std::int64_t>(out.values.size())};
      return out;
    }
    if (op == "Add" || op == "Sub" || op == "Mul" || op == "Div") {
      const IntTensor* b = constant(node, 1);
      if (!b) return std::nullopt;
      const std::size_t n = std::max(a->values.size(), b->values.size());
      if ((a->values.size() != n && a->values.size() != 1) || (b->values.size() != n && b->values.size() != 1)) {
        return std::nullopt;
      }
      IntTensor out{a->values.size() == n ? a->dims : b->dims, {}};
      for (std::size_t i = 0; i < n; ++i) {
        const std::int64_t x = a->values[a->values.size() == 1 ? 0 : i];
        const std::int64_t y = b->values[b->values.size() == 1 ? 0 : i];
        if (op == "Div" && y == 0) return std::nullopt;
        out.values.push_back(op == "Add" ? x + y : op == "Sub" ? x - y : op == "Mul" ? x * y : x / y);
      }
      return out;
    }
    return std::nullopt;
  }

  onnx::GraphProto& graph_;
  std::map<std::string, IntTensor> constants_;
  std::map<std::string, std::vector<std::int64_t>> shapes_;
};

}  // namespace

int fold_shape_computations(onnx::ModelProto& proto, const std::function<void(onnx::ModelProto&)>& infer) {
  int total = 0;
  for (int round = 0; round < 64; ++round) {
    infer(proto);
    const int folded = Folder(proto).round();
    if (folded == 0) return total;
    total += folded;
  }
  infer(proto);
  return total;
}

}  // namespace kestrel::model
