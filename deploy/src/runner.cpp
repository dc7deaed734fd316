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

// Float buffers of dead values, by size, for the next outputs of that size: after the
// first run a model's task steps allocate nothing (the sizes repeat from run to run), and
// a reused buffer is not zeroed first (kernels write every element of their output).
class SpareBuffers {
 public:
  AlignedFloats take(std::size_t n) {
    auto it = spare_.lower_bound(n);
    if (it == spare_.end() || it->first > 2 * n) return AlignedFloats(n);
    AlignedFloats out = std::move(it->second);
    spare_.erase(it);
    out.resize(n);
    return out;
  }
  void give(std::optional<Tensor>& t) {
    if (t && t->f32.capacity() > 0) spare_.emplace(t->f32.size(), std::move(t->f32));
    t.reset();
  }

 private:
  std::multimap<std::size_t, AlignedFloats> spare_;
};

}  // namespace

struct Runner::Impl {
  const Graph& graph;
  const Plan& plan;
  KernelProvider& kernels;
  std::map<std::string, std::int64_t> symbols;
  std::map<std::string, AlignedFloats> packed;  // by "value|layout|elements"
  std::map<std::string, Tensor> constants;      // initializers as plain tensors (portable steps)
  std::vector<std::optional<TaskStep>> tasks;   // per step
  std::vector<std::vector<std::string>> frees;  // per step: values dead after it
  std::vector<std::string> used;
  std::vector<Runner::StepTime> times;  // per step, of the last run
  SpareBuffers spare;

  Impl(const Graph& g, const Plan& p, KernelProvider& k, std::map<std::string, std::int64_t> s)
      : graph(g), plan(p), kernels(k), symbols(std::move(s)) {}

  std::vector<std::int64_t> bound_shape(const std::string& value) const {
    const ValueInfo* info = graph.value(value);
    if (!info || !info->shape) throw ModelError("value " + value + " has no known shape (bind the model's symbols)");
    std::vector<std::int64_t> out;
    for (const Dim& d : *info->shape) {
      if (d.symbolic()) throw ModelError("value " + value + " has the unbound dimension " + d.symbol);
      out.push_back(d.value);
    }
    return out;
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
    std::set<std::string> outputs;
    for (const auto& o : graph.outputs) outputs.insert(o.name);
    std::map<std::string, std::size_t> last;
    for (std::size_t i = 0; i < plan.steps.size(); ++i) {
      const Step& step = plan.steps[i];
      for (std::size_t n : step.nodes) {
        for (const auto& in : graph.nodes.at(n).inputs) last[in] = i;
      }
      for (const auto& a : step.args) last[a.value] = i;
    }
    frees.resize(plan.steps.size());
    for (const auto& [value, step] : last) {
      if (!value.empty() && !outputs.count(value) && !graph.initializer(value)) frees[step].push_back(value);
    }
    kernels.prepare(calls);
    for (std::size_t i = 0; i < plan.steps.size(); ++i) {
      if (!tasks[i]) continue;
      const ModelTask& task = plan.tasks[plan.steps[i].task];
      used.push_back(tasks[i]->label + ": " + kernels.which(task, tasks[i]->actual));
      tasks[i]->kernel = kernels.bind(task, tasks[i]->actual);
    }
  }

  const Tensor& plain_of(std::map<std::string, Slot>& env, const std::string& value) {
    if (const Initializer* init = graph.initializer(value)) {
      auto it = constants.find(value);
      if (it == constants.end()) it = constants.emplace(value, Tensor::of(*init)).first;
      return it->second;
    }
    auto it = env.find(value);
    if (it == env.end()) throw ModelError("value " + value + " is read before any step wrote it");
    Slot& slot = it->second;
    if (!slot.plain) slot.plain = to_plain(*slot.blocked);
    return *slot.plain;
  }

  const Tensor& blocked_of(std::map<std::string, Slot>& env, const std::string& value) {
    auto it = env.find(value);
    if (it == env.end()) throw ModelError("value " + value + " is read before any step wrote it");
    Slot& slot = it->second;
    if (!slot.blocked || slot.blocked->block != plan.block) slot.blocked = to_nchwc(*slot.plain, plan.block);
    return *slot.blocked;
  }

  void run_task(std::size_t index, const Step& step, std::map<std::string, Slot>& env) {
    TaskStep& t = *tasks[index];
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
        const Tensor& v = arg.layout == ArgLayout::nchwc ? blocked_of(env, arg.value) : plain_of(env, arg.value);
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
    out.shape = bound_shape(out_arg.value);
    if (out_arg.layout == ArgLayout::nchwc) {
      out.layout = TensorLayout::nchwc;
      out.block = plan.block;
    } else if (out.elements() != t.elements.back()) {
      throw ModelError(t.label + ": output " + out_arg.value + " " + shape_text(out.shape) + " has " +
                       std::to_string(out.elements()) + " elements, the kernel writes " + std::to_string(t.elements.back()));
    }
    out.f32 = spare.take(static_cast<std::size_t>(t.elements.back()));
    args.push_back(kestrel_arg{out.f32.data(), t.elements.back(), 0.0});
    std::int32_t rc = t.kernel(args);
    if (rc != 0) throw ModelError(t.label + ": " + kernels.describe_error(rc));
    Slot slot;
    if (out.layout == TensorLayout::nchwc) slot.blocked = std::move(out);
    else slot.plain = std::move(out);
    env[out_arg.value] = std::move(slot);
  }

  // Reshape, Flatten, Squeeze, Unsqueeze and Identity of a value that dies at this step:
  // its data moves to the output under the output's shape instead of being copied.
  bool move_view(std::size_t index, const Node& node, std::map<std::string, Slot>& env) {
    static const std::set<std::string> views = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"};
    if (!views.count(node.op_type) || node.inputs.empty() || node.outputs.size() != 1) return false;
    const std::string& value = node.inputs[0];
    if (value.empty() || graph.initializer(value) || node.outputs[0].empty()) return false;
    if (std::count(node.inputs.begin(), node.inputs.end(), value) != 1) return false;
    const auto& dying = frees[index];
    if (std::find(dying.begin(), dying.end(), value) == dying.end()) return false;
    const ValueInfo* info = graph.value(node.outputs[0]);
    if (!info || !info->shape) return false;
    std::vector<std::int64_t> shape;
    for (const Dim& d : *info->shape) {
      if (d.symbolic()) return false;
      shape.push_back(d.value);
    }
    const Tensor& source = plain_of(env, value);
    if (element_count(shape) != source.elements()) return false;  // the portable step names the error
    Slot& slot = env.at(value);
    Tensor moved = std::move(*slot.plain);
    moved.shape = std::move(shape);
    spare.give(slot.blocked);
    env.erase(value);
    Slot out;
    out.plain = std::move(moved);
    env[node.outputs[0]] = std::move(out);
    return true;
  }

  void run_portable_node(std::size_t index, const Node& node, std::map<std::string, Slot>& env) {
    if (move_view(index, node, env)) return;
    std::vector<const Tensor*> inputs;
    for (const auto& name : node.inputs) inputs.push_back(name.empty() ? nullptr : &plain_of(env, name));
    std::vector<Tensor> outputs = run_portable(node, inputs, kernels.services());
    for (std::size_t j = 0; j < node.outputs.size() && j < outputs.size(); ++j) {
      if (node.outputs[j].empty()) continue;
      Slot slot;
      slot.plain = std::move(outputs[j]);
      env[node.outputs[j]] = std::move(slot);
    }
  }

  std::map<std::string, Tensor> run(const std::map<std::string, Tensor>& inputs) {
    std::map<std::string, Slot> env;
    for (const ValueInfo& in : graph.inputs) {
      auto it = inputs.find(in.name);
      if (it == inputs.end()) throw ModelError("no value for the model input " + in.name);
      const auto shape = bound_shape(in.name);
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
      Slot slot;
      slot.plain = to_plain(it->second);
      env[in.name] = std::move(slot);
    }
    times.resize(plan.steps.size());
    for (std::size_t i = 0; i < plan.steps.size(); ++i) {
      const Step& step = plan.steps[i];
      const auto start = std::chrono::steady_clock::now();
      if (step.kind == Step::Kind::task) {
        run_task(i, step, env);
        times[i].step = tasks[i]->label;
        times[i].kind = tasks[i]->op->name();
        times[i].task = true;
      } else {
        for (std::size_t n : step.nodes) run_portable_node(i, graph.nodes.at(n), env);
        const Node& node = graph.nodes.at(step.nodes.front());
        times[i].step = node.op_type + " " + node.name;
        times[i].kind = node.op_type;
      }
      for (const auto& dead : frees[i]) {
        auto it = env.find(dead);
        if (it == env.end()) continue;
        spare.give(it->second.plain);
        spare.give(it->second.blocked);
        env.erase(it);
      }
      times[i].seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }
    std::map<std::string, Tensor> out;
    for (const ValueInfo& o : graph.outputs) out[o.name] = plain_of(env, o.name);
    for (auto& [name, slot] : env) {
      spare.give(slot.plain);
      spare.give(slot.blocked);
    }
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
