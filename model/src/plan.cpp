// plan_model: binds the model's symbols, plans the bound graph (plan_graph.cpp) and finds
// the workload parameters that scale with a symbol by planning again at another value of
// that symbol.
#include <algorithm>

#include "kestrel/model/tasks.h"
#include "plan_graph.h"

namespace kestrel::model {

std::string ModelTask::key() const { return op + "/" + ops::format_params(params); }

std::int64_t default_block(const ops::TargetTraits& traits) {
  return std::clamp<std::int64_t>(traits.vector_floats, 4, 16);
}

std::vector<std::int64_t> default_buckets() { return {8, 32, 128}; }

namespace {

// The other value a symbol is planned at to see which parameters follow it.
std::int64_t probe_value(std::int64_t value) { return 2 * value + 1; }

// Marks the parameters of `plan`'s tasks that equal multiplier * symbol both in `plan`
// (symbol = `value`) and in `probe` (symbol = `probe_value(value)`). A parameter is
// dynamic only when every instance of its task agrees.
void mark_dynamic(Plan& plan, const Plan& probe, const std::string& symbol, std::int64_t value,
                  std::map<std::size_t, std::map<std::string, std::optional<DynamicParam>>>& found) {
  const std::int64_t other = probe_value(value);
  std::map<std::vector<std::size_t>, const Step*> probe_steps;
  for (const auto& step : probe.steps) {
    if (step.kind == Step::Kind::task) probe_steps[step.nodes] = &step;
  }
  for (const auto& step : plan.steps) {
    if (step.kind != Step::Kind::task) continue;
    const ModelTask& task = plan.tasks[step.task];
    auto it = probe_steps.find(step.nodes);
    const ModelTask* moved = it == probe_steps.end() ? nullptr : &probe.tasks[it->second->task];
    auto& params = found[step.task];
    for (const auto& [name, v] : task.params) {
      std::optional<DynamicParam> dynamic;
      if (moved && moved->op == task.op && moved->params.contains(name)) {
        const std::int64_t w = moved->params.at(name);
        if (w != v && v % value == 0 && w == v / value * other) dynamic = DynamicParam{name, symbol, v / value};
      }
      auto [entry, added] = params.emplace(name, dynamic);
      if (!added && entry->second != dynamic) entry->second.reset();
    }
  }
}

}  // namespace

Plan plan_model(const Model& model, const PlanOptions& options) {
  const ops::Registry registry = ops::builtin_ops();
  std::int64_t block = options.block ? options.block : default_block(options.traits);
  if (block != 4 && block != 8 && block != 16) {
    throw ModelError(model.graph().path + ": block " + std::to_string(block) + " is not 4, 8 or 16");
  }
  Plan plan = plan_graph(model.bind(options.symbols), block, registry);
  plan.symbols = options.symbols;
  for (const auto& [symbol, value] : options.symbols) {
    std::map<std::string, std::int64_t> probed = options.symbols;
    probed[symbol] = probe_value(value);
    Plan probe;
    try {
      probe = plan_graph(model.bind(probed), block, registry);
    } catch (const ModelError&) {
      continue;  // the model does not take that value: its parameters stay static
    }
    std::map<std::size_t, std::map<std::string, std::optional<DynamicParam>>> found;
    mark_dynamic(plan, probe, symbol, value, found);
    for (const auto& [task, params] : found) {
      for (const auto& [name, dynamic] : params) {
        if (!dynamic) continue;
        auto& list = plan.tasks[task].dynamic;
        // A parameter that follows two symbols is not one symbol's multiple: static.
        auto clash = std::find_if(list.begin(), list.end(), [&](const DynamicParam& d) { return d.param == name; });
        if (clash != list.end()) {
          list.erase(clash);
        } else {
          list.push_back(*dynamic);
        }
      }
    }
  }
  return plan;
}

}  // namespace kestrel::model
