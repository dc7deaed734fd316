// The model runner on the host: a Plan over a bound Graph lowered into a Program (every
// value numbered, weights packed, when each value dies), its task steps bound to a
// KernelProvider's kernels, executed by the ProgramRunner a board runs too.
#include "kestrel/deploy/runner.h"

#include <algorithm>
#include <filesystem>
#include <memory>
#include <optional>

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

// Every value by a number: the graph's names in order of first use.
struct Numbering {
  const Graph& graph;
  Program& program;
  std::map<std::string, std::size_t> ids;

  std::size_t id_of(const std::string& name) {
    if (name.empty()) return kNoValue;
    auto [it, added] = ids.emplace(name, program.values.size());
    if (added) {
      ProgramValue v;
      v.name = name;
      if (const ValueInfo* info = graph.value(name)) {
        v.type = info->type;
        if (info->shape) {
          v.shape.emplace();
          for (const Dim& d : *info->shape) {
            if (d.symbolic()) {
              v.shape.reset();
              break;
            }
            v.shape->push_back(d.value);
          }
        }
      }
      if (const Initializer* init = graph.initializer(name)) {
        v.type = init->type;
        v.shape = init->shape;
      }
      program.values.push_back(std::move(v));
    }
    return it->second;
  }
};

ops::Params actual_params(const ModelTask& task, const std::map<std::string, std::int64_t>& symbols) {
  ops::Params actual = task.params;
  for (const DynamicParam& d : task.dynamic) {
    auto it = symbols.find(d.symbol);
    if (it != symbols.end()) actual[d.param] = d.multiplier * it->second;
  }
  return actual;
}

}  // namespace

Program lower_program(const Graph& graph, const Plan& plan, const std::map<std::string, std::int64_t>& symbols) {
  Program program;
  program.block = plan.block;
  Numbering numbering{graph, program, {}};
  auto id_of = [&](const std::string& name) { return numbering.id_of(name); };
  for (const ValueInfo& in : graph.inputs) program.inputs.push_back(id_of(in.name));
  for (const ValueInfo& out : graph.outputs) program.outputs.push_back(id_of(out.name));
  // Constants: the initializers a portable step (or the graph's output) reads plain.
  auto constant = [&](std::size_t id) {
    if (id == kNoValue || program.values[id].constant >= 0) return;
    const Initializer* init = graph.initializer(program.values[id].name);
    if (!init) return;
    program.values[id].constant = static_cast<std::int64_t>(program.constants.size());
    program.constants.push_back(*init);
  };
  std::map<std::string, std::int64_t> packed_index;  // by "value|layout|elements|block"
  std::vector<std::size_t> last_use;                 // by value: the last step that reads it
  auto read_at = [&](std::size_t id, std::size_t step) {
    if (id == kNoValue) return;
    if (last_use.size() <= id) last_use.resize(id + 1, kNoValue);
    last_use[id] = step;
  };
  for (std::size_t i = 0; i < plan.steps.size(); ++i) {
    const Step& step = plan.steps[i];
    ProgramStep out;
    if (step.kind == Step::Kind::task) {
      if (step.task >= plan.tasks.size()) throw ModelError("step " + std::to_string(i) + " names no task of the plan");
      const ModelTask& task = plan.tasks[step.task];
      const ops::Params actual = actual_params(task, symbols);
      std::string nodes;
      for (std::size_t n : step.nodes) nodes += (nodes.empty() ? "" : ",") + graph.nodes.at(n).name;
      out.task = true;
      out.label = task_key(task.op_name(), actual) + " (" + task.pattern + ", node " + nodes + ")";
      out.kind = task.op->name();
      out.op = task.op_name();
      out.params = ordered_params(*task.op, actual);
      std::vector<ops::TensorSpec> specs;
      try {
        specs = task.op->tensors(actual);
      } catch (const ops::OpError& e) {
        throw ModelError(out.label + ": " + e.what());
      }
      if (specs.size() != step.args.size()) {
        throw ModelError(out.label + ": the step has " + std::to_string(step.args.size()) + " arguments, the op takes " +
                         std::to_string(specs.size()));
      }
      for (std::size_t a = 0; a < specs.size(); ++a) {
        const StepArg& arg = step.args[a];
        ProgramArg pa;
        pa.value = id_of(arg.value);
        pa.layout = arg.layout;
        pa.elements = specs[a].elements();
        const Initializer* init = a + 1 < specs.size() ? graph.initializer(arg.value) : nullptr;
        if (init) {
          // The layout's block: the panel width (gemm's `panels`) for B in panels.
          const bool panels = arg.layout == ArgLayout::gemm_panels || arg.layout == ArgLayout::gemm_panels_transposed;
          const std::int64_t block = panels ? (actual.contains("panels") ? actual.at("panels") : 0) : plan.block;
          const std::string key = arg.value + "|" + std::to_string(static_cast<int>(arg.layout)) + "|" +
                                  std::to_string(pa.elements) + "|" + std::to_string(block);
          auto it = packed_index.find(key);
          if (it == packed_index.end()) {
            it = packed_index.emplace(key, static_cast<std::int64_t>(program.packed.size())).first;
            program.packed.push_back(pack_initializer(*init, arg.layout, block, pa.elements));
          }
          pa.packed = it->second;
        } else {
          read_at(pa.value, i);
        }
        out.args.push_back(pa);
      }
      // What the step's nodes read counts as read here too (as the plan's nodes say).
      for (std::size_t n : step.nodes) {
        for (const auto& name : graph.nodes.at(n).inputs) {
          if (!name.empty() && !graph.initializer(name)) read_at(id_of(name), i);
        }
      }
    } else {
      for (std::size_t n : step.nodes) {
        const Node& node = graph.nodes.at(n);
        ProgramNode pn;
        pn.node = node;
        for (const auto& name : node.inputs) {
          pn.in.push_back(id_of(name));
          constant(pn.in.back());
          read_at(pn.in.back(), i);
        }
        for (const auto& name : node.outputs) pn.out.push_back(id_of(name));
        out.nodes.push_back(program.nodes.size());
        program.nodes.push_back(std::move(pn));
      }
      if (!step.nodes.empty()) {
        const Node& node = graph.nodes.at(step.nodes.front());
        out.label = node.op_type + " " + node.name;
        out.kind = node.op_type;
      }
    }
    program.steps.push_back(std::move(out));
  }
  for (std::size_t id : program.outputs) constant(id);
  // Each value dies after the last step that reads it (graph outputs and constants never).
  last_use.resize(program.values.size(), kNoValue);
  for (std::size_t id : program.outputs) last_use[id] = kNoValue;
  for (std::size_t id = 0; id < program.values.size(); ++id) {
    if (last_use[id] != kNoValue && !graph.initializer(program.values[id].name)) program.steps[last_use[id]].frees.push_back(id);
  }
  program.memory = plan_memory(program);
  return program;
}

struct Runner::Impl {
  std::shared_ptr<const Program> program;
  std::unique_ptr<DispatchLibrary> library;  // an export's, when run from one
  std::vector<std::string> used;
  std::unique_ptr<ProgramRunner> runner;
};

Runner::Runner(const Graph& graph, const Plan& plan, KernelProvider& kernels, std::map<std::string, std::int64_t> symbols)
    : impl_(std::make_unique<Impl>()) {
  // Every operator that cannot run, not just the first, before any kernel is compiled.
  if (const auto missing = missing_portable(graph, plan); !missing.empty()) throw ModelError(missing_portable_text(missing));
  auto program = std::make_shared<Program>(lower_program(graph, plan, symbols));
  std::vector<TaskCall> calls;
  std::vector<ops::Params> actual(plan.steps.size());
  for (std::size_t i = 0; i < plan.steps.size(); ++i) {
    const Step& step = plan.steps[i];
    if (step.kind != Step::Kind::task) continue;
    actual[i] = actual_params(plan.tasks[step.task], symbols);
    calls.push_back({&plan.tasks[step.task], actual[i]});
  }
  kernels.prepare(calls);
  std::vector<BoundKernel> bound(plan.steps.size());
  for (std::size_t i = 0; i < plan.steps.size(); ++i) {
    const Step& step = plan.steps[i];
    if (step.kind != Step::Kind::task) continue;
    const ModelTask& task = plan.tasks[step.task];
    impl_->used.push_back(program->steps[i].label + ": " + kernels.which(task, actual[i]));
    bound[i] = kernels.bind(task, actual[i]);
  }
  impl_->program = program;
  impl_->runner = std::make_unique<ProgramRunner>(program, std::move(bound), kernels.services(),
                                                  [&kernels](std::int32_t code) { return kernels.describe_error(code); });
}

Runner::Runner(const std::string& export_dir, unsigned threads, const std::string& program)
    : impl_(std::make_unique<Impl>()) {
  namespace fs = std::filesystem;
  impl_->program = std::make_shared<const Program>(load_program((fs::path(export_dir) / program).string()));
  impl_->library = std::make_unique<DispatchLibrary>(export_dir, threads);
  DispatchLibrary* library = impl_->library.get();
  for (const ProgramStep& step : impl_->program->steps) {
    if (step.task) impl_->used.push_back(step.label + ": " + library->which(step.op, step.params));
  }
  impl_->runner = std::make_unique<ProgramRunner>(impl_->program, library->bind_all(*impl_->program), library->services(),
                                                  [library](std::int32_t code) { return library->describe_error(code); });
}

Runner::~Runner() = default;

std::map<std::string, Tensor> Runner::run(const std::map<std::string, Tensor>& inputs) { return impl_->runner->run(inputs); }

std::vector<std::string> Runner::kernels_used() const { return impl_->used; }

std::vector<StepTime> Runner::step_times() const { return impl_->runner->step_times(); }
void Runner::time_steps(bool on) { impl_->runner->time_steps(on); }

const Program& Runner::program() const { return *impl_->program; }

ProgramRunner::Memory Runner::memory() const { return impl_->runner->memory(); }

}  // namespace kestrel::deploy
