// Where the model runner's task steps get their kernels: an exported kernel library
// (`kestrel export`'s out/libkestrel_kernels.so, through its kestrel_dispatch entry), or
// kernels compiled here for this host (no export needed: `kestrel run` without --kernels,
// unit tests).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kestrel/deploy/program.h"
#include "kestrel/kernel/abi.h"
#include "kestrel/model/tasks.h"
#include "kestrel/ops/op.h"

namespace kestrel::deploy {

// One task at the workload it runs with (the task's params with its dynamic params at the
// run's symbol values).
struct TaskCall {
  const model::ModelTask* task = nullptr;
  ops::Params actual;
};

class KernelProvider {
 public:
  virtual ~KernelProvider() = default;
  // Makes the kernels of these calls ready (compiles, looks up); optional. Throws
  // ModelError when one cannot be had.
  virtual void prepare(const std::vector<TaskCall>&) {}
  // Runs the kernel of `task` at workload `actual` on `args` (the op's tensors, output
  // last). Returns 0, KESTREL_NO_KERNEL (-1) when there is none for that op and shape, or
  // the kernel's error code.
  virtual std::int32_t run(const model::ModelTask& task, const ops::Params& actual, std::span<const kestrel_arg> args) = 0;
  // Which kernel run() uses, for reports: "tuned <config>", "default <config>", ... or
  // "none".
  virtual std::string which(const model::ModelTask& task, const ops::Params& actual) = 0;
  // What a non-zero code of run() means.
  virtual std::string describe_error(std::int32_t code) const;
  // The kernel of `task` at `actual`, found once (after prepare()) so that each call does
  // no lookup; `task` must outlive it. The default calls run().
  virtual BoundKernel bind(const model::ModelTask& task, const ops::Params& actual);
  // The services (thread pool, scratch) the kernels run on, which the runner's portable
  // steps share; null when there are none (portable steps then use the calling thread).
  virtual const kestrel_services* services() const { return nullptr; }
};

// The kernels of an exported library, `<dir>/libkestrel_kernels.so`, called through its
// kestrel_dispatch entry with params in the op's params() order (unset optional params at
// their fallback), on a thread pool of `threads` threads owned by this object.
class ExportedLibrary final : public KernelProvider {
 public:
  // Throws ModelError when the library is missing, does not load, or lacks
  // kestrel_dispatch / kestrel_dispatch_which.
  ExportedLibrary(const std::string& dir, unsigned threads);
  ~ExportedLibrary() override;
  ExportedLibrary(const ExportedLibrary&) = delete;
  ExportedLibrary& operator=(const ExportedLibrary&) = delete;

  std::int32_t run(const model::ModelTask& task, const ops::Params& actual, std::span<const kestrel_arg> args) override;
  std::string which(const model::ModelTask& task, const ops::Params& actual) override;
  std::string describe_error(std::int32_t code) const override;
  BoundKernel bind(const model::ModelTask& task, const ops::Params& actual) override;
  const kestrel_services* services() const override;
  const std::string& path() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Kernels compiled in this process for this host (host::Compiler, native target) and
// run on a thread pool of `threads` threads: each task at `configs[task key]` when given
// ("<op>/<format_params(params)>" of the task as planned, ModelTask::key()), else at the op's default configuration for
// the host's traits. Compiled once per workload (prepare() compiles all in parallel).
class CompiledKernels final : public KernelProvider {
 public:
  CompiledKernels(unsigned threads, std::map<std::string, ops::Config> configs = {});
  ~CompiledKernels() override;
  CompiledKernels(const CompiledKernels&) = delete;
  CompiledKernels& operator=(const CompiledKernels&) = delete;

  void prepare(const std::vector<TaskCall>& calls) override;
  std::int32_t run(const model::ModelTask& task, const ops::Params& actual, std::span<const kestrel_arg> args) override;
  std::string which(const model::ModelTask& task, const ops::Params& actual) override;
  std::string describe_error(std::int32_t code) const override;
  BoundKernel bind(const model::ModelTask& task, const ops::Params& actual) override;
  const kestrel_services* services() const override;
  // The traits of this host's CPU, which the default configurations follow.
  const ops::TargetTraits& traits() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// "<op>/<format_params(params)>": ModelTask::key() of a task at these params.
std::string task_key(const std::string& op, const ops::Params& params);

// The op's params in its params() order, unset ones at their fallback (kestrel_dispatch's
// convention).
std::vector<std::int64_t> ordered_params(const ops::Op& op, const ops::Params& params);

}  // namespace kestrel::deploy
