// The node-to-task mapping (see plan_graph.h). Two passes over the nodes in topological
// order: first the compute anchors (Conv, Gemm, MatMul, pools, Softmax,
// LayerNormalization) with the epilogue nodes they absorb, then the elementwise nodes
// left; whatever is left runs as a portable step and is listed as untuned with a reason.
#include "plan_graph.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>
#include <optional>
#include <set>
#include <stdexcept>
#include <variant>

#include "fold_batchnorm.h"

namespace kestrel::model {

namespace {

using Dims = std::vector<std::int64_t>;

// A match: the op, its workload, its arguments in the op's tensor order, the nodes it covers.
struct Candidate {
  std::string op;
  ops::Params params;
  std::vector<StepArg> args;
  std::vector<std::size_t> nodes;
  std::string pattern;
};

// Either a candidate, or why the anchor node cannot be tuned.
struct Outcome {
  std::optional<Candidate> candidate;
  std::string reason;
};

Outcome refuse(std::string reason) { return {std::nullopt, std::move(reason)}; }

std::int64_t product(const Dims& dims, std::size_t from = 0, std::size_t to = std::string::npos) {
  std::int64_t n = 1;
  for (std::size_t i = from; i < std::min(to, dims.size()); ++i) n *= dims[i];
  return n;
}

std::string join(const Dims& dims) {
  std::string out;
  for (auto d : dims) out += (out.empty() ? "" : ",") + std::to_string(d);
  return out;
}

bool close_to(float value, double target) { return std::abs(value - target) <= 1e-4 * std::abs(target); }

// Reasons for data movement and shape computation: no arithmetic to tune.
const std::set<std::string>& layout_ops() {
  static const std::set<std::string> ops = {"Reshape", "Transpose", "Flatten", "Squeeze", "Unsqueeze", "Concat",
                                            "Split", "Slice", "Gather", "Shape", "Identity", "Expand", "Cast",
                                            "ConstantOfShape", "Tile", "Pad", "Dropout", "Range"};
  return ops;
}

class Planner {
 public:
  Planner(const Graph& graph, std::int64_t block, const ops::Registry& registry, bool winograd, std::int64_t gemm_panels)
      : graph_(graph), block_(block), registry_(registry),
        winograd_(winograd && registry.find("conv2d_winograd") != nullptr), gemm_panels_(gemm_panels), covered_(graph.nodes.size(), false),
        reasons_(graph.nodes.size()) {
    for (std::size_t i = 0; i < graph.nodes.size(); ++i) {
      for (const auto& input : graph.nodes[i].inputs) {
        if (!input.empty()) consumers_[input].push_back(i);
      }
    }
    for (const auto& output : graph.outputs) graph_outputs_.insert(output.name);
  }

  Plan run() {
    Plan plan;
    plan.block = block_;
    std::vector<std::pair<std::size_t, Step>> placed;  // by the index of a step's last node
    std::map<std::string, std::size_t> task_index;
    auto accept = [&](Candidate c) {
      const ops::Op& op = registry_.get(c.op, ops::Backend::cpu);
      std::string key = c.op + "/" + ops::format_params(c.params);
      auto [it, added] = task_index.emplace(key, plan.tasks.size());
      if (added) {
        ModelTask task;
        task.label = c.pattern + " " + ops::format_params(c.params);
        task.op = &op;
        task.params = c.params;
        task.pattern = c.pattern;
        task.flops = op.flops(c.params);
        plan.tasks.push_back(std::move(task));
      }
      ++plan.tasks[it->second].occurrences;
      std::sort(c.nodes.begin(), c.nodes.end());
      for (auto n : c.nodes) covered_[n] = true;
      Step step;
      step.kind = Step::Kind::task;
      step.task = it->second;
      step.nodes = c.nodes;
      step.args = std::move(c.args);
      placed.emplace_back(c.nodes.back(), std::move(step));
    };
    for (int pass = 0; pass < 2; ++pass) {
      for (std::size_t i = 0; i < graph_.nodes.size(); ++i) {
        if (covered_[i]) continue;
        Outcome outcome = pass == 0 ? match_anchor(i) : match_elementwise(i);
        if (outcome.candidate) {
          accept(std::move(*outcome.candidate));
        } else if (!outcome.reason.empty() && reasons_[i].empty()) {
          reasons_[i] = outcome.reason;
        }
      }
    }
    std::map<std::pair<std::string, std::string>, std::size_t> untuned_index;
    for (std::size_t i = 0; i < graph_.nodes.size(); ++i) {
      if (covered_[i]) continue;
      const Node& node = graph_.nodes[i];
      std::string reason = !reasons_[i].empty()                  ? reasons_[i]
                           : layout_ops().contains(node.op_type) ? "layout operator"
                                                                 : "no Kestrel op";
      auto [it, added] = untuned_index.emplace(std::make_pair(node.op_type, reason), plan.untuned.size());
      if (added) plan.untuned.push_back(Untuned{node.op_type, reason, 0, 0});
      ++plan.untuned[it->second].occurrences;
      plan.untuned[it->second].flops += estimate_flops(node);
      Step step;
      step.kind = Step::Kind::portable;
      step.nodes = {i};
      placed.emplace_back(i, std::move(step));
    }
    std::stable_sort(placed.begin(), placed.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    // Tasks in order of first appearance in the model.
    std::vector<std::size_t> order, renumber(plan.tasks.size());
    for (auto& [index, step] : placed) {
      if (step.kind == Step::Kind::task && std::find(order.begin(), order.end(), step.task) == order.end()) {
        renumber[step.task] = order.size();
        order.push_back(step.task);
      }
    }
    std::vector<ModelTask> tasks;
    for (auto t : order) tasks.push_back(std::move(plan.tasks[t]));
    plan.tasks = std::move(tasks);
    for (auto& [index, step] : placed) {
      if (step.kind == Step::Kind::task) step.task = renumber[step.task];
      plan.steps.push_back(std::move(step));
    }
    for (const auto& task : plan.tasks) plan.total_flops += task.flops * task.occurrences;
    for (const auto& u : plan.untuned) plan.total_flops += u.flops;
    return plan;
  }

 private:
  // ---- graph queries -------------------------------------------------------------
  const Initializer* constant(const std::string& name) const { return graph_.initializer(name); }
  bool activation(const std::string& name) const { return !name.empty() && !constant(name); }

  Dims dims(const std::string& name) const {
    if (const Initializer* init = constant(name)) return init->shape;
    const ValueInfo* value = graph_.value(name);
    if (!value || !value->shape) throw std::logic_error("plan: value '" + name + "' has no shape in a bound graph");
    Dims out;
    for (const auto& d : *value->shape) out.push_back(d.value);
    return out;
  }

  std::optional<float> scalar(const std::string& name) const {
    const Initializer* init = constant(name);
    if (!init || init->type != ElemType::f32 || init->f32.size() != 1) return std::nullopt;
    return init->f32[0];
  }

  // The one uncovered node that reads `value`, when nothing else (no other node, no graph
  // output) does.
  std::optional<std::size_t> sole_consumer(const std::string& value) const {
    auto it = consumers_.find(value);
    if (it == consumers_.end() || graph_outputs_.contains(value)) return std::nullopt;
    std::set<std::size_t> distinct(it->second.begin(), it->second.end());
    if (distinct.size() != 1 || covered_[*distinct.begin()]) return std::nullopt;
    return *distinct.begin();
  }

  const Node& node(std::size_t i) const { return graph_.nodes[i]; }

  // The other input of a two-input node, given one of them.
  static std::optional<std::string> other_input(const Node& n, const std::string& one) {
    if (n.inputs.size() != 2) return std::nullopt;
    if (n.inputs[0] == one) return n.inputs[1];
    if (n.inputs[1] == one) return n.inputs[0];
    return std::nullopt;
  }

  // ---- epilogues -------------------------------------------------------------------
  struct Epilogue {
    std::int64_t act = 0;
    std::vector<std::size_t> nodes;
    std::string output;
    std::string pattern;
  };

  // Activation codes of the ops' `act` parameter (KESTREL_ACT_* of kestrel/kernel/math.h).
  enum Act : std::int64_t { kRelu = 1, kRelu6 = 2, kGelu = 3, kSigmoid = 4, kSilu = 5, kHardSwish = 6, kHardSigmoid = 7,
                            kTanh = 8, kGeluTanh = 9 };

  // HardSigmoid with torch's constants, alpha = 1/6 and beta = 1/2 (to a few float ulps);
  // ONNX's default alpha of 0.2 is another function.
  static bool torch_hardsigmoid(const Node& n) {
    return n.op_type == "HardSigmoid" && std::abs(n.attr_float("alpha", 0.2f) - 1.0 / 6.0) <= 1e-6 &&
           std::abs(n.attr_float("beta", 0.5f) - 0.5) <= 1e-6;
  }

  // The activation reading `value` alone: Relu, Clip(0, 6), Sigmoid, Tanh, HardSwish,
  // HardSigmoid (torch's constants); else x * Sigmoid(x) or x * HardSigmoid(x) (SiLU,
  // HardSwish: `value` read by exactly those two nodes); else, when `gelu`, the erf GELU
  // subgraph.
  std::optional<Epilogue> match_act(const std::string& value, bool gelu) const {
    auto next = sole_consumer(value);
    if (next) {
      const Node& n = node(*next);
      if (n.inputs.empty() || n.inputs[0] != value) return std::nullopt;
      if (n.op_type == "Relu") return Epilogue{kRelu, {*next}, n.outputs[0], "Relu"};
      if (n.op_type == "Clip" && n.inputs.size() == 3) {
        auto lo = scalar(n.inputs[1]), hi = scalar(n.inputs[2]);
        if (lo && hi && *lo == 0.0f && *hi == 6.0f) return Epilogue{kRelu6, {*next}, n.outputs[0], "Clip"};
      }
      if (n.op_type == "Sigmoid") return Epilogue{kSigmoid, {*next}, n.outputs[0], "Sigmoid"};
      if (n.op_type == "Tanh") return Epilogue{kTanh, {*next}, n.outputs[0], "Tanh"};
      if (n.op_type == "Gelu") {
        // ONNX's Gelu (opset 20), and the node canonical_ops.h makes of torch's tanh GELU.
        const auto a = n.attributes.find("approximate");
        const std::string approximate = a != n.attributes.end() && a->second.s ? *a->second.s : "none";
        if (approximate == "none") return Epilogue{kGelu, {*next}, n.outputs[0], "Gelu"};
        if (approximate == "tanh") return Epilogue{kGeluTanh, {*next}, n.outputs[0], "Gelu"};
        return std::nullopt;
      }
      if (n.op_type == "HardSwish") return Epilogue{kHardSwish, {*next}, n.outputs[0], "HardSwish"};
      if (torch_hardsigmoid(n)) return Epilogue{kHardSigmoid, {*next}, n.outputs[0], "HardSigmoid"};
      return std::nullopt;
    }
    if (auto gate = match_gated(value)) return gate;
    if (gelu) return match_gelu(value);
    return std::nullopt;
  }

  // x * Sigmoid(x) (SiLU) or x * HardSigmoid(x) (HardSwish), the Mul's operands in either
  // order: x read by the gate and the Mul only, the gate's output by the Mul only.
  std::optional<Epilogue> match_gated(const std::string& x) const {
    auto it = consumers_.find(x);
    if (it == consumers_.end() || graph_outputs_.contains(x)) return std::nullopt;
    const std::set<std::size_t> readers(it->second.begin(), it->second.end());
    if (readers.size() != 2 || it->second.size() != 2) return std::nullopt;
    for (auto gate_i : readers) {
      const Node& gate = node(gate_i);
      if (covered_[gate_i] || gate.inputs.size() != 1 || gate.inputs[0] != x || gate.outputs.empty()) continue;
      const bool sigmoid = gate.op_type == "Sigmoid";
      if (!sigmoid && !torch_hardsigmoid(gate)) continue;
      auto mul_i = sole_consumer(gate.outputs[0]);
      if (!mul_i || !readers.contains(*mul_i) || node(*mul_i).op_type != "Mul" ||
          other_input(node(*mul_i), gate.outputs[0]) != x) {
        continue;
      }
      std::vector<std::size_t> nodes = {gate_i, *mul_i};
      std::sort(nodes.begin(), nodes.end());
      return Epilogue{sigmoid ? kSilu : kHardSwish, nodes, node(*mul_i).outputs[0],
                      gate.op_type + "+Mul"};
    }
    return std::nullopt;
  }

  // x * 0.5 * (1 + Erf(x / sqrt(2))) in its usual association orders: the scale by
  // 1/sqrt(2) as a Div or a Mul, the 0.5 applied to x, to (1 + erf) or to the product.
  std::optional<Epilogue> match_gelu(const std::string& x) const {
    auto it = consumers_.find(x);
    if (it == consumers_.end() || graph_outputs_.contains(x) || it->second.size() != 2) return std::nullopt;
    for (auto i : it->second) {
      if (covered_[i]) return std::nullopt;
    }
    auto is_half = [&](const std::string& name) {
      auto v = scalar(name);
      return v && close_to(*v, 0.5);
    };
    for (int pick = 0; pick < 2; ++pick) {
      const std::size_t scale_i = it->second[static_cast<std::size_t>(pick)];
      const std::size_t other_i = it->second[static_cast<std::size_t>(1 - pick)];
      const Node& scale = node(scale_i);
      bool scaled = false;
      if (scale.op_type == "Div" && scale.inputs.size() == 2 && scale.inputs[0] == x) {
        auto c = scalar(scale.inputs[1]);
        scaled = c && close_to(*c, std::sqrt(2.0));
      } else if (scale.op_type == "Mul") {
        auto o = other_input(scale, x);
        auto c = o ? scalar(*o) : std::nullopt;
        scaled = c && close_to(*c, 1.0 / std::sqrt(2.0));
      }
      if (!scaled) continue;
      auto erf_i = sole_consumer(scale.outputs[0]);
      if (!erf_i || node(*erf_i).op_type != "Erf") continue;
      auto add_i = sole_consumer(node(*erf_i).outputs[0]);
      if (!add_i || node(*add_i).op_type != "Add") continue;
      auto one = other_input(node(*add_i), node(*erf_i).outputs[0]);
      auto one_value = one ? scalar(*one) : std::nullopt;
      if (!one_value || !close_to(*one_value, 1.0)) continue;
      const std::string e = node(*add_i).outputs[0];
      auto a_i = sole_consumer(e);
      if (!a_i || node(*a_i).op_type != "Mul") continue;
      const Node& a = node(*a_i);
      auto a_other = other_input(a, e);
      if (!a_other) continue;
      std::vector<std::size_t> nodes = {scale_i, *erf_i, *add_i, *a_i};
      std::optional<std::size_t> last;
      if (*a_other == x && *a_i == other_i) {
        // (x * e) * 0.5
        auto c_i = sole_consumer(a.outputs[0]);
        if (c_i && node(*c_i).op_type == "Mul") {
          auto half = other_input(node(*c_i), a.outputs[0]);
          if (half && is_half(*half)) last = c_i;
        }
      } else if (is_half(*a_other)) {
        // x * (e * 0.5)
        auto c_i = sole_consumer(a.outputs[0]);
        if (c_i && *c_i == other_i && node(*c_i).op_type == "Mul" && other_input(node(*c_i), a.outputs[0]) == x) {
          last = c_i;
        }
      } else {
        // (x * 0.5) * e
        const Node& b = node(other_i);
        if (b.op_type == "Mul" && b.outputs[0] == *a_other && sole_consumer(b.outputs[0]) == *a_i) {
          auto half = other_input(b, x);
          if (half && is_half(*half)) {
            nodes.push_back(other_i);
            last = a_i;
          }
        }
      }
      if (!last) continue;
      if (*last != *a_i) nodes.push_back(*last);
      std::sort(nodes.begin(), nodes.end());
      return Epilogue{kGelu, nodes, node(*last).outputs[0], "Gelu"};
    }
    return std::nullopt;
  }

  // ---- validation ------------------------------------------------------------------
  // The workload normalised as the op writes it (optional params at their fallback left
  // out), checked by the op; the reason when refused.
  Outcome finish(Candidate c) const {
    const ops::Op& op = registry_.get(c.op, ops::Backend::cpu);
    c.params = ops::normalize_params(op, std::move(c.params));
    try {
      op.validate(c.params);
    } catch (const ops::OpError& e) {
      return refuse(e.what());
    }
    std::size_t tensors = op.tensors(c.params).size();
    if (tensors != c.args.size()) {
      throw std::logic_error("plan: " + c.op + " takes " + std::to_string(tensors) + " tensors, the plan gives " +
                             std::to_string(c.args.size()));
    }
    return {std::move(c), {}};
  }

  // ---- anchors ---------------------------------------------------------------------
  Outcome match_anchor(std::size_t i) const {
    const std::string& type = node(i).op_type;
    if (type == "Conv") return match_conv(i);
    if (type == "Gemm" || type == "MatMul") return match_matmul(i);
    if (type == "MaxPool" || type == "AveragePool" || type == "GlobalAveragePool" || type == "GlobalMaxPool") {
      return match_pool(i);
    }
    if (type == "Softmax") return match_softmax(i);
    if (type == "LayerNormalization") return match_layernorm(i);
    return {};
  }

  // Symmetric, equal padding of a 2-D window (from pads or auto_pad); the reason otherwise.
  std::variant<std::int64_t, std::string> window_pad(const Node& n, const Dims& in, std::int64_t r, std::int64_t s,
                                                     std::int64_t stride, std::int64_t dilation) const {
    Dims pads = n.attr_ints("pads");
    auto it = n.attributes.find("auto_pad");
    const std::string auto_pad = it != n.attributes.end() && it->second.s ? *it->second.s : "NOTSET";
    if (auto_pad == "VALID") {
      pads = {0, 0, 0, 0};
    } else if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
      pads.assign(4, 0);
      const std::int64_t window[2] = {r, s};
      for (int d = 0; d < 2; ++d) {
        std::int64_t size = in[static_cast<std::size_t>(2 + d)];
        std::int64_t out = (size + stride - 1) / stride;
        std::int64_t total = std::max<std::int64_t>((out - 1) * stride + (window[d] - 1) * dilation + 1 - size, 0);
        std::int64_t small = total / 2, large = total - small;
        pads[static_cast<std::size_t>(d)] = auto_pad == "SAME_UPPER" ? small : large;
        pads[static_cast<std::size_t>(d + 2)] = auto_pad == "SAME_UPPER" ? large : small;
      }
    }
    if (pads.empty()) pads = {0, 0, 0, 0};
    if (pads.size() != 4) return std::string("pads of a 2-D window must have 4 values");
    if (pads[0] != pads[2] || pads[1] != pads[3]) return "asymmetric padding (pads " + join(pads) + ")";
    if (pads[0] != pads[1]) return "different padding per dimension (pads " + join(pads) + ")";
    return pads[0];
  }

  // stride and dilation equal in both dimensions; the reason otherwise.
  static std::variant<std::int64_t, std::string> equal_pair(const Node& n, const std::string& key) {
    Dims v = n.attr_ints(key);
    if (v.empty()) return std::int64_t{1};
    if (v.size() != 2) return key + " of a 2-D window must have 2 values";
    if (v[0] != v[1]) return "unequal " + key + " (" + join(v) + ")";
    return v[0];
  }

  Outcome match_conv(std::size_t i) const {
    const Node& conv = node(i);
    if (conv.inputs.size() < 2 || !activation(conv.inputs[0])) return refuse("convolution of a constant");
    const Initializer* weight = constant(conv.inputs[1]);
    if (!weight || weight->type != ElemType::f32) return refuse("weights are not a constant (an initializer)");
    const Dims x = dims(conv.inputs[0]);
    const Dims& w = weight->shape;
    if (x.size() != 4 || w.size() != 4) return refuse("not a 2-D convolution");
    auto stride = equal_pair(conv, "strides");
    if (auto* why = std::get_if<std::string>(&stride)) return refuse(*why);
    auto dilation = equal_pair(conv, "dilations");
    if (auto* why = std::get_if<std::string>(&dilation)) return refuse(*why);
    auto pad = window_pad(conv, x, w[2], w[3], std::get<std::int64_t>(stride), std::get<std::int64_t>(dilation));
    if (auto* why = std::get_if<std::string>(&pad)) return refuse(*why);
    const std::int64_t groups = conv.attr_int("group", 1);
    const std::int64_t c = x[1], k = w[0];
    const bool has_bias = conv.inputs.size() > 2 && !conv.inputs[2].empty();
    if (has_bias && !constant(conv.inputs[2])) return refuse("bias is not a constant (an initializer)");

    Candidate cand;
    cand.nodes = {i};
    cand.pattern = "Conv";
    if (auto it = conv.attributes.find(kFoldedAttribute); it != conv.attributes.end() && it->second.s) {
      cand.pattern += "+" + *it->second.s;
    }
    cand.params = {{"N", x[0]},   {"C", c},    {"H", x[2]},
                   {"W", x[3]},   {"R", w[2]}, {"S", w[3]},
                   {"stride", std::get<std::int64_t>(stride)}, {"pad", std::get<std::int64_t>(pad)},
                   {"dilation", std::get<std::int64_t>(dilation)}};
    bool blocked = true;
    // A 3x3 stride-1 convolution without groups or dilation, and its output's pixels.
    const bool winograd_shape = winograd_ && groups == 1 && w[2] == 3 && w[3] == 3 &&
                                std::get<std::int64_t>(stride) == 1 && std::get<std::int64_t>(dilation) == 1;
    const std::int64_t padding = std::get<std::int64_t>(pad);
    const std::int64_t out_pixels = (x[2] + 2 * padding - 2) * (x[3] + 2 * padding - 2);
    if (winograd_shape && c >= block_ && out_pixels >= kWinogradMinPixels) {
      const bool f4 = out_pixels >= kWinograd4MinPixels;
      cand.op = "conv2d_winograd";
      cand.params["K"] = k;
      if (!f4) cand.params["m"] = 2;
      cand.args = {{conv.inputs[0], ArgLayout::nchwc},
                   {conv.inputs[1], f4 ? ArgLayout::winograd_weight : ArgLayout::winograd2_weight}};
    } else if (groups == 1 || ((c / groups) % block_ == 0 && (k / groups) % block_ == 0 && c % groups == 0)) {
      cand.op = "conv2d_nchwc";
      cand.params["K"] = k;
      cand.params["groups"] = groups;
      cand.args = {{conv.inputs[0], ArgLayout::nchwc}, {conv.inputs[1], ArgLayout::conv_weight}};
      // Fewer channels than a block (an RGB image): the kernel reads the plain input
      // itself, so no blocked copy of it is made.
      if (groups == 1 && c < block_) {
        cand.params["plain_in"] = 1;
        cand.args[0].layout = ArgLayout::plain;
      }
    } else if (groups == c && groups == k && w[1] == 1) {
      cand.op = "depthwise_conv2d";
      cand.args = {{conv.inputs[0], ArgLayout::nchwc}, {conv.inputs[1], ArgLayout::dw_weight}};
    } else {
      blocked = false;
      if (has_bias) return refuse("grouped convolution with a bias (conv2d has no bias epilogue)");
      cand.op = "conv2d";
      cand.params["K"] = k;
      cand.params["groups"] = groups;
      cand.args = {{conv.inputs[0], ArgLayout::plain}, {conv.inputs[1], ArgLayout::plain}};
    }
    std::string out = conv.outputs[0];
    if (blocked) {
      cand.params["block"] = block_;
      if (has_bias) {
        cand.params["bias"] = 1;
        cand.args.push_back({conv.inputs[2], ArgLayout::channel_vector});
      }
      // A residual Add of the output's shape.
      if (auto add_i = sole_consumer(out); add_i && node(*add_i).op_type == "Add") {
        const Node& add = node(*add_i);
        auto other = other_input(add, out);
        if (other && *other != out && activation(*other) && dims(*other) == dims(out) &&
            dims(add.outputs[0]) == dims(out)) {
          cand.params["residual"] = 1;
          cand.args.push_back({*other, ArgLayout::nchwc});
          cand.nodes.push_back(*add_i);
          cand.pattern += "+Add";
          out = add.outputs[0];
        }
      }
      if (auto act = match_act(out, false)) {
        cand.params["act"] = act->act;
        cand.nodes.insert(cand.nodes.end(), act->nodes.begin(), act->nodes.end());
        cand.pattern += "+" + act->pattern;
        out = act->output;
      }
    }
    cand.args.push_back({out, blocked ? ArgLayout::nchwc : ArgLayout::plain});
    return finish(std::move(cand));
  }

  // A gemm candidate's constant float B (args[1]) in column panels (PlanOptions::
  // gemm_panels), when B has at least a panel's width of columns.
  void in_panels(Candidate& cand, const std::string& b_name, std::int64_t n, bool trans_b) const {
    const Initializer* b = constant(b_name);
    if (gemm_panels_ <= 0 || !b || b->type != ElemType::f32 || n < gemm_panels_) return;
    cand.params["panels"] = gemm_panels_;
    cand.args[1].layout = trans_b ? ArgLayout::gemm_panels_transposed : ArgLayout::gemm_panels;
  }

  Outcome match_matmul(std::size_t i) const {
    const Node& mm = node(i);
    if (mm.inputs.size() < 2) return refuse("malformed");
    const std::string& a_name = mm.inputs[0];
    const std::string& b_name = mm.inputs[1];
    if (!activation(a_name)) return refuse("constant left operand");
    const Dims a = dims(a_name), b = dims(b_name);
    Candidate cand;
    cand.pattern = mm.op_type;
    cand.nodes = {i};
    std::string out = mm.outputs[0];
    bool bias_from_c = false;
    if (mm.op_type == "Gemm") {
      if (mm.attr_float("alpha", 1.0f) != 1.0f || mm.attr_float("beta", 1.0f) != 1.0f) {
        return refuse("alpha or beta other than 1");
      }
      if (mm.attr_int("transA", 0) != 0) return refuse("transA=1");
      const bool trans_b = mm.attr_int("transB", 0) != 0;
      if (a.size() != 2 || b.size() != 2) return refuse("operands are not 2-D");
      if (trans_b && !constant(b_name)) return refuse("transB=1 of an activation");
      cand.op = "gemm";
      const std::int64_t n = trans_b ? b[0] : b[1];
      cand.params = {{"M", a[0]}, {"K", a[1]}, {"N", n}};
      cand.args = {{a_name, ArgLayout::plain}, {b_name, trans_b ? ArgLayout::transposed : ArgLayout::plain}};
      in_panels(cand, b_name, n, trans_b);
      if (mm.inputs.size() > 2 && !mm.inputs[2].empty()) {
        const Initializer* c = constant(mm.inputs[2]);
        if (!c || c->type != ElemType::f32 || product(c->shape) != n || c->shape.empty() || c->shape.back() != n) {
          return refuse("C is not a bias vector of N values");
        }
        cand.params["bias"] = 1;
        cand.args.push_back({mm.inputs[2], ArgLayout::plain});
        bias_from_c = true;
      }
    } else if (constant(b_name)) {
      if (b.size() != 2) return refuse("constant right operand is not 2-D");
      if (a.size() < 2) return refuse("left operand is a vector");
      cand.op = "gemm";
      cand.params = {{"M", product(a, 0, a.size() - 1)}, {"K", a.back()}, {"N", b[1]}};
      cand.args = {{a_name, ArgLayout::plain}, {b_name, ArgLayout::plain}};
      in_panels(cand, b_name, b[1], false);
    } else {
      if (a.size() < 3 || b.size() != a.size()) {
        return refuse("product of activations of rank " + std::to_string(a.size()) + " and " +
                      std::to_string(b.size()) + " (batch_matmul needs equal ranks of at least 3)");
      }
      if (!std::equal(a.begin(), a.end() - 2, b.begin())) return refuse("broadcast batch dimensions");
      cand.op = "batch_matmul";
      cand.params = {{"batch", product(a, 0, a.size() - 2)},
                     {"M", a[a.size() - 2]},
                     {"K", a.back()},
                     {"N", b.back()}};
      cand.args = {{a_name, ArgLayout::plain}, {b_name, ArgLayout::plain}, {out, ArgLayout::plain}};
      return finish(std::move(cand));
    }
    const std::int64_t n = cand.params.at("N");
    if (!bias_from_c) {
      if (auto add_i = sole_consumer(out); add_i && node(*add_i).op_type == "Add") {
        auto other = other_input(node(*add_i), out);
        const Initializer* bias = other ? constant(*other) : nullptr;
        if (bias && bias->type == ElemType::f32 && bias->shape == Dims{n}) {
          cand.params["bias"] = 1;
          cand.args.push_back({*other, ArgLayout::plain});
          cand.nodes.push_back(*add_i);
          cand.pattern += "+Add";
          out = node(*add_i).outputs[0];
        }
      }
    }
    if (auto act = match_act(out, true)) {
      cand.params["act"] = act->act;
      cand.nodes.insert(cand.nodes.end(), act->nodes.begin(), act->nodes.end());
      cand.pattern += "+" + act->pattern;
      out = act->output;
    }
    cand.args.push_back({out, ArgLayout::plain});
    return finish(std::move(cand));
  }

  Outcome match_pool(std::size_t i) const {
    const Node& pool = node(i);
    const Dims x = dims(pool.inputs[0]);
    if (x.size() != 4) return refuse("not a 2-D pooling");
    if (pool.outputs.size() > 1 && !pool.outputs[1].empty()) return refuse("indices output");
    Candidate cand;
    cand.op = "pool2d";
    cand.pattern = pool.op_type;
    cand.nodes = {i};
    cand.params = {{"N", x[0]}, {"C", x[1]}, {"H", x[2]}, {"W", x[3]}, {"block", block_}};
    const bool max = pool.op_type == "MaxPool" || pool.op_type == "GlobalMaxPool";
    cand.params["kind"] = max ? 0 : 1;
    if (pool.op_type.starts_with("Global")) {
      cand.params["global"] = 1;
    } else {
      Dims kernel = pool.attr_ints("kernel_shape");
      if (kernel.size() != 2) return refuse("not a 2-D pooling");
      auto stride = equal_pair(pool, "strides");
      if (auto* why = std::get_if<std::string>(&stride)) return refuse(*why);
      if (auto d = pool.attr_ints("dilations"); !d.empty() && (d[0] != 1 || d[1] != 1)) return refuse("dilated window");
      if (pool.attr_int("storage_order", 0) != 0) return refuse("column-major storage order");
      auto pad = window_pad(pool, x, kernel[0], kernel[1], std::get<std::int64_t>(stride), 1);
      if (auto* why = std::get_if<std::string>(&pad)) return refuse(*why);
      const std::int64_t p = std::get<std::int64_t>(pad), st = std::get<std::int64_t>(stride);
      if (!max && p > 0 && pool.attr_int("count_include_pad", 0) != 0) {
        return refuse("count_include_pad=1 (Kestrel's average leaves the padding out)");
      }
      const Dims y = dims(pool.outputs[0]);
      if (y.size() != 4 || y[2] != (x[2] + 2 * p - kernel[0]) / st + 1 || y[3] != (x[3] + 2 * p - kernel[1]) / st + 1) {
        return refuse("ceil_mode=1 changes the output size");
      }
      cand.params["R"] = kernel[0];
      cand.params["S"] = kernel[1];
      cand.params["stride"] = st;
      cand.params["pad"] = p;
    }
    cand.args = {{pool.inputs[0], ArgLayout::nchwc}, {pool.outputs[0], ArgLayout::nchwc}};
    return finish(std::move(cand));
  }

  // The axis attribute normalised to [0, rank); the default differs by operator.
  static std::int64_t axis_of(const Node& n, std::int64_t fallback, std::size_t rank) {
    std::int64_t axis = n.attr_int("axis", fallback);
    return axis < 0 ? axis + static_cast<std::int64_t>(rank) : axis;
  }

  Outcome match_softmax(std::size_t i) const {
    const Node& sm = node(i);
    const Dims x = dims(sm.inputs[0]);
    if (x.empty()) return refuse("scalar input");
    const std::int64_t fallback = graph_.opset >= 13 ? -1 : 1;
    if (axis_of(sm, fallback, x.size()) != static_cast<std::int64_t>(x.size()) - 1) return refuse("axis is not the last");
    Candidate cand;
    cand.op = "softmax";
    cand.pattern = "Softmax";
    cand.nodes = {i};
    cand.params = {{"rows", product(x, 0, x.size() - 1)}, {"cols", x.back()}};
    std::string out = sm.outputs[0];
    if (auto guard = match_nan_guard(out)) {
      cand.params["nan_zero"] = 1;
      cand.nodes.insert(cand.nodes.end(), guard->nodes.begin(), guard->nodes.end());
      cand.pattern += "+" + guard->pattern;
      out = guard->output;
    }
    cand.args = {{sm.inputs[0], ArgLayout::plain}, {out, ArgLayout::plain}};
    return finish(std::move(cand));
  }

  // Where(IsNaN(y), 0, y), which torch's attention exports put after the softmax (a row
  // masked whole gives NaN): y read by those two nodes alone, the IsNaN's output by the
  // Where alone, the replacement a constant 0.
  std::optional<Epilogue> match_nan_guard(const std::string& y) const {
    auto it = consumers_.find(y);
    if (it == consumers_.end() || graph_outputs_.contains(y) || it->second.size() != 2) return std::nullopt;
    for (int pick = 0; pick < 2; ++pick) {
      const std::size_t nan_i = it->second[static_cast<std::size_t>(pick)];
      const std::size_t where_i = it->second[static_cast<std::size_t>(1 - pick)];
      const Node& isnan = node(nan_i);
      const Node& where = node(where_i);
      if (covered_[nan_i] || covered_[where_i] || isnan.op_type != "IsNaN" || where.op_type != "Where") continue;
      if (isnan.inputs.size() != 1 || isnan.outputs.size() != 1 || sole_consumer(isnan.outputs[0]) != where_i) continue;
      if (where.inputs.size() != 3 || where.inputs[0] != isnan.outputs[0] || where.inputs[2] != y) continue;
      auto zero = scalar(where.inputs[1]);
      if (!zero || *zero != 0.0f || dims(where.outputs[0]) != dims(y)) continue;
      std::vector<std::size_t> nodes = {nan_i, where_i};
      std::sort(nodes.begin(), nodes.end());
      return Epilogue{0, nodes, where.outputs[0], "IsNaN+Where"};
    }
    return std::nullopt;
  }

  Outcome match_layernorm(std::size_t i) const {
    const Node& ln = node(i);
    const Dims x = dims(ln.inputs[0]);
    if (x.empty()) return refuse("scalar input");
    if (axis_of(ln, -1, x.size()) != static_cast<std::int64_t>(x.size()) - 1) return refuse("axis is not the last");
    for (std::size_t o = 1; o < ln.outputs.size(); ++o) {
      if (!ln.outputs[o].empty() && consumers_.contains(ln.outputs[o])) return refuse("mean or deviation output used");
    }
    if (ln.inputs.size() < 3 || ln.inputs[2].empty()) return refuse("no bias input");
    const Initializer* gamma = constant(ln.inputs[1]);
    const Initializer* beta = constant(ln.inputs[2]);
    if (!gamma || !beta || product(gamma->shape) != x.back() || product(beta->shape) != x.back()) {
      return refuse("scale or bias is not a constant vector of the last dimension");
    }
    const float eps = ln.attr_float("epsilon", 1e-5f);
    const double k = std::round(-std::log10(static_cast<double>(eps)));
    if (!(eps > 0) || std::abs(std::pow(10.0, -k) - eps) > 1e-3 * eps) {
      return refuse("epsilon " + std::to_string(eps) + " is not a power of ten");
    }
    Candidate cand;
    cand.op = "layernorm";
    cand.pattern = "LayerNormalization";
    cand.nodes = {i};
    cand.params = {{"rows", product(x, 0, x.size() - 1)}, {"cols", x.back()}, {"eps", static_cast<std::int64_t>(k)}};
    std::string input = ln.inputs[0];
    std::optional<std::string> residual;
    if (auto producer = producer_of(input)) {
      const Node& add = node(*producer);
      if (add.op_type == "Add" && !covered_[*producer] && sole_consumer(input) == i && add.inputs.size() == 2 &&
          activation(add.inputs[0]) && activation(add.inputs[1]) && dims(add.inputs[0]) == x &&
          dims(add.inputs[1]) == x) {
        cand.nodes.insert(cand.nodes.begin(), *producer);
        cand.pattern = "Add+LayerNormalization";
        cand.params["residual"] = 1;
        input = add.inputs[0];
        residual = add.inputs[1];
      }
    }
    cand.args = {{input, ArgLayout::plain}, {ln.inputs[1], ArgLayout::plain}, {ln.inputs[2], ArgLayout::plain}};
    if (residual) cand.args.push_back({*residual, ArgLayout::plain});
    cand.args.push_back({ln.outputs[0], ArgLayout::plain});
    return finish(std::move(cand));
  }

  std::optional<std::size_t> producer_of(const std::string& value) const {
    for (std::size_t i = 0; i < graph_.nodes.size(); ++i) {
      for (const auto& o : graph_.nodes[i].outputs) {
        if (o == value) return i;
      }
    }
    return std::nullopt;
  }

  // ---- elementwise -----------------------------------------------------------------
  Outcome match_elementwise(std::size_t i) const {
    const Node& n = node(i);
    static const std::map<std::string, std::int64_t> binary = {{"Add", 0}, {"Sub", 1}, {"Mul", 2}};
    static const std::map<std::string, std::int64_t> unary = {{"Relu", 3}, {"Sigmoid", 6}, {"Tanh", 7}};
    Candidate cand;
    cand.op = "elementwise";
    cand.pattern = n.op_type;
    cand.nodes = {i};
    if (auto it = binary.find(n.op_type); it != binary.end()) {
      if (n.inputs.size() != 2 || !activation(n.inputs[0]) || !activation(n.inputs[1])) {
        return refuse("constant operand");
      }
      const Dims a = dims(n.inputs[0]);
      if (a != dims(n.inputs[1])) return refuse("broadcast between shapes [" + join(a) + "] and [" + join(dims(n.inputs[1])) + "]");
      cand.params = {{"n", product(a)}, {"kind", it->second}};
      cand.args = {{n.inputs[0], ArgLayout::plain}, {n.inputs[1], ArgLayout::plain}, {n.outputs[0], ArgLayout::plain}};
      return finish(std::move(cand));
    }
    std::int64_t kind = -1;
    if (auto it = unary.find(n.op_type); it != unary.end()) kind = it->second;
    if (n.op_type == "Clip" && n.inputs.size() == 3) {
      auto lo = scalar(n.inputs[1]), hi = scalar(n.inputs[2]);
      if (lo && hi && *lo == 0.0f && *hi == 6.0f) kind = 4;
    }
    if (kind < 0 || n.inputs.empty() || !activation(n.inputs[0])) return {};
    cand.params = {{"n", product(dims(n.inputs[0]))}, {"kind", kind}};
    cand.args = {{n.inputs[0], ArgLayout::plain}, {n.outputs[0], ArgLayout::plain}};
    return finish(std::move(cand));
  }

  // ---- untuned FLOPs ---------------------------------------------------------------
  // A rough count for the untuned list: the arithmetic of convolutions and products,
  // one per output element for other computing nodes, none for data movement.
  double estimate_flops(const Node& n) const {
    if (layout_ops().contains(n.op_type) || n.outputs.empty()) return 0;
    try {
      const Dims y = dims(n.outputs[0]);
      if (n.op_type == "Conv" && n.inputs.size() > 1) {
        const Dims w = dims(n.inputs[1]);
        return 2.0 * static_cast<double>(product(y)) * static_cast<double>(product(w, 1));
      }
      if ((n.op_type == "MatMul" || n.op_type == "Gemm") && n.inputs.size() > 1) {
        const Dims a = dims(n.inputs[0]);
        const bool trans_a = n.attr_int("transA", 0) != 0;
        return 2.0 * static_cast<double>(product(y)) * static_cast<double>(trans_a ? a.front() : a.back());
      }
      if (n.op_type.starts_with("Reduce") || n.op_type.starts_with("Global") || n.op_type.ends_with("Pool")) {
        return static_cast<double>(product(dims(n.inputs[0])));
      }
      return static_cast<double>(product(y));
    } catch (const std::logic_error&) {
      return 0;
    }
  }

  const Graph& graph_;
  std::int64_t block_;
  const ops::Registry& registry_;
  bool winograd_;  // 3x3 stride-1 convolutions as conv2d_winograd (PlanOptions::winograd)
  std::int64_t gemm_panels_;  // a constant B's panel width (PlanOptions::gemm_panels), 0: none
  std::vector<bool> covered_;
  std::vector<std::string> reasons_;
  std::map<std::string, std::vector<std::size_t>> consumers_;
  std::set<std::string> graph_outputs_;
};

}  // namespace

Plan plan_graph(const Graph& graph, std::int64_t block, const ops::Registry& registry, bool winograd,
                std::int64_t gemm_panels) {
  return Planner(graph, block, registry, winograd, gemm_panels).run();
}

}  // namespace kestrel::model
