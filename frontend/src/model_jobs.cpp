// Tuning jobs from an ONNX model's tasks.
#include "kestrel/frontend/model_jobs.h"

#include <algorithm>
#include <map>
#include <string>

#include "kestrel/model/tasks.h"

namespace kestrel::frontend {

std::vector<tuner::TuneJob> model_jobs(const model::Model& model, const std::vector<model::Binding>& buckets,
                                       std::int64_t block, const ops::Registry& registry, const host::Target& target,
                                       bool winograd) {
  std::vector<tuner::TuneJob> jobs;
  std::map<std::string, std::size_t> by_key;
  std::vector<std::string> untuned;
  for (const auto& binding : buckets) {
    model::PlanOptions options;
    options.block = block;
    options.traits = target.traits;
    options.symbols = binding;
    options.registry = &registry;
    options.winograd = winograd;
    model::Plan plan = model::plan_model(model, options);
    for (const auto& task : plan.tasks) {
      auto [it, fresh] = by_key.try_emplace(task.key(), jobs.size());
      if (!fresh) {
        jobs[it->second].weight = std::max(jobs[it->second].weight, static_cast<double>(task.occurrences));
        continue;
      }
      tuner::TuneJob job{task};  // the task's op is `registry`'s (PlanOptions::registry)
      if (!binding.empty()) job.label += " [" + model::to_string(binding) + "]";
      job.weight = task.occurrences;
      jobs.push_back(std::move(job));
    }
    if (jobs.empty() && untuned.empty()) {
      for (const auto& u : plan.untuned) untuned.push_back(u.op_type);
    }
  }
  if (jobs.empty()) {
    std::string ops;
    for (const auto& u : untuned) ops += (ops.empty() ? "" : ", ") + u;
    throw model::ModelError(model.graph().path + " has no operator Kestrel tunes (it has: " +
                            (ops.empty() ? "no operators" : ops) + "); see kestrel tasks --model " +
                            model.graph().path);
  }
  return jobs;
}

}  // namespace kestrel::frontend
