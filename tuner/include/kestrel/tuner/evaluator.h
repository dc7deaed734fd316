// Evaluating configurations of a task: the one place that turns a configuration into a
// measured outcome. MeasuredEvaluator checks, generates, compiles and measures on a
// leased pool; SyntheticEvaluator applies a cost function (unit tests, strategy bench).
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "kestrel/host/compiler.h"
#include "kestrel/host/measure_client.h"
#include "kestrel/kernel/status.h"
#include "kestrel/ops/op.h"
#include "kestrel/rpc/measure.h"
#include "kestrel/tuner/task.h"

namespace kestrel::tuner {

struct Evaluation {  // one configuration's outcome
  ops::Config config;
  kernel::Status status = kernel::Status::ok;
  std::string message;
  std::vector<double> round_seconds;
  double cost = std::numeric_limits<double>::infinity();  // median of round_seconds when ok
  double compile_ms = 0;
  std::string device;  // device name that measured it
  records::DeviceClass device_class;
  std::uint32_t number = 0;  // calls per timed round
  double max_error = 0;      // largest |out - ref| seen
  // Who made the kernel: "kestrel" (a configuration of the op), or the vendor library of
  // a shim kernel ("openblas"); its config is then empty.
  std::string implementation = records::kKestrelImplementation;
  kernel::MachineState machine;  // the device's machine when it was measured
  bool ok() const { return status == kernel::Status::ok; }
};

using ResultCallback = std::function<void(std::size_t, const Evaluation&)>;

class Evaluator {
 public:
  virtual ~Evaluator() = default;
  // Checks, generates, compiles and measures each config of `task`. on_result (optional) is
  // called as each one ends, with its index in `configs`. Returns all, in order. Failures
  // of a configuration are data (its status); throws only when nothing can be measured
  // (the reference does not compile, the pool is gone).
  virtual rpc::awaitable<std::vector<Evaluation>> evaluate(const Task& task, const std::vector<ops::Config>& configs,
                                                           const rpc::MeasureSettings& settings,
                                                           ResultCallback on_result = {}) = 0;
  // Measures vendor libraries' shim kernels (ops::Op::vendor_kernels) on the task's
  // workload like candidates: each evaluation carries its kernel's implementation and an
  // empty config. A library missing on the device is a runtime error saying so. The
  // default measures nothing and returns nothing (an evaluator without vendors).
  virtual rpc::awaitable<std::vector<Evaluation>> evaluate_vendors(const Task& task,
                                                                   const std::vector<ops::VendorKernel>& kernels,
                                                                   const rpc::MeasureSettings& settings,
                                                                   ResultCallback on_result = {});
};

// A kernel made outside an op (a user kernel file), ready to compile.
struct PreparedKernel {
  ops::Config config;        // recorded with its outcome (may be empty)
  std::string invalid;       // non-empty: an instantiation error; not compiled
  ops::KernelSource source;
};
// What every kernel of a batch is run on.
struct PreparedWorkload {
  host::Workload workload;                  // args and tolerance (the reference is compiled here)
  std::optional<ops::KernelSource> reference;  // a CPU kernel; none: no correctness check
};

// Compiles on `compiler` and measures on `measurer` (open, devices leased). Both borrowed.
class MeasuredEvaluator final : public Evaluator {
 public:
  MeasuredEvaluator(host::Compiler& compiler, host::MeasureClient& measurer, std::string device_key = "");

  rpc::awaitable<std::vector<Evaluation>> evaluate(const Task& task, const std::vector<ops::Config>& configs,
                                                   const rpc::MeasureSettings& settings,
                                                   ResultCallback on_result = {}) override;
  rpc::awaitable<std::vector<Evaluation>> evaluate_vendors(const Task& task,
                                                           const std::vector<ops::VendorKernel>& kernels,
                                                           const rpc::MeasureSettings& settings,
                                                           ResultCallback on_result = {}) override;
  // The same path for prepared kernels: compile (with the reference) for `target`, measure.
  rpc::awaitable<std::vector<Evaluation>> evaluate_kernels(const std::vector<PreparedKernel>& kernels,
                                                           const PreparedWorkload& workload,
                                                           const host::Target& target,
                                                           const rpc::MeasureSettings& settings,
                                                           ResultCallback on_result = {});

 private:
  records::DeviceClass class_of(const std::string& device, const host::Target& target) const;
  static PreparedWorkload prepare_workload(const Task& task);

  host::Compiler& compiler_;
  host::MeasureClient& measurer_;
  std::string device_key_;
};

// Costs from a function of the configuration, no compiler and no device. A configuration
// the op's check refuses is an instantiation error; a non-finite cost is a runtime error.
class SyntheticEvaluator final : public Evaluator {
 public:
  // Seconds of one round of `config`; round is 0..settings.repeat-1.
  using RoundCost = std::function<double(const ops::Config& config, std::uint32_t round)>;
  explicit SyntheticEvaluator(RoundCost cost, std::string device = "synthetic");
  // Same cost in every round.
  static SyntheticEvaluator constant(std::function<double(const ops::Config&)> cost);

  rpc::awaitable<std::vector<Evaluation>> evaluate(const Task& task, const std::vector<ops::Config>& configs,
                                                   const rpc::MeasureSettings& settings,
                                                   ResultCallback on_result = {}) override;
  // Vendor kernels cost vendor_cost(implementation) per round (non-finite: a runtime
  // error, as for a library missing on the device); without one, none is measured.
  void vendor_cost(std::function<double(const std::string& implementation)> cost) { vendor_cost_ = std::move(cost); }
  rpc::awaitable<std::vector<Evaluation>> evaluate_vendors(const Task& task,
                                                           const std::vector<ops::VendorKernel>& kernels,
                                                           const rpc::MeasureSettings& settings,
                                                           ResultCallback on_result = {}) override;

  // How many times each configuration (ops::format_config) was evaluated.
  const std::map<std::string, std::size_t>& counts() const { return counts_; }
  std::size_t evaluations() const { return evaluations_; }

 private:
  RoundCost cost_;
  std::function<double(const std::string&)> vendor_cost_;
  std::string device_;
  std::map<std::string, std::size_t> counts_;
  std::size_t evaluations_ = 0;
};

}  // namespace kestrel::tuner
