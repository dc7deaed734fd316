// Constant folding of layout subgraphs over initializers (see fold_constants.h). The
// operator semantics are ONNX's (opsets 11 to 17 as the importer reads them).
#include "fold_constants.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <set>

namespace kestrel::model {

namespace {

// ONNX TensorProto element types the folds produce.
constexpr std::int64_t kFloat = 1;
constexpr std::int64_t kInt32 = 6;
constexpr std::int64_t kInt64 = 7;

std::int64_t count(const std::vector<std::int64_t>& shape) {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

bool integer(ElemType t) { return t == ElemType::i64 || t == ElemType::i32; }

// A constant whose data Kestrel holds (f32 in f32, integers in i64) and matches its shape.
const Initializer* data_of(const Graph& graph, const std::string& name) {
  const Initializer* init = graph.initializer(name);
  if (!init) return nullptr;
  for (auto d : init->shape) {
    if (d < 0) return nullptr;
  }
  const auto n = static_cast<std::size_t>(count(init->shape));
  if (init->type == ElemType::f32 && init->f32.size() == n) return init;
  if (integer(init->type) && init->i64.size() == n) return init;
  return nullptr;
}

std::size_t size_of(const Initializer& t) { return t.type == ElemType::f32 ? t.f32.size() : t.i64.size(); }

// A normalised axis in [0, rank), none when out of range.
std::optional<std::int64_t> axis_in(std::int64_t axis, std::int64_t rank) {
  if (axis < 0) axis += rank;
  if (axis < 0 || axis >= rank) return std::nullopt;
  return axis;
}

// The axes of Squeeze/Unsqueeze: an attribute before opset 13, the second input after.
std::optional<std::vector<std::int64_t>> axes_of(const Graph& graph, const Node& node) {
  if (node.inputs.size() >= 2 && !node.inputs[1].empty()) {
    const Initializer* axes = data_of(graph, node.inputs[1]);
    if (!axes || !integer(axes->type)) return std::nullopt;
    return axes->i64;
  }
  return node.attr_ints("axes");
}

std::optional<Initializer> reshaped(const Initializer& in, std::vector<std::int64_t> shape) {
  if (count(shape) != static_cast<std::int64_t>(size_of(in))) return std::nullopt;
  Initializer out = in;
  out.shape = std::move(shape);
  return out;
}

std::optional<Initializer> fold_reshape(const Graph& graph, const Node& node, const Initializer& in) {
  if (node.inputs.size() < 2) return std::nullopt;
  const Initializer* target = data_of(graph, node.inputs[1]);
  if (!target || !integer(target->type)) return std::nullopt;
  const bool allow_zero = node.attr_int("allowzero", 0) != 0;
  std::vector<std::int64_t> shape;
  std::optional<std::size_t> infer;
  std::int64_t known = 1;
  for (std::size_t i = 0; i < target->i64.size(); ++i) {
    std::int64_t d = target->i64[i];
    if (d == 0 && !allow_zero) {
      if (i >= in.shape.size()) return std::nullopt;
      d = in.shape[i];
    }
    if (d == -1) {
      if (infer) return std::nullopt;
      infer = i;
      d = 1;
    } else if (d < 0) {
      return std::nullopt;
    }
    shape.push_back(d);
    known *= d;
  }
  if (infer) {
    const auto total = static_cast<std::int64_t>(size_of(in));
    if (known == 0 || total % known) return std::nullopt;
    shape[*infer] = total / known;
  }
  return reshaped(in, std::move(shape));
}

std::optional<Initializer> fold_flatten(const Node& node, const Initializer& in) {
  const auto rank = static_cast<std::int64_t>(in.shape.size());
  std::int64_t axis = node.attr_int("axis", 1);
  if (axis < 0) axis += rank;
  if (axis < 0 || axis > rank) return std::nullopt;
  std::int64_t outer = 1, inner = 1;
  for (std::int64_t i = 0; i < rank; ++i) (i < axis ? outer : inner) *= in.shape[static_cast<std::size_t>(i)];
  return reshaped(in, {outer, inner});
}

std::optional<Initializer> fold_squeeze(const Graph& graph, const Node& node, const Initializer& in) {
  auto axes = axes_of(graph, node);
  if (!axes) return std::nullopt;
  const auto rank = static_cast<std::int64_t>(in.shape.size());
  std::set<std::int64_t> drop;
  for (auto a : *axes) {
    auto axis = axis_in(a, rank);
    if (!axis || in.shape[static_cast<std::size_t>(*axis)] != 1) return std::nullopt;
    drop.insert(*axis);
  }
  std::vector<std::int64_t> shape;
  for (std::int64_t i = 0; i < rank; ++i) {
    const auto d = in.shape[static_cast<std::size_t>(i)];
    const bool dropped = axes->empty() ? d == 1 : drop.contains(i);
    if (!dropped) shape.push_back(d);
  }
  return reshaped(in, std::move(shape));
}

std::optional<Initializer> fold_unsqueeze(const Graph& graph, const Node& node, const Initializer& in) {
  auto axes = axes_of(graph, node);
  if (!axes || axes->empty()) return std::nullopt;
  const auto rank = static_cast<std::int64_t>(in.shape.size() + axes->size());
  std::set<std::int64_t> insert;
  for (auto a : *axes) {
    auto axis = axis_in(a, rank);
    if (!axis || !insert.insert(*axis).second) return std::nullopt;
  }
  std::vector<std::int64_t> shape;
  std::size_t next = 0;
  for (std::int64_t i = 0; i < rank; ++i) shape.push_back(insert.contains(i) ? 1 : in.shape[next++]);
  return reshaped(in, std::move(shape));
}

std::optional<Initializer> fold_transpose(const Node& node, const Initializer& in) {
  const std::size_t rank = in.shape.size();
  std::vector<std::int64_t> perm = node.attr_ints("perm");
  if (perm.empty()) {
    for (std::size_t i = 0; i < rank; ++i) perm.push_back(static_cast<std::int64_t>(rank - 1 - i));
  }
  if (perm.size() != rank) return std::nullopt;
  std::vector<bool> seen(rank, false);
  for (auto p : perm) {
    if (p < 0 || p >= static_cast<std::int64_t>(rank) || seen[static_cast<std::size_t>(p)]) return std::nullopt;
    seen[static_cast<std::size_t>(p)] = true;
  }
  std::vector<std::int64_t> shape(rank), in_strides(rank, 1);
  for (std::size_t i = rank; i-- > 1;) in_strides[i - 1] = in_strides[i] * in.shape[i];
  for (std::size_t i = 0; i < rank; ++i) shape[i] = in.shape[static_cast<std::size_t>(perm[i])];
  Initializer out = in;
  out.shape = shape;
  const std::size_t n = size_of(in);
  std::vector<std::int64_t> index(rank, 0);  // of the output element
  auto copy = [&](const auto& from, auto& to) {
    for (std::size_t o = 0; o < n; ++o) {
      std::int64_t src = 0;
      for (std::size_t i = 0; i < rank; ++i) src += index[i] * in_strides[static_cast<std::size_t>(perm[i])];
      to[o] = from[static_cast<std::size_t>(src)];
      for (std::size_t i = rank; i-- > 0;) {
        if (++index[i] < shape[i]) break;
        index[i] = 0;
      }
    }
  };
  if (in.type == ElemType::f32) {
    copy(in.f32, out.f32);
  } else {
    copy(in.i64, out.i64);
  }
  return out;
}

std::optional<Initializer> fold_concat(const Node& node, const std::vector<const Initializer*>& ins) {
  if (ins.empty()) return std::nullopt;
  const Initializer& first = *ins[0];
  const auto rank = static_cast<std::int64_t>(first.shape.size());
  auto axis = axis_in(node.attr_int("axis", 0), rank);
  if (!axis) return std::nullopt;
  const auto a = static_cast<std::size_t>(*axis);
  Initializer out;
  out.type = first.type;
  out.shape = first.shape;
  out.shape[a] = 0;
  for (const auto* in : ins) {
    if (in->type != first.type || in->shape.size() != first.shape.size()) return std::nullopt;
    for (std::size_t i = 0; i < first.shape.size(); ++i) {
      if (i != a && in->shape[i] != first.shape[i]) return std::nullopt;
    }
    out.shape[a] += in->shape[a];
  }
  std::int64_t outer = 1;
  for (std::size_t i = 0; i < a; ++i) outer *= first.shape[i];
  std::int64_t inner = 1;
  for (std::size_t i = a + 1; i < first.shape.size(); ++i) inner *= first.shape[i];
  for (std::int64_t o = 0; o < outer; ++o) {
    for (const auto* in : ins) {
      const std::int64_t block = in->shape[a] * inner;
      const auto begin = static_cast<std::ptrdiff_t>(o * block), end = static_cast<std::ptrdiff_t>((o + 1) * block);
      if (first.type == ElemType::f32) {
        out.f32.insert(out.f32.end(), in->f32.begin() + begin, in->f32.begin() + end);
      } else {
        out.i64.insert(out.i64.end(), in->i64.begin() + begin, in->i64.begin() + end);
      }
    }
  }
  return out;
}

std::optional<Initializer> fold_cast(const Node& node, const Initializer& in) {
  const std::int64_t to = node.attr_int("to", 0);
  Initializer out;
  out.shape = in.shape;
  if (to == kFloat) {
    out.type = ElemType::f32;
    if (in.type == ElemType::f32) {
      out.f32 = in.f32;
    } else {
      for (auto v : in.i64) out.f32.push_back(static_cast<float>(v));
    }
    return out;
  }
  if (to != kInt64 && to != kInt32) return std::nullopt;
  out.type = to == kInt64 ? ElemType::i64 : ElemType::i32;
  const double lo = to == kInt64 ? -9.2e18 : std::numeric_limits<std::int32_t>::min();
  const double hi = to == kInt64 ? 9.2e18 : std::numeric_limits<std::int32_t>::max();
  if (in.type == ElemType::f32) {
    for (float v : in.f32) {
      if (!std::isfinite(v) || v < lo || v > hi) return std::nullopt;  // out of range: left to the runtime
      out.i64.push_back(static_cast<std::int64_t>(v));                // toward zero
    }
  } else {
    for (auto v : in.i64) {
      if (static_cast<double>(v) < lo || static_cast<double>(v) > hi) return std::nullopt;
      out.i64.push_back(v);
    }
  }
  return out;
}

std::optional<Initializer> fold(const Graph& graph, const Node& node, const std::vector<const Initializer*>& ins) {
  const std::string& op = node.op_type;
  const Initializer& in = *ins[0];
  if (op == "Identity") return in;
  if (op == "Cast") return fold_cast(node, in);
  if (op == "Reshape") return fold_reshape(graph, node, in);
  if (op == "Flatten") return fold_flatten(node, in);
  if (op == "Squeeze") return fold_squeeze(graph, node, in);
  if (op == "Unsqueeze") return fold_unsqueeze(graph, node, in);
  if (op == "Transpose") return fold_transpose(node, in);
  if (op == "Concat") return fold_concat(node, ins);
  return std::nullopt;
}

const std::set<std::string>& foldable() {
  static const std::set<std::string> ops = {"Identity",  "Cast",    "Reshape",   "Flatten",
                                            "Squeeze",   "Unsqueeze", "Transpose", "Concat"};
  return ops;
}

}  // namespace

int fold_constants(Graph& graph) {
  std::set<std::string> graph_outputs;
  for (const auto& output : graph.outputs) graph_outputs.insert(output.name);
  std::vector<bool> removed(graph.nodes.size(), false);
  std::set<std::string> read;  // constants a folded node read
  int folded = 0;
  for (std::size_t i = 0; i < graph.nodes.size(); ++i) {
    const Node& node = graph.nodes[i];
    if (!node.domain.empty() || !foldable().contains(node.op_type) || node.outputs.size() != 1 ||
        node.outputs[0].empty() || graph_outputs.contains(node.outputs[0]) || node.inputs.empty() ||
        node.inputs[0].empty()) {
      continue;
    }
    // Concat reads every input as data; the others their first (the rest are parameters,
    // read as constants by their fold).
    const std::size_t data_inputs = node.op_type == "Concat" ? node.inputs.size() : 1;
    std::vector<const Initializer*> ins;
    bool constant = true;
    for (std::size_t k = 0; k < node.inputs.size() && constant; ++k) {
      const Initializer* init = node.inputs[k].empty() ? nullptr : data_of(graph, node.inputs[k]);
      if (!node.inputs[k].empty() && !init) constant = false;
      if (k < data_inputs) ins.push_back(init);
    }
    if (!constant || std::find(ins.begin(), ins.end(), nullptr) != ins.end()) continue;
    auto result = fold(graph, node, ins);
    if (!result) continue;
    const std::string name = node.outputs[0];
    result->name = name;
    Shape shape;
    for (auto d : result->shape) shape.push_back(Dim{d, {}});
    graph.values[name] = ValueInfo{name, result->type, shape};
    graph.initializers[name] = std::move(*result);
    for (const auto& input : node.inputs) {
      if (!input.empty()) read.insert(input);
    }
    removed[i] = true;
    ++folded;
  }
  if (!folded) return 0;
  std::vector<Node> kept;
  for (std::size_t i = 0; i < graph.nodes.size(); ++i) {
    if (!removed[i]) kept.push_back(std::move(graph.nodes[i]));
  }
  graph.nodes = std::move(kept);
  std::set<std::string> used = graph_outputs;
  for (const auto& node : graph.nodes) used.insert(node.inputs.begin(), node.inputs.end());
  for (const auto& name : read) {
    if (!used.contains(name)) {
      graph.initializers.erase(name);
      graph.values.erase(name);
    }
  }
  return folded;
}

}  // namespace kestrel::model
