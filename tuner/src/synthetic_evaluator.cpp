// SyntheticEvaluator: costs from a function, for tests and the strategy bench.
#include <cmath>

#include "kestrel/base/stats.h"
#include "kestrel/tuner/evaluator.h"

namespace kestrel::tuner {

SyntheticEvaluator::SyntheticEvaluator(RoundCost cost, std::string device)
    : cost_(std::move(cost)), device_(std::move(device)) {}

SyntheticEvaluator SyntheticEvaluator::constant(std::function<double(const ops::Config&)> cost) {
  return SyntheticEvaluator([cost = std::move(cost)](const ops::Config& config, std::uint32_t) { return cost(config); });
}

rpc::awaitable<std::vector<Evaluation>> SyntheticEvaluator::evaluate(const Task& task,
                                                                     const std::vector<ops::Config>& configs,
                                                                     const rpc::MeasureSettings& settings,
                                                                     ResultCallback on_result) {
  std::vector<Evaluation> out(configs.size());
  for (std::size_t i = 0; i < configs.size(); ++i) {
    Evaluation& e = out[i];
    e.config = configs[i];
    ++counts_[ops::format_config(configs[i])];
    ++evaluations_;
    e.message = task.op->check(task.params, configs[i], task.target.traits);
    if (!e.message.empty()) {
      e.status = kernel::Status::instantiation_error;
    } else {
      e.device = device_;
      e.device_class = {"synthetic", device_, device_};
      e.number = 1;
      std::uint32_t rounds = std::max<std::uint32_t>(settings.repeat, 1);
      for (std::uint32_t r = 0; r < rounds; ++r) {
        double seconds = cost_(configs[i], r);
        if (!std::isfinite(seconds) || seconds <= 0) {
          e.status = kernel::Status::runtime_error;
          e.message = "synthetic failure";
          e.round_seconds.clear();
          break;
        }
        e.round_seconds.push_back(seconds);
      }
      if (e.ok()) e.cost = stats::median(e.round_seconds);
    }
    if (on_result) on_result(i, e);
  }
  co_return out;
}

rpc::awaitable<std::vector<Evaluation>> SyntheticEvaluator::evaluate_vendors(
    const Task&, const std::vector<ops::VendorKernel>& kernels, const rpc::MeasureSettings& settings,
    ResultCallback on_result) {
  std::vector<Evaluation> out;
  if (!vendor_cost_) co_return out;
  out.resize(kernels.size());
  for (std::size_t i = 0; i < kernels.size(); ++i) {
    Evaluation& e = out[i];
    e.implementation = kernels[i].implementation;
    ++counts_[e.implementation];
    ++evaluations_;
    e.device = device_;
    e.device_class = {"synthetic", device_, device_};
    e.number = 1;
    double seconds = vendor_cost_(e.implementation);
    if (!std::isfinite(seconds) || seconds <= 0) {
      e.status = kernel::Status::runtime_error;
      e.message = "the vendor library " + e.implementation + " is not on this device";
    } else {
      e.round_seconds.assign(std::max<std::uint32_t>(settings.repeat, 1), seconds);
      e.cost = seconds;
    }
    if (on_result) on_result(i, e);
  }
  co_return out;
}

}  // namespace kestrel::tuner
