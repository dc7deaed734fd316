// A model lowered for execution: every step the runner takes, with nothing left to look
// up. No ONNX, no op registry, no planner: values by number with their bound shapes, task
// steps as (op name, params in the op's order, arguments) for an exported library's
// kestrel_dispatch, the weights those steps read already packed into the kernels'
// layouts, portable steps as the ONNX nodes they run, and when each value dies.
//
// The host lowers a bound Graph and its Plan into a Program (lower.h); `kestrel export
// --model` writes it next to the kernel library (model.kprog), and the same
// ProgramRunner executes it in `kestrel run` and on a board (libkestrel_model,
// kestrel_model.h). This header and program.cpp build for boards: they need only
// tensor.h, layout.h, portable_ops.h and model/graph.h's plain structs.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kestrel/deploy/tensor.h"
#include "kestrel/kernel/abi.h"
#include "kestrel/model/graph.h"
#include "kestrel/model/tasks.h"

namespace kestrel::deploy {

// The file a Program is written to, in an export's folder: model.kprog for a model
// exported at one binding of its symbols, model.<binding>.kprog for each bucket of one
// exported at several ("model.seq=32.kprog"; program_file()).
inline constexpr const char* kProgramFile = "model.kprog";
std::string program_file(const std::map<std::string, std::int64_t>& binding);

struct ProgramValue {
  std::string name;
  model::ElemType type = model::ElemType::f32;
  std::optional<std::vector<std::int64_t>> shape;  // bound; none when not known
  std::int64_t constant = -1;                      // index into Program::constants, or -1
};

// One argument of a task step. A weight the kernel reads packed has `packed` >= 0 (into
// Program::packed) and no value to read at run time.
struct ProgramArg {
  std::size_t value = 0;
  model::ArgLayout layout = model::ArgLayout::plain;
  std::int64_t elements = 0;  // the op's tensor size for this argument
  std::int64_t packed = -1;
};

// A portable node: the ONNX node and its values by number (kNoValue: an omitted input).
struct ProgramNode {
  model::Node node;
  std::vector<std::size_t> in, out;
};

inline constexpr std::size_t kNoValue = static_cast<std::size_t>(-1);

struct ProgramStep {
  bool task = false;
  std::string label;  // a task's key, pattern and nodes; a portable step's "<op_type> <node>"
  std::string kind;   // the op ("gemm") or the ONNX operator ("Softmax")
  // A task step: the kernel to dispatch to and its arguments, output last.
  std::string op;
  std::vector<std::int64_t> params;
  std::vector<ProgramArg> args;
  // A portable step: indices into Program::nodes, run in order.
  std::vector<std::size_t> nodes;
  // Values dead after this step (their memory goes back to the allocator).
  std::vector<std::size_t> frees;
};

struct Program {
  std::int64_t block = 0;  // the NCHWc block of the blocked activations
  std::vector<ProgramValue> values;
  std::vector<model::Initializer> constants;  // what portable steps read, plain
  std::vector<AlignedFloats> packed;          // what task steps read, in their layouts
  std::vector<ProgramNode> nodes;
  std::vector<ProgramStep> steps;
  std::vector<std::size_t> inputs, outputs;   // the graph's, by value
};

// Writes `program` to `path` (a versioned binary file with a checksum: little-endian
// numbers, strings and arrays with their counts; program.cpp). Not Cap'n Proto, which the
// wire protocol uses: the model runtime links no capnp (300 KB of a board build,
// docs/device-size.md), and this file is written and read by one program's code. Throws
// ModelError when the file cannot be written (the message names it and why).
void save_program(const Program& program, const std::string& path);
// Reads a file save_program wrote. Throws ModelError naming the file: missing, not a
// Kestrel program, another format version, truncated or corrupt (checksum), or
// inconsistent (a value, node or packed weight out of range).
Program load_program(const std::string& path);

// Seconds each step took in the last run.
struct StepTime {
  std::string step;
  std::string kind;
  bool task = false;
  double seconds = 0;
};

// One task step's kernel, found once: runs it on the op's tensors (output last) and
// returns its code (0 ok).
using BoundKernel = std::function<std::int32_t(std::span<const kestrel_arg>)>;

// Executes a Program. Activations keep the layout a step wrote them in and are converted
// (once) when a later step wants the other one; a dying value's buffer goes back to the
// allocator, which hands it to the next step of that size (no fresh memory after the
// first run). Not thread-safe: one run at a time.
class ProgramRunner {
 public:
  // `kernels`: per step, the task steps' kernels (empty for portable steps). `services`:
  // the kernels' thread pool, which portable steps share (null: the calling thread).
  // `describe_error` turns a kernel's non-zero code into words. Throws ModelError for a
  // portable step whose operator has no portable implementation (every one, named) and
  // for a task step with no kernel.
  ProgramRunner(std::shared_ptr<const Program> program, std::vector<BoundKernel> kernels,
                const kestrel_services* services, std::function<std::string(std::int32_t)> describe_error);
  ~ProgramRunner();
  ProgramRunner(const ProgramRunner&) = delete;
  ProgramRunner& operator=(const ProgramRunner&) = delete;

  // Runs on `inputs` (by input name, plain, each of its bound shape; float inputs f32,
  // integer and boolean ones i64) and returns the outputs (plain) by name. Throws
  // ModelError for a missing or misshapen input, a kernel that fails (its code and
  // meaning, the step) or a portable step that fails; a failed run leaves nothing behind
  // for the next.
  std::map<std::string, Tensor> run(const std::map<std::string, Tensor>& inputs);

  const Program& program() const;
  std::vector<StepTime> step_times() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kestrel::deploy
