// Canonical forms of operators (see canonical_ops.h).
#include "canonical_ops.h"

#include <cmath>
#include <map>
#include <optional>
#include <set>

namespace kestrel::model {

int canonicalize_ops(Graph& graph) {
  int rewritten = 0;
  for (auto& node : graph.nodes) {
    const bool mean = node.op_type == "ReduceMean", max = node.op_type == "ReduceMax";
    if (!node.domain.empty() || !(mean || max) || node.inputs.size() != 1 || node.outputs.size() != 1) continue;
    if (node.attr_int("keepdims", 1) != 1) continue;
    const ValueInfo* in = graph.value(node.inputs[0]);
    if (!in || in->type != ElemType::f32 || !in->shape || in->shape->size() != 4) continue;
    std::set<std::int64_t> axes;
    for (auto a : node.attr_ints("axes")) axes.insert(a < 0 ? a + 4 : a);
    if (axes != std::set<std::int64_t>{2, 3}) continue;
    node.op_type = mean ? "GlobalAveragePool" : "GlobalMaxPool";
    node.attributes.clear();
    ++rewritten;
  }
  return rewritten;
}

namespace {

// The single value of a one-element f32 (or integer) constant, if `name` is one.
std::optional<double> scalar(const Graph& graph, const std::string& name) {
  const Initializer* init = graph.initializer(name);
  if (!init) return std::nullopt;
  if (init->f32.size() == 1) return static_cast<double>(init->f32[0]);
  if (init->i64.size() == 1 && init->type != ElemType::other) return static_cast<double>(init->i64[0]);
  return std::nullopt;
}

bool near(std::optional<double> v, double want) { return v && std::abs(*v - want) <= 1e-4 * std::abs(want); }

}  // namespace

int fuse_tanh_gelu(Graph& graph) {
  std::map<std::string, std::size_t> producer, readers;
  for (std::size_t i = 0; i < graph.nodes.size(); ++i) {
    for (const auto& out : graph.nodes[i].outputs) producer[out] = i;
    for (const auto& in : graph.nodes[i].inputs) ++readers[in];
  }
  for (const auto& out : graph.outputs) ++readers[out.name];
  auto node_of = [&](const std::string& value, const char* op) -> const Node* {
    auto it = producer.find(value);
    if (it == producer.end()) return nullptr;
    const Node& n = graph.nodes[it->second];
    return n.op_type == op && n.domain.empty() && n.outputs.size() == 1 ? &n : nullptr;
  };
  auto once = [&](const std::string& value) { return readers[value] == 1; };
  // A binary node's input that is not the constant `c` (either order), when the other is.
  auto other_than = [&](const Node& n, double c) -> std::optional<std::string> {
    if (n.inputs.size() != 2) return std::nullopt;
    if (near(scalar(graph, n.inputs[1]), c)) return n.inputs[0];
    if (near(scalar(graph, n.inputs[0]), c)) return n.inputs[1];
    return std::nullopt;
  };
  std::set<std::size_t> dead;
  int fused = 0;
  for (std::size_t i = 0; i < graph.nodes.size(); ++i) {
    Node& y = graph.nodes[i];
    if (y.op_type != "Mul" || !y.domain.empty() || y.inputs.size() != 2 || y.outputs.size() != 1) continue;
    for (int order = 0; order < 2; ++order) {
      const std::string& a_name = y.inputs[order];
      const std::string& e_name = y.inputs[1 - order];
      // a = 0.5 * x, e = 1 + tanh(d)
      const Node* a = node_of(a_name, "Mul");
      const Node* e = node_of(e_name, "Add");
      if (!a || !e || !once(a_name) || !once(e_name)) continue;
      const auto x = other_than(*a, 0.5);
      const auto t_name = other_than(*e, 1.0);
      if (!x || !t_name || !once(*t_name)) continue;
      const Node* t = node_of(*t_name, "Tanh");
      if (!t || t->inputs.size() != 1 || !once(t->inputs[0])) continue;
      // d = sqrt(2/pi) * c, c = x + b, b = 0.044715 * p, p = x^3
      const Node* d = node_of(t->inputs[0], "Mul");
      if (!d) continue;
      const auto c_name = other_than(*d, 0.7978845608028654);
      if (!c_name || !once(*c_name)) continue;
      const Node* c = node_of(*c_name, "Add");
      if (!c || c->inputs.size() != 2) continue;
      const std::string& b_name = c->inputs[0] == *x ? c->inputs[1] : c->inputs[0];
      if ((c->inputs[0] == *x) == (c->inputs[1] == *x) || !once(b_name)) continue;
      const Node* b = node_of(b_name, "Mul");
      if (!b) continue;
      const auto p_name = other_than(*b, 0.044715);
      if (!p_name || !once(*p_name)) continue;
      const Node* p = node_of(*p_name, "Pow");
      if (!p || p->inputs.size() != 2 || p->inputs[0] != *x || !near(scalar(graph, p->inputs[1]), 3.0)) continue;
      for (const std::string* v : {&a_name, &e_name, &*t_name, &t->inputs[0], &*c_name, &b_name, &*p_name}) {
        dead.insert(producer.at(*v));
      }
      const std::string input = *x;
      y.op_type = "Gelu";
      y.inputs = {input};
      y.attributes.clear();
      y.attributes["approximate"].s = "tanh";
      ++fused;
      break;
    }
  }
  if (dead.empty()) return fused;
  std::vector<Node> kept;
  for (std::size_t i = 0; i < graph.nodes.size(); ++i) {
    if (!dead.count(i)) kept.push_back(std::move(graph.nodes[i]));
  }
  graph.nodes = std::move(kept);
  return fused;
}

int hoist_activations_over_reshapes(Graph& graph) {
  static const std::set<std::string> activations = {"Relu", "Gelu", "Sigmoid", "Tanh", "HardSwish", "HardSigmoid"};
  static const std::set<std::string> reshapes = {"Reshape", "Flatten", "Squeeze", "Unsqueeze"};
  std::map<std::string, std::size_t> producer, readers;
  for (std::size_t i = 0; i < graph.nodes.size(); ++i) {
    for (const auto& out : graph.nodes[i].outputs) producer[out] = i;
    for (const auto& in : graph.nodes[i].inputs) ++readers[in];
  }
  for (const auto& out : graph.outputs) ++readers[out.name];
  int moved = 0;
  for (std::size_t a = 0; a < graph.nodes.size(); ++a) {
    Node& act = graph.nodes[a];
    if (!act.domain.empty() || !activations.contains(act.op_type) || act.inputs.size() != 1 || act.outputs.size() != 1) {
      continue;
    }
    const std::string reshaped = act.inputs[0];
    auto p = producer.find(reshaped);
    if (p == producer.end() || readers[reshaped] != 1) continue;
    Node& reshape = graph.nodes[p->second];
    if (!reshape.domain.empty() || !reshapes.contains(reshape.op_type) || reshape.outputs.size() != 1 ||
        reshape.inputs.empty() || readers[reshape.inputs[0]] != 1) {
      continue;
    }
    const ValueInfo* x = graph.value(reshape.inputs[0]);
    if (!x || x->type != ElemType::f32 || graph.initializer(reshape.inputs[0])) continue;
    // act(reshape(x)) -> reshape(act(x)): the activation takes the reshape's place in the
    // order (x is ready there) and the reshape the activation's (nothing between them reads
    // either value), and the reshape now writes the activation's output.
    const std::string result = act.outputs[0];
    const std::string before = result + "/before_reshape";
    const std::size_t r = p->second;
    graph.values[before] = ValueInfo{before, x->type, x->shape};
    act.inputs = {reshape.inputs[0]};
    act.outputs = {before};
    reshape.inputs[0] = before;
    reshape.outputs = {result};
    graph.values.erase(reshaped);
    std::swap(graph.nodes[r], graph.nodes[a]);
    producer[before] = r;
    producer[result] = a;
    ++moved;
  }
  return moved;
}

}  // namespace kestrel::model
