// plan_model: binds the model's symbols, plans the bound graph (plan_graph.cpp) and finds
// the workload parameters that scale with a symbol by planning again at another value of
// that symbol.
#include <algorithm>

#include "kestrel/model/tasks.h"
#include "plan_graph.h"

namespace kestrel::model {

std::string ModelTask::op_name() const { return std::string(op->name()); }

std::string ModelTask::key() const { return op_name() + "/" + ops::format_params(params); }

std::string to_string(const std::vector<DynamicParam>& dynamic) {
  std::string out;
  for (const auto& d : dynamic) {
    out += (out.empty() ? "" : ",") + d.param + "=" + (d.multiplier == 1 ? "" : std::to_string(d.multiplier) + "*") +
           d.symbol;
  }
  return out;
}

std::string ModelTask::identity() const {
  std::string out = key();
  for (const DynamicParam& d : dynamic) out += "/" + d.param + "=" + std::to_string(d.multiplier) + d.symbol;
  return out;
}

std::int64_t default_block(const ops::TargetTraits& traits) {
  return std::clamp<std::int64_t>(traits.vector_floats, 4, 16);
}

std::vector<std::int64_t> default_buckets() { return {8, 32, 128}; }

namespace {

// The other value a symbol is planned at to see which parameters follow it.
std::int64_t probe_value(std::int64_t value) { return 2 * value + 1; }

// The parameters of each task step of `plan` that equal multiplier * symbol both in
// `plan` (symbol = `value`) and in `probe` (symbol = `probe_value(value)`), by step index.
std::map<std::size_t, std::vector<DynamicParam>> dynamic_params(const Plan& plan, const Plan& probe,
                                                                const std::string& symbol, std::int64_t value) {
  const std::int64_t other = probe_value(value);
  std::map<std::vector<std::size_t>, const Step*> probe_steps;
  for (const auto& step : probe.steps) {
    if (step.kind == Step::Kind::task) probe_steps[step.nodes] = &step;
  }
  std::map<std::size_t, std::vector<DynamicParam>> out;
  for (std::size_t s = 0; s < plan.steps.size(); ++s) {
    const Step& step = plan.steps[s];
    if (step.kind != Step::Kind::task) continue;
    const ModelTask& task = plan.tasks[step.task];
    auto it = probe_steps.find(step.nodes);
    if (it == probe_steps.end()) continue;
    const ModelTask& moved = probe.tasks[it->second->task];
    if (moved.op != task.op) continue;
    for (const auto& [name, v] : task.params) {
      if (!moved.params.contains(name)) continue;
      const std::int64_t w = moved.params.at(name);
      if (w != v && v % value == 0 && w == v / value * other) out[s].push_back(DynamicParam{name, symbol, v / value});
    }
  }
  return out;
}

}  // namespace

Plan plan_model(const Model& model, const PlanOptions& options) {
  const ops::Registry& registry = options.registry ? *options.registry : ops::builtin_registry();
  std::int64_t block = options.block ? options.block : default_block(options.traits);
  if (block != 4 && block != 8 && block != 16) {
    throw ModelError(model.graph().path + ": block " + std::to_string(block) + " is not 4, 8 or 16");
  }
  const std::int64_t panels = options.gemm_panels ? ops::gemm_tile_columns(options.traits) : 0;
  Plan plan = plan_graph(model.bind(options.symbols), block, registry, options.winograd, panels);
  plan.symbols = options.symbols;
  if (options.symbols.empty()) return plan;
  // The run-time parameters of every task step, over all symbols. A parameter that
  // follows two symbols is not one symbol's multiple: static.
  std::map<std::size_t, std::vector<DynamicParam>> per_step;
  for (const auto& [symbol, value] : options.symbols) {
    std::map<std::string, std::int64_t> probed = options.symbols;
    probed[symbol] = probe_value(value);
    Plan probe;
    try {
      probe = plan_graph(model.bind(probed), block, registry, options.winograd, panels);
    } catch (const ModelError&) {
      continue;  // the model does not take that value: its parameters stay static
    }
    for (auto& [step, found] : dynamic_params(plan, probe, symbol, value)) {
      auto& list = per_step[step];
      for (const auto& d : found) {
        auto clash = std::find_if(list.begin(), list.end(), [&](const DynamicParam& x) { return x.param == d.param; });
        if (clash != list.end()) {
          list.erase(clash);
        } else {
          list.push_back(d);
        }
      }
    }
  }
  // Instances of one workload whose parameters follow the symbols differently are
  // different tasks (at seq = 64, BERT's QK^T and PV products share a workload, but M, N
  // follow seq in one and M, K in the other): regroup by workload and run-time parameters,
  // in order of first appearance.
  std::vector<ModelTask> tasks;
  std::map<std::string, std::size_t> index;
  for (std::size_t s = 0; s < plan.steps.size(); ++s) {
    Step& step = plan.steps[s];
    if (step.kind != Step::Kind::task) continue;
    ModelTask task = plan.tasks[step.task];
    task.dynamic = per_step[s];
    std::sort(task.dynamic.begin(), task.dynamic.end(),
              [](const DynamicParam& a, const DynamicParam& b) { return a.param < b.param; });
    auto [it, added] = index.emplace(task.identity(), tasks.size());
    if (added) {
      task.occurrences = 0;
      tasks.push_back(std::move(task));
    }
    ++tasks[it->second].occurrences;
    step.task = it->second;
  }
  plan.tasks = std::move(tasks);
  return plan;
}

}  // namespace kestrel::model
