// The model runner: steps of a Plan over a bound Graph, task steps through a
// KernelProvider, portable steps through run_portable(); activations keep the layout
// they were written in and are converted (once) when a step wants the other one.
#include "kestrel/deploy/runner.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <set>

#include "kestrel/deploy/layout.h"
#include "kestrel/deploy/portable_ops.h"

namespace kestrel::deploy {

using model::ArgLayout;
using model::Dim;
using model::DynamicParam;
using model::ElemType;
using model::Graph;
using model::Initializer;
using model::ModelError;
using model::ModelTask;
using model::Node;
using model::Plan;
using model::Step;
using model::StepArg;
using model::ValueInfo;

Plan portable_plan(const Graph& graph) {
  Plan plan;
  for (std::size_t i = 0; i < graph.nodes.size(); ++i) {
    Step step;
    step.kind = Step::Kind::portable;
    step.nodes = {i};
    plan.steps.push_back(std::move(step));
  }
  return plan;
}

namespace {

// A value while the graph runs: in the layout it was written in, plus the other layout
// once a step asked for it.
struct Slot {
  std::optional<Tensor> plain;
  std::optional<Tensor> blocked;
};

struct TaskStep {
  const ops::Op* op = nullptr;
  ops::Params actual;
  std::vector<std::int64_t> elements;       // per argument, the op's tensor size
  std::vector<const AlignedFloats*> packed;  // per argument: the repacked initializer, or null
  std::string label;                         // "conv2d_nchwc/... (Conv+Relu, node conv1)"
  BoundKernel kernel;
};

}  // namespace

struct Runner::Impl {
  const Graph& graph;
  const Plan& plan;
  KernelProvider& kernels;
  std::map<std::string, std::int64_t> symbols;
  std::map<std::string, AlignedFloats> packed;  // by "value|layout|elements"
  std::vector<std::optional<TaskStep>> tasks;   // per step
  std::vector<std::string> used;
  std::vector<Runner::StepTime> times;  // per step, of the last run (labels set once)

  // Every value by a number, fixed at prepare(), so that a run looks nothing up by name.
  static constexpr std::size_t kNone = static_cast<std::size_t>(-1);  // an omitted input
  std::map<std::string, std::size_t> ids;
  std::vector<std::string> names;                    // by id
  std::vector<const Initializer*> inits;             // by id: the initializer, or null
  std::vector<std::optional<std::vector<std::int64_t>>> shapes;  // by id: the bound shape, when known
  std::vector<std::optional<Tensor>> constants;      // by id: an initializer as a plain tensor
  std::vector<Slot> env;                             // by id: the value during a run
  struct NodeIds {
    std::vector<std::size_t> in, out;
  };
  std::vector<NodeIds> node_ids;                     // by graph node
  std::vector<std::vector<std::size_t>> arg_ids;     // per step: its args'
  std::vector<std::vector<std::size_t>> frees;       // per step: values dead after it
  std::vector<std::size_t> input_ids, output_ids;    // the graph's

  std::size_t id_of(const std::string& name) {
    if (name.empty()) return kNone;
    auto [it, added] = ids.emplace(name, names.size());
    if (added) {
      names.push_back(name);
      inits.push_back(graph.initializer(name));
      std::optional<std::vector<std::int64_t>> shape;
      if (const ValueInfo* info = graph.value(name); info && info->shape) {
        shape.emplace();
        for (const Dim& d : *info->shape) {
          if (d.symbolic()) {
            shape.reset();
            break;
          }
          shape->push_back(d.value);
        }
      }
      shapes.push_back(std::move(shape));
    }
    return it->second;
  }

  Impl(const Graph& g, const Plan& p, KernelProvider& k, std::map<std::string, std::int64_t> s)
      : graph(g), plan(p), kernels(k), symbols(std::move(s)) {}

  // The bound shape of value `id`; ModelError saying why when it has none.
  const std::vector<std::int64_t>& bound_shape(std::size_t id) const {
    if (shapes[id]) return *shapes[id];
    const ValueInfo* info = graph.value(names[id]);
    if (info && info->shape) {
      for (const Dim& d : *info->shape) {
        if (d.symbolic()) throw ModelError("value " + names[id] + " has the unbound dimension " + d.symbol);
      }
    }
    throw ModelError("value " + names[id] + " has no known shape (bind the model's symbols)");
  }

  ops::Params actual_params(const ModelTask& task) const {
    ops::Params actual = task.params;
    for (const DynamicParam& d : task.dynamic) {
      auto it = symbols.find(d.symbol);
      if (it != symbols.end()) actual[d.param] = d.multiplier * it->second;
    }
    return actual;
  }

  void prepare_task(std::size_t index, const Step& step) {
    if (step.task >= plan.tasks.size()) throw ModelError("step " + std::to_string(index) + " names no task of the plan");
    const ModelTask& task = plan.tasks[step.task];
    TaskStep t;
    t.op = task.op;
    t.actual = actual_params(task);
    std::string nodes;
    for (std::size_t n : step.nodes) nodes += (nodes.empty() ? "" : ",") + graph.nodes.at(n).name;
    t.label = task_key(task.op_name(), t.actual) + " (" + task.pattern + ", node " + nodes + ")";
    std::vector<ops::TensorSpec> specs;
    try {
      specs = t.op->tensors(t.actual);
    } catch (const ops::OpError& e) {
      throw ModelError(t.label + ": " + e.what());
    }
    if (specs.size() != step.args.size()) {
      throw ModelError(t.label + ": the step has " + std::to_string(step.args.size()) + " arguments, the op takes " +
                       std::to_string(specs.size()));
    }
    for (std::size_t a = 0; a < specs.size(); ++a) {
      t.elements.push_back(specs[a].elements());
      const StepArg& arg = step.args[a];
      const Initializer* init = a + 1 < specs.size() ? graph.initializer(arg.value) : nullptr;
      if (!init) {
        t.packed.push_back(nullptr);
        continue;
      }
      const std::string key = arg.value + "|" + std::to_string(static_cast<int>(arg.layout)) + "|" +
                              std::to_string(t.elements.back()) + "|" + std::to_string(plan.block);
      auto it = packed.find(key);
      if (it == packed.end()) {
        it = packed.emplace(key, pack_initializer(*init, arg.layout, plan.block, t.elements.back())).first;
      }
      t.packed.push_back(&it->second);
    }
    tasks[index] = std::move(t);
  }

  void prepare() {
    for (const ValueInfo& in : graph.inputs) input_ids.push_back(id_of(in.name));
    for (const ValueInfo& out : graph.outputs) output_ids.push_back(id_of(out.name));
    for (const Node& node : graph.nodes) {
      NodeIds n;
      for (const auto& name : node.inputs) n.in.push_back(id_of(name));
      for (const auto& name : node.outputs) n.out.push_back(id_of(name));
      node_ids.push_back(std::move(n));
    }
    for (const Step& step : plan.steps) {
      std::vector<std::size_t> a;
      for (const StepArg& arg : step.args) a.push_back(id_of(arg.value));
      arg_ids.push_back(std::move(a));
    }
    constants.resize(names.size());
    env.resize(names.size());
    tasks.resize(plan.steps.size());
    std::vector<TaskCall> calls;
    for (std::size_t i = 0; i < plan.steps.size(); ++i) {
      const Step& step = plan.steps[i];
      if (step.kind == Step::Kind::task) {
        prepare_task(i, step);
        calls.push_back({&plan.tasks[step.task], tasks[i]->actual});
      }
    }
    // Every operator that cannot run, not just the first.
    if (const auto missing = missing_portable(graph, plan); !missing.empty()) throw ModelError(missing_portable_text(missing));
    // Each value dies after the last step that reads it (graph outputs never).
    std::vector<std::size_t> last(names.size(), kNone);
    for (std::size_t i = 0; i < plan.steps.size(); ++i) {
      for (std::size_t n : plan.steps[i].nodes) {
        for (std::size_t in : node_ids.at(n).in) {
          if (in != kNone) last[in] = i;
        }
      }
      for (std::size_t a : arg_ids[i]) last[a] = i;
    }
    for (std::size_t o : output_ids) last[o] = kNone;
    frees.resize(plan.steps.size());
    for (std::size_t id = 0; id < names.size(); ++id) {
      if (last[id] != kNone && !inits[id]) frees[last[id]].push_back(id);
    }
    // The steps' labels, once.
    times.resize(plan.steps.size());
    for (std::size_t i = 0; i < plan.steps.size(); ++i) {
      if (tasks[i]) {
        times[i].step = tasks[i]->label;
        times[i].kind = tasks[i]->op->name();
        times[i].task = true;
      } else if (!plan.steps[i].nodes.empty()) {
        const Node& node = graph.nodes.at(plan.steps[i].nodes.front());
        times[i].step = node.op_type + " " + node.name;
        times[i].kind = node.op_type;
      }
    }
    kernels.prepare(calls);
    for (std::size_t i = 0; i < plan.steps.size(); ++i) {
      if (!tasks[i]) continue;
      const ModelTask& task = plan.tasks[plan.steps[i].task];
      used.push_back(tasks[i]->label + ": " + kernels.which(task, tasks[i]->actual));
      tasks[i]->kernel = kernels.bind(task, tasks[i]->actual);
    }
  }

  const Tensor& plain_of(std::size_t id) {
    if (inits[id]) {
      if (!constants[id]) constants[id] = Tensor::of(*inits[id]);
      return *constants[id];
    }
    Slot& slot = env[id];
    if (!slot.plain && !slot.blocked) throw ModelError("value " + names[id] + " is read before any step wrote it");
    if (!slot.plain) slot.plain = to_plain(*slot.blocked, kernels.services());
    return *slot.plain;
  }

  const Tensor& blocked_of(std::size_t id) {
    Slot& slot = env[id];
    if (!slot.plain && !slot.blocked) throw ModelError("value " + names[id] + " is read before any step wrote it");
    if (!slot.blocked || slot.blocked->block != plan.block) slot.blocked = to_nchwc(*slot.plain, plan.block, kernels.services());
    return *slot.blocked;
  }

  // The slot empty; its storage goes back to the allocator, which keeps blocks by size
  // for the next run (tensor.h: acquire_tensor_memory).
  void release(std::size_t id) {
    env[id].plain.reset();
    env[id].blocked.reset();
  }

  void run_task(std::size_t index, const Step& step) {
    TaskStep& t = *tasks[index];
    const std::vector<std::size_t>& aid = arg_ids[index];
    std::vector<kestrel_arg> args;
    const std::size_t n = step.args.size();
    for (std::size_t a = 0; a + 1 < n; ++a) {
      const StepArg& arg = step.args[a];
      float* data = nullptr;
      std::int64_t size = 0;
      if (t.packed[a]) {
        data = const_cast<float*>(t.packed[a]->data());
        size = static_cast<std::int64_t>(t.packed[a]->size());
      } else {
        const Tensor& v = arg.layout == ArgLayout::nchwc ? blocked_of(aid[a]) : plain_of(aid[a]);
        if (v.type != ElemType::f32) throw ModelError(t.label + ": argument " + arg.value + " is not float");
        data = const_cast<float*>(v.f32.data());
        size = static_cast<std::int64_t>(v.f32.size());
      }
      if (size != t.elements[a]) {
        throw ModelError(t.label + ": argument " + std::to_string(a) + " (" + arg.value + ") holds " + std::to_string(size) +
                         " floats, the kernel takes " + std::to_string(t.elements[a]));
      }
      args.push_back(kestrel_arg{data, size, 0.0});
    }
    const StepArg& out_arg = step.args.back();
    Tensor out;
    out.shape = bound_shape(aid.back());
    if (out_arg.layout == ArgLayout::nchwc) {
      out.layout = TensorLayout::nchwc;
      out.block = plan.block;
    } else if (out.elements() != t.elements.back()) {
      throw ModelError(t.label + ": output " + out_arg.value + " " + shape_text(out.shape) + " has " +
                       std::to_string(out.elements()) + " elements, the kernel writes " + std::to_string(t.elements.back()));
    }
    out.f32 = AlignedFloats(static_cast<std::size_t>(t.elements.back()));  // not zeroed: the kernel writes it all
    args.push_back(kestrel_arg{out.f32.data(), t.elements.back(), 0.0});
    std::int32_t rc = t.kernel(args);
    if (rc != 0) throw ModelError(t.label + ": " + kernels.describe_error(rc));
    Slot& slot = env[aid.back()];
    release(aid.back());
    if (out.layout == TensorLayout::nchwc) slot.blocked = std::move(out);
    else slot.plain = std::move(out);
  }

  // Reshape, Flatten, Squeeze, Unsqueeze and Identity of a value that dies at this step:
  // its data moves to the output under the output's shape instead of being copied.
  bool move_view(std::size_t index, const Node& node, const NodeIds& nid) {
    static const std::set<std::string> views = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"};
    if (nid.in.empty() || nid.out.size() != 1 || !views.count(node.op_type)) return false;
    const std::size_t value = nid.in[0];
    if (value == kNone || inits[value] || nid.out[0] == kNone) return false;
    if (std::count(nid.in.begin(), nid.in.end(), value) != 1) return false;
    const auto& dying = frees[index];
    if (std::find(dying.begin(), dying.end(), value) == dying.end()) return false;
    if (!shapes[nid.out[0]]) return false;
    std::vector<std::int64_t> shape = *shapes[nid.out[0]];
    const Tensor& source = plain_of(value);
    if (element_count(shape) != source.elements()) return false;  // the portable step names the error
    Slot& slot = env[value];
    Tensor moved = std::move(*slot.plain);
    moved.shape = std::move(shape);
    release(value);
    release(nid.out[0]);
    env[nid.out[0]].plain = std::move(moved);
    return true;
  }

  // The blocked tensor of `value` when it is held only in the blocked layout (a task
  // wrote it and nothing has asked for it plain), else null.
  Tensor* blocked_only(std::size_t id) {
    if (id == kNone || inits[id]) return nullptr;
    Slot& slot = env[id];
    if (slot.plain || !slot.blocked) return nullptr;
    Tensor* t = &*slot.blocked;
    return t->shape.size() == 4 && t->block == plan.block ? t : nullptr;
  }

  // An elementwise step whose activation operand is held only in the blocked layout runs
  // on the blocked data and writes a blocked output (the squeeze-excite Mul between two
  // convolutions then converts nothing): a unary operator on the data as a flat vector;
  // Add/Sub/Mul/Div with a second operand that is blocked of the same shape, one value,
  // or one value per channel ([1,C,1,1] or [C,1,1], zero-padded to whole blocks). The
  // portable implementation does the arithmetic on shape views of the blocked data; lanes
  // past C are zeroed after. False when the step does not qualify.
  bool blocked_elementwise(const Node& node, const NodeIds& nid) {
    static const std::set<std::string> binaries = {"Add", "Sub", "Mul", "Div"};
    static const std::set<std::string> unaries = {"Relu", "Sigmoid", "Tanh", "HardSigmoid", "HardSwish", "Erf", "Neg"};
    const bool binary = binaries.count(node.op_type) && node.inputs.size() == 2;
    if (node.outputs.size() != 1 || node.outputs[0].empty()) return false;
    if (!binary && !(unaries.count(node.op_type) && node.inputs.size() == 1)) return false;
    // The blocked operand: one held blocked only, of the output's shape.
    if (nid.out.size() != 1 || nid.out[0] == kNone || !shapes[nid.out[0]] || shapes[nid.out[0]]->size() != 4) return false;
    const std::vector<std::int64_t>& out_shape = *shapes[nid.out[0]];
    auto output_shaped = [&](Tensor* t) { return t && t->type == ElemType::f32 && t->shape == out_shape; };
    std::size_t at = 0;
    Tensor* a = blocked_only(nid.in[0]);
    if (!output_shaped(a) && binary) {
      at = 1;
      a = blocked_only(nid.in[1]);
    }
    if (!output_shaped(a)) return false;
    const std::int64_t n = a->shape[0], c = a->shape[1], hw = a->shape[2] * a->shape[3], block = a->block;
    const std::int64_t blocks = (c + block - 1) / block;
    const std::vector<std::int64_t> logical = a->shape;
    // The shape views: flat, or [N][C/B][H*W][B] against a [1][C/B][1][B] channel vector.
    std::vector<std::int64_t> view = {static_cast<std::int64_t>(a->f32.size())};
    std::optional<Tensor> channels;  // the other operand padded to whole blocks
    Tensor* other = nullptr;
    Tensor* other_blocked = nullptr;
    if (binary) {
      const std::size_t name = nid.in[1 - at];
      if (name == kNone) return false;
      other_blocked = blocked_only(name);
      if (other_blocked && (other_blocked->shape != logical || other_blocked->f32.size() != a->f32.size())) {
        other_blocked = nullptr;  // a per-channel vector a task wrote: read it plain
      }
      if (!other_blocked) {
        const Tensor& b = plain_of(name);
        if (b.type != ElemType::f32) return false;
        if (b.elements() == 1) {
          channels = Tensor::floats({}, std::span<const float>(b.f32.data(), 1));
        } else if (b.shape == std::vector<std::int64_t>{1, c, 1, 1} || b.shape == std::vector<std::int64_t>{c, 1, 1}) {
          channels = Tensor::floats({1, blocks, 1, block});
          std::copy(b.f32.begin(), b.f32.end(), channels->f32.begin());
          view = {n, blocks, hw, block};
        } else {
          return false;
        }
        other = &*channels;
      }
    }
    if (channels && view.size() == 4 && block % 4 == 0) {
      Tensor result;
      result.shape = logical;
      result.layout = TensorLayout::nchwc;
      result.block = block;
      result.f32.resize(a->f32.size());
      blocked_channel_binary(node.op_type, at == 1, a->f32.data(), channels->f32.data(), result.f32.data(), n, blocks, hw, block,
                             kernels.services());
      finish_blocked(nid.out[0], std::move(result), c);
      return true;
    }
    // Run the portable operator on the views, then restore the operands' own shapes.
    auto as_view = [&](Tensor& t) {
      t.shape = view;
      t.layout = TensorLayout::plain;
    };
    auto restore = [&](Tensor& t) {
      t.shape = logical;
      t.layout = TensorLayout::nchwc;
    };
    std::vector<const Tensor*> inputs(node.inputs.size());
    as_view(*a);
    inputs[at] = a;
    if (other_blocked) {
      if (other_blocked != a) as_view(*other_blocked);
      inputs[1 - at] = other_blocked;
    } else if (binary) {
      inputs[1 - at] = other;
    }
    std::vector<Tensor> out;
    try {
      out = run_portable(node, inputs, kernels.services());
    } catch (...) {
      restore(*a);
      if (other_blocked) restore(*other_blocked);
      throw;
    }
    restore(*a);
    if (other_blocked) restore(*other_blocked);
    Tensor result = std::move(out.at(0));
    result.shape = logical;
    result.layout = TensorLayout::nchwc;
    result.block = block;
    finish_blocked(nid.out[0], std::move(result), c);
    return true;
  }

  // A blocked result of blocked_elementwise into its slot, its lanes past C back to zero
  // (Sigmoid(0) is not, x / 0 is not even finite).
  void finish_blocked(std::size_t id, Tensor result, std::int64_t c) {
    const std::int64_t block = result.block, blocks = (c + block - 1) / block;
    const std::int64_t n = result.shape[0], hw = result.shape[2] * result.shape[3];
    if (c % block) {
      for (std::int64_t i = 0; i < n * hw; ++i) {
        float* last = result.f32.data() + ((i / hw * blocks + blocks - 1) * hw + i % hw) * block;
        std::fill(last + c % block, last + block, 0.0f);
      }
    }
    release(id);
    env[id].blocked = std::move(result);
  }

  void run_portable_node(std::size_t index, std::size_t n) {
    const Node& node = graph.nodes[n];
    const NodeIds& nid = node_ids[n];
    if (move_view(index, node, nid)) return;
    if (blocked_elementwise(node, nid)) return;
    std::vector<const Tensor*> inputs;
    for (std::size_t id : nid.in) inputs.push_back(id == kNone ? nullptr : &plain_of(id));
    std::vector<Tensor> outputs = run_portable(node, inputs, kernels.services());
    for (std::size_t j = 0; j < nid.out.size() && j < outputs.size(); ++j) {
      if (nid.out[j] == kNone) continue;
      release(nid.out[j]);
      env[nid.out[j]].plain = std::move(outputs[j]);
    }
  }

  std::map<std::string, Tensor> run(const std::map<std::string, Tensor>& inputs) {
    // Whatever a failed run left behind goes first.
    for (std::size_t id = 0; id < env.size(); ++id) release(id);
    for (std::size_t k = 0; k < graph.inputs.size(); ++k) {
      const ValueInfo& in = graph.inputs[k];
      auto it = inputs.find(in.name);
      if (it == inputs.end()) throw ModelError("no value for the model input " + in.name);
      const auto& shape = bound_shape(input_ids[k]);
      // Float inputs as f32; integer (int64, int32) and boolean ones as i64.
      const Tensor& given = it->second;
      const bool floats = in.type == ElemType::f32;
      const std::size_t held = floats ? given.f32.size() : given.i64.size();
      if (given.shape != shape || given.type != (floats ? ElemType::f32 : ElemType::i64) ||
          static_cast<std::int64_t>(held) != given.elements()) {
        throw ModelError("model input " + in.name + " must be a plain " + (floats ? "float" : "integer") +
                         " tensor of shape " + shape_text(shape) + ", got " +
                         (given.type == ElemType::f32 ? "a float" : "an integer") + " tensor of shape " + shape_text(given.shape));
      }
      env[input_ids[k]].plain = to_plain(it->second);
    }
    for (std::size_t i = 0; i < plan.steps.size(); ++i) {
      const Step& step = plan.steps[i];
      const auto start = std::chrono::steady_clock::now();
      if (step.kind == Step::Kind::task) {
        run_task(i, step);
      } else {
        for (std::size_t n : step.nodes) run_portable_node(i, n);
      }
      for (std::size_t dead : frees[i]) release(dead);
      times[i].seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }
    std::map<std::string, Tensor> out;
    for (std::size_t k = 0; k < graph.outputs.size(); ++k) out[graph.outputs[k].name] = plain_of(output_ids[k]);
    for (std::size_t id = 0; id < env.size(); ++id) release(id);
    return out;
  }
};

Runner::Runner(const Graph& graph, const Plan& plan, KernelProvider& kernels, std::map<std::string, std::int64_t> symbols)
    : impl_(std::make_unique<Impl>(graph, plan, kernels, std::move(symbols))) {
  impl_->prepare();
}

Runner::~Runner() = default;

std::map<std::string, Tensor> Runner::run(const std::map<std::string, Tensor>& inputs) { return impl_->run(inputs); }

std::vector<std::string> Runner::kernels_used() const { return impl_->used; }

std::vector<Runner::StepTime> Runner::step_times() const { return impl_->times; }

}  // namespace kestrel::deploy
