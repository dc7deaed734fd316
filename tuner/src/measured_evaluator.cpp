// MeasuredEvaluator: check -> source -> check_launch -> compile (with the reference) ->
// measure on the leased pool. The only copy of that path.
#include <algorithm>
#include <memory>
#include <stdexcept>

#include "kestrel/base/stats.h"
#include "kestrel/host/compile_async.h"
#include "kestrel/tuner/evaluator.h"

namespace kestrel::tuner {

rpc::awaitable<std::vector<Evaluation>> Evaluator::evaluate_vendors(const Task&, const std::vector<ops::VendorKernel>&,
                                                                     const rpc::MeasureSettings&, ResultCallback) {
  co_return std::vector<Evaluation>{};
}

MeasuredEvaluator::MeasuredEvaluator(host::Compiler& compiler, host::MeasureClient& measurer, std::string device_key)
    : compiler_(compiler), measurer_(measurer), device_key_(std::move(device_key)) {}

records::DeviceClass MeasuredEvaluator::class_of(const std::string& device, const host::Target& target) const {
  for (const auto& lease : measurer_.leases()) {
    if (lease.info.name == device) return device_class_of(device_key_, lease.info, target);
  }
  return {device_key_, "", ""};
}

rpc::awaitable<std::vector<Evaluation>> MeasuredEvaluator::evaluate(const Task& task,
                                                                    const std::vector<ops::Config>& configs,
                                                                    const rpc::MeasureSettings& settings,
                                                                    ResultCallback on_result) {
  const ops::Op& op = *task.op;
  std::vector<PreparedKernel> kernels(configs.size());
  for (std::size_t i = 0; i < configs.size(); ++i) {
    kernels[i].config = configs[i];
    kernels[i].invalid = op.check(task.params, configs[i], task.target.traits);
    if (!kernels[i].invalid.empty()) continue;
    kernels[i].source = op.source(task.target.backend, task.params, configs[i]);
    // A launch beyond the device's limits (threads, shared memory) is never compiled.
    kernels[i].invalid = host::check_launch(kernels[i].source, task.target);
  }
  co_return co_await evaluate_kernels(kernels, prepare_workload(task), task.target, settings, std::move(on_result));
}

PreparedWorkload MeasuredEvaluator::prepare_workload(const Task& task) {
  PreparedWorkload workload;
  for (const auto& t : task.op->tensors(task.params)) {
    workload.workload.args.push_back({t.elements(), t.role == ops::Role::output});
  }
  workload.workload.tolerance = task.op->tolerance(task.params);
  // The reference is a CPU kernel, for the device's CPU, whatever the target.
  workload.reference = task.op->reference(task.params);
  return workload;
}

rpc::awaitable<std::vector<Evaluation>> MeasuredEvaluator::evaluate_vendors(
    const Task& task, const std::vector<ops::VendorKernel>& vendors, const rpc::MeasureSettings& settings,
    ResultCallback on_result) {
  std::vector<PreparedKernel> kernels(vendors.size());
  for (std::size_t i = 0; i < vendors.size(); ++i) kernels[i].source = vendors[i].source;
  // Each outcome is labelled with its library before anyone sees it.
  ResultCallback labelled = [&](std::size_t i, const Evaluation& e) {
    if (!on_result) return;
    Evaluation copy = e;
    copy.implementation = vendors[i].implementation;
    on_result(i, copy);
  };
  auto out = co_await evaluate_kernels(kernels, prepare_workload(task), task.target, settings, labelled);
  for (std::size_t i = 0; i < out.size(); ++i) out[i].implementation = vendors[i].implementation;
  co_return out;
}

rpc::awaitable<std::vector<Evaluation>> MeasuredEvaluator::evaluate_kernels(const std::vector<PreparedKernel>& kernels,
                                                                            const PreparedWorkload& prepared,
                                                                            const host::Target& target,
                                                                            const rpc::MeasureSettings& settings,
                                                                            ResultCallback on_result) {
  std::vector<Evaluation> out(kernels.size());
  auto finish = [&](std::size_t i) {
    if (on_result) on_result(i, out[i]);
  };
  std::vector<host::CompileRequest> requests;
  std::vector<std::size_t> request_of;
  for (std::size_t i = 0; i < kernels.size(); ++i) {
    out[i].config = kernels[i].config;
    out[i].device_class.key = device_key_;
    if (!kernels[i].invalid.empty()) {
      out[i].status = kernel::Status::instantiation_error;
      out[i].message = kernels[i].invalid;
      finish(i);
      continue;
    }
    requests.push_back({kernels[i].source, target});
    request_of.push_back(i);
  }
  if (requests.empty()) co_return out;
  if (prepared.reference) requests.push_back({*prepared.reference, target.reference_target()});
  auto compiled = co_await host::compile_async(compiler_, std::move(requests));

  host::Workload workload = prepared.workload;
  if (prepared.reference) {
    host::CompileResult& reference = compiled.back();
    if (!reference.ok) throw std::runtime_error("the reference kernel does not compile:\n" + reference.diagnostics);
    workload.reference = {reference.hash, std::make_shared<std::vector<std::uint8_t>>(std::move(reference.shared_object))};
  }
  std::vector<host::Candidate> candidates;
  for (std::size_t k = 0; k < request_of.size(); ++k) {
    std::size_t i = request_of[k];
    host::CompileResult& c = compiled[k];
    out[i].compile_ms = c.compile_ms;
    if (!c.ok) {
      out[i].status = kernel::Status::host_compile_error;
      out[i].message = c.diagnostics;
      finish(i);
      continue;
    }
    host::Candidate candidate;
    candidate.id = i;
    candidate.module = {c.hash, std::make_shared<std::vector<std::uint8_t>>(std::move(c.shared_object))};
    candidates.push_back(std::move(candidate));
  }
  if (candidates.empty()) co_return out;
  std::vector<bool> done(kernels.size(), false);
  co_await measurer_.measure(workload, candidates, settings, [&](const host::Measurement& m) {
    std::size_t i = m.id;
    Evaluation& e = out[i];
    e.status = m.status;
    e.message = m.message;
    e.round_seconds = m.round_seconds;
    e.cost = m.status == kernel::Status::ok ? stats::median(m.round_seconds) : std::numeric_limits<double>::infinity();
    e.device = m.device;
    e.device_class = class_of(m.device, target);
    e.number = m.number;
    e.max_error = m.max_error;
    e.machine = m.machine;
    done[i] = true;
    finish(i);
  });
  for (const auto& c : candidates) {
    if (done[c.id]) continue;  // measure() returns with every candidate measured or throws
    out[c.id].status = kernel::Status::device_lost;
    out[c.id].message = "no result came back from the pool";
    finish(c.id);
  }
  co_return out;
}

}  // namespace kestrel::tuner
