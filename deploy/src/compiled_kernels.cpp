// Kernels compiled here for this host: host::Compiler (Clang + LLD in process) for the
// native target, loaded with the device runtime's kernel runner, run on its services.
#include <algorithm>
#include <optional>

#include "kestrel/deploy/kernel_provider.h"
#include "kestrel/device_runtime/kernel_runner.h"
#include "kestrel/device_runtime/kernel_services.h"
#include "kestrel/host/compiler.h"
#include "kestrel/host/target.h"

namespace kestrel::deploy {

using model::ModelError;
using model::ModelTask;

struct CompiledKernels::Impl {
  Impl(unsigned threads, std::map<std::string, ops::Config> records)
      : services(threads), target(host::parse_target("native")), configs(std::move(records)) {}

  struct Entry {
    std::optional<device::CpuKernelModule> module;
    std::string which;
  };

  device::KernelServices services;
  host::Target target;
  std::map<std::string, ops::Config> configs;  // by the task's key as planned
  host::Compiler compiler;
  std::map<std::string, Entry> kernels;        // by the key at the actual workload

  // The configuration of `task` at `actual`: its record when valid there, else the
  // op's default for this host.
  std::pair<ops::Config, std::string> config_for(const ops::Op& op, const ModelTask& task, const ops::Params& actual) {
    auto it = configs.find(task_key(task.op_name(), task.params));
    if (it != configs.end() && op.check(actual, it->second, target.traits).empty()) {
      return {it->second, "compiled " + ops::format_config(it->second)};
    }
    ops::Config config = op.default_config(actual, target.traits);
    return {config, "compiled default " + ops::format_config(config)};
  }

  void compile(const std::vector<TaskCall>& calls) {
    std::vector<host::CompileRequest> requests;
    std::vector<std::string> keys, which;
    for (const TaskCall& call : calls) {
      std::string key = task_key(call.task->op_name(), call.actual);
      if (kernels.count(key) || std::find(keys.begin(), keys.end(), key) != keys.end()) continue;
      const ops::Op& op = *call.task->op;
      auto [config, text] = config_for(op, *call.task, call.actual);
      try {
        requests.push_back({op.source(ops::Backend::cpu, call.actual, config), target, 3});
      } catch (const ops::OpError& e) {
        throw ModelError("cannot build the kernel of " + key + ": " + e.what());
      }
      keys.push_back(key);
      which.push_back(text);
    }
    if (requests.empty()) return;
    std::vector<host::CompileResult> results = compiler.compile_all(requests);
    for (std::size_t i = 0; i < results.size(); ++i) {
      if (!results[i].ok) {
        throw ModelError("the kernel of " + keys[i] + " does not compile: " + results[i].diagnostics.substr(0, 600));
      }
      std::string error;
      auto module = device::CpuKernelModule::load(results[i].shared_object, keys[i], "", error);
      if (!module) throw ModelError("the kernel of " + keys[i] + " does not load: " + error);
      kernels[keys[i]] = Entry{std::move(module), which[i]};
    }
  }

  Entry& entry(const ModelTask& task, const ops::Params& actual) {
    std::string key = task_key(task.op_name(), actual);
    auto it = kernels.find(key);
    if (it == kernels.end()) {
      compile({TaskCall{&task, actual}});
      it = kernels.find(key);
    }
    return it->second;
  }
};

CompiledKernels::CompiledKernels(unsigned threads, std::map<std::string, ops::Config> configs)
    : impl_(std::make_unique<Impl>(threads, std::move(configs))) {}
CompiledKernels::~CompiledKernels() = default;

void CompiledKernels::prepare(const std::vector<TaskCall>& calls) { impl_->compile(calls); }

std::int32_t CompiledKernels::run(const ModelTask& task, const ops::Params& actual, std::span<const kestrel_arg> args) {
  Impl::Entry& e = impl_->entry(task, actual);
  std::int32_t rc = e.module->call(impl_->services.table(), args);
  impl_->services.reclaim_scratch();
  return rc;
}

BoundKernel CompiledKernels::bind(const ModelTask& task, const ops::Params& actual) {
  const device::CpuKernelModule* module = &*impl_->entry(task, actual).module;
  device::KernelServices* services = &impl_->services;
  return [module, services](std::span<const kestrel_arg> args) {
    std::int32_t rc = module->call(services->table(), args);
    services->reclaim_scratch();
    return rc;
  };
}

const kestrel_services* CompiledKernels::services() const { return impl_->services.table(); }

std::string CompiledKernels::which(const ModelTask& task, const ops::Params& actual) {
  return impl_->entry(task, actual).which;
}

std::string CompiledKernels::describe_error(std::int32_t code) const { return impl_->services.describe_error(code); }

const ops::TargetTraits& CompiledKernels::traits() const { return impl_->target.traits; }

}  // namespace kestrel::deploy
