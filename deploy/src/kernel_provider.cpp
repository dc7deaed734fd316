// What every kernel provider shares: the dispatch convention for params, task keys.
#include "kestrel/deploy/kernel_provider.h"

namespace kestrel::deploy {

std::string KernelProvider::describe_error(std::int32_t code) const {
  if (code == -1) return "no kernel for that op and shape";
  return "kernel returned error code " + std::to_string(code);
}

BoundKernel KernelProvider::bind(const model::ModelTask& task, const ops::Params& actual) {
  return [this, &task, actual](std::span<const kestrel_arg> args) { return run(task, actual, args); };
}

std::string task_key(const std::string& op, const ops::Params& params) { return op + "/" + ops::format_params(params); }

std::vector<std::int64_t> ordered_params(const ops::Op& op, const ops::Params& params) {
  std::vector<std::int64_t> out;
  for (const auto& spec : op.params()) {
    auto it = params.find(spec.name);
    out.push_back(it != params.end() ? it->second : spec.fallback);
  }
  return out;
}

}  // namespace kestrel::deploy
