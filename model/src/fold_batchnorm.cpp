// BatchNormalization folding (see fold_batchnorm.h).
#include "fold_batchnorm.h"

#include <cmath>
#include <set>

namespace kestrel::model {

namespace {

const Initializer* f32_initializer(const Graph& graph, const std::string& name, std::size_t elements) {
  const Initializer* init = graph.initializer(name);
  if (!init || init->type != ElemType::f32 || (elements && init->f32.size() != elements)) return nullptr;
  return init;
}

std::string unique_name(const Graph& graph, const std::string& base) {
  std::string name = base;
  for (int i = 1; graph.initializers.contains(name) || graph.values.contains(name); ++i) {
    name = base + "." + std::to_string(i);
  }
  return name;
}

}  // namespace

void fold_batchnorm(Graph& graph) {
  std::map<std::string, int> uses;
  for (const auto& node : graph.nodes) {
    for (const auto& input : node.inputs) ++uses[input];
  }
  std::set<std::string> outputs;
  for (const auto& output : graph.outputs) outputs.insert(output.name);
  std::map<std::string, std::size_t> producer;
  for (std::size_t i = 0; i < graph.nodes.size(); ++i) {
    for (const auto& output : graph.nodes[i].outputs) producer[output] = i;
  }

  std::vector<bool> removed(graph.nodes.size(), false);
  for (std::size_t b = 0; b < graph.nodes.size(); ++b) {
    const Node& bn = graph.nodes[b];
    if (bn.op_type != "BatchNormalization" || bn.inputs.size() != 5 || bn.outputs.size() != 1) continue;
    if (bn.attr_int("training_mode", 0) != 0) continue;
    auto it = producer.find(bn.inputs[0]);
    if (it == producer.end() || removed[it->second]) continue;
    Node& conv = graph.nodes[it->second];
    if (conv.op_type != "Conv" || uses[bn.inputs[0]] != 1 || outputs.contains(bn.inputs[0])) continue;
    const Initializer* weight = f32_initializer(graph, conv.inputs.size() > 1 ? conv.inputs[1] : "", 0);
    if (!weight || weight->shape.empty() || weight->shape[0] < 1) continue;
    const std::int64_t k = weight->shape[0];
    const std::size_t kn = static_cast<std::size_t>(k);
    const bool has_bias = conv.inputs.size() > 2 && !conv.inputs[2].empty();
    const Initializer* bias = has_bias ? f32_initializer(graph, conv.inputs[2], kn) : nullptr;
    const Initializer* scale = f32_initializer(graph, bn.inputs[1], kn);
    const Initializer* shift = f32_initializer(graph, bn.inputs[2], kn);
    const Initializer* mean = f32_initializer(graph, bn.inputs[3], kn);
    const Initializer* var = f32_initializer(graph, bn.inputs[4], kn);
    if ((has_bias && !bias) || !scale || !shift || !mean || !var) continue;
    const float eps = bn.attr_float("epsilon", 1e-5f);

    Initializer new_weight{unique_name(graph, bn.name + ".folded_weight"), ElemType::f32, weight->shape, weight->f32, {}};
    Initializer new_bias{unique_name(graph, bn.name + ".folded_bias"), ElemType::f32, {k}, std::vector<float>(kn), {}};
    const std::size_t per_channel = weight->f32.size() / kn;
    for (std::size_t c = 0; c < kn; ++c) {
      const double factor = scale->f32[c] / std::sqrt(static_cast<double>(var->f32[c]) + eps);
      for (std::size_t j = 0; j < per_channel; ++j) {
        float& w = new_weight.f32[c * per_channel + j];
        w = static_cast<float>(w * factor);
      }
      const double b0 = bias ? bias->f32[c] : 0.0;
      new_bias.f32[c] = static_cast<float>((b0 - mean->f32[c]) * factor + shift->f32[c]);
    }

    // The conv now reads the folded tensors and writes the normalisation's output.
    std::vector<std::string> old_inputs = {conv.inputs[1]};
    if (has_bias) old_inputs.push_back(conv.inputs[2]);
    for (std::size_t i = 1; i < 5; ++i) old_inputs.push_back(bn.inputs[i]);
    graph.values.erase(conv.outputs[0]);
    conv.inputs.resize(3);
    conv.inputs[1] = new_weight.name;
    conv.inputs[2] = new_bias.name;
    conv.outputs[0] = bn.outputs[0];
    conv.attributes[kFoldedAttribute].s = "BatchNormalization";
    for (const auto* init : {&new_weight, &new_bias}) {
      Shape shape;
      for (auto d : init->shape) shape.push_back(Dim{d, {}});
      graph.values[init->name] = ValueInfo{init->name, ElemType::f32, shape};
    }
    graph.initializers[new_weight.name] = std::move(new_weight);
    graph.initializers[new_bias.name] = std::move(new_bias);
    removed[b] = true;
    for (const auto& name : old_inputs) {
      if (--uses[name] == 0 && !outputs.contains(name)) {
        graph.initializers.erase(name);
        graph.values.erase(name);
      }
    }
  }
  std::vector<Node> kept;
  for (std::size_t i = 0; i < graph.nodes.size(); ++i) {
    if (!removed[i]) kept.push_back(std::move(graph.nodes[i]));
  }
  graph.nodes = std::move(kept);
}

}  // namespace kestrel::model
