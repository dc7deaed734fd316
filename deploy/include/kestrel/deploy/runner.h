// The model runner: executes a bound Graph step by step as its Plan says, task steps with
// a KernelProvider's kernels, the other steps with the portable implementations. Proves
// an export (same output as ONNX Runtime) and times a model end to end. It lowers the
// plan into a Program and runs it with the ProgramRunner, as a board does (program.h).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kestrel/deploy/dispatch_library.h"
#include "kestrel/deploy/kernel_provider.h"
#include "kestrel/deploy/program.h"
#include "kestrel/deploy/tensor.h"
#include "kestrel/model/graph.h"
#include "kestrel/model/tasks.h"
#include "kestrel/ops/op.h"

namespace kestrel::deploy {

// A plan with every node a portable step (no task): the reference execution.
model::Plan portable_plan(const model::Graph& graph);

// `plan` over `graph` (bound at `symbols`, as Runner takes them) lowered into a Program
// (program.h): values numbered, the task steps' weights packed, when each value dies,
// where each activation buffer goes (plan_memory).
// Throws ModelError for a step naming no task or whose arguments do not fit its op.
Program lower_program(const model::Graph& graph, const model::Plan& plan,
                      const std::map<std::string, std::int64_t>& symbols = {});

class Runner {
 public:
  // `graph` bound at the run's symbol values (Model::bind), `plan` from plan_model (at
  // those values, or at a bucket's: a task's dynamic params then follow `symbols`),
  // `symbols` the run's values. Repacks the initializers the task steps use once. The
  // graph, plan (with the registry its tasks' ops live in) and kernels are borrowed and
  // must outlive the runner. Throws ModelError for a step that cannot run (a portable
  // step of an operator with no portable implementation) and from kernels.prepare().
  Runner(const model::Graph& graph, const model::Plan& plan, KernelProvider& kernels,
         std::map<std::string, std::int64_t> symbols = {});
  // An exported whole model: `<dir>/<program>` (model.kprog, or a bucket's
  // model.<binding>.kprog) run on `<dir>/libkestrel_kernels.so` on a pool of `threads`
  // threads, the code a board runs (libkestrel_model). Throws ModelError for a missing or
  // corrupt program, a library that does not load or lacks a kernel the program names, an
  // operator with no portable implementation.
  Runner(const std::string& export_dir, unsigned threads, const std::string& program = kProgramFile);
  ~Runner();
  Runner(const Runner&) = delete;
  Runner& operator=(const Runner&) = delete;

  // Runs the graph on `inputs` (by graph input name, plain layout, each of its bound
  // shape) and returns the graph outputs (plain) by name. Throws ModelError for a missing
  // or misshapen input, a kernel that fails (its code and meaning, the task, the node) or
  // a portable step that fails.
  std::map<std::string, Tensor> run(const std::map<std::string, Tensor>& inputs);

  // Per task step, in order: "<task key>: <which kernel>".
  std::vector<std::string> kernels_used() const;

  // Seconds each step took (see time_steps), layout conversions of its inputs included:
  // step is a task step's key and nodes, or "<op_type> <node name>"; kind a task step's op
  // ("gemm"), a portable step's ONNX operator ("Softmax").
  // Off until time_steps(true); then each step's median over the runs since (ProgramRunner::
  // time_steps): zeros otherwise.
  using StepTime = deploy::StepTime;
  std::vector<StepTime> step_times() const;
  void time_steps(bool on);

  // What runs: the plan lowered (what kestrel export --model writes as model.kprog).
  const Program& program() const;

  // The activation arena and its placements so far (ProgramRunner::memory).
  ProgramRunner::Memory memory() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kestrel::deploy
