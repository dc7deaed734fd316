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

// One activation buffer of a run: the data of a float value in one layout (the plain
// data a step wrote or converted it to, or its NCHWc copy), at an offset of the arena.
// Times: 0 is the copy of the inputs, 1 + i step i, steps + 1 the copy of the outputs; a
// buffer is live from `first` to `last`, both included (a step's inputs and outputs are
// live during it, so they never share memory).
struct MemoryBuffer {
  std::size_t value = 0;   // the value it is made for (a Reshape of that value where it dies passes it on)
  bool blocked = false;    // the NCHWc copy, else plain
  std::int64_t bytes = 0;  // exactly the tensor's floats
  std::int64_t offset = 0; // in the arena, a multiple of 64
  std::int64_t first = 0, last = 0;
};

// Where every activation buffer of a run goes, fixed when the program is lowered. What
// ProgramRunner allocates (graph inputs' copies, task outputs, portable outputs, the
// layout conversions a step asks for) is simulated step by step as the runner decides it,
// each buffer's lifetime taken from the steps' `frees`, and the buffers packed into one
// arena: largest first, each at the lowest 64-byte-aligned offset free of every placed
// buffer whose lifetime overlaps its own. Integer and boolean values (held as int64
// vectors: shapes, indices, masks) and values of unknown shape are not planned: they come
// from the allocator (tensor.h) as before. Constants and packed weights are the
// program's own, not the arena's.
struct MemoryPlan {
  std::int64_t arena = 0;  // bytes
  std::vector<MemoryBuffer> buffers;
};

struct Program {
  std::int64_t block = 0;  // the NCHWc block of the blocked activations
  std::vector<ProgramValue> values;
  std::vector<model::Initializer> constants;  // what portable steps read, plain
  std::vector<AlignedFloats> packed;          // what task steps read, in their layouts
  std::vector<ProgramNode> nodes;
  std::vector<ProgramStep> steps;
  std::vector<std::size_t> inputs, outputs;   // the graph's, by value
  MemoryPlan memory;                          // plan_memory(); empty: every buffer from the allocator
};

// The memory plan of `program` (MemoryPlan). lower_program stores it in the Program.
MemoryPlan plan_memory(const Program& program);

struct MemoryStats {
  std::int64_t arena = 0;         // the plan's arena
  std::int64_t sum = 0;           // every buffer's bytes added up: memory with no reuse at all
  std::int64_t peak = 0;          // the most bytes live at one time: no plan can use less
  std::size_t buffers = 0;
};
MemoryStats memory_stats(const MemoryPlan& plan);

// What is wrong with `plan` for a program of `steps` steps and `values` values: two
// buffers live at the same time that overlap, a buffer outside the arena or misaligned,
// a time or value out of range; "" when it is sound.
std::string memory_plan_conflict(const MemoryPlan& plan, std::size_t steps, std::size_t values);

// The file the programs of one export share their weights in (beside them): every float
// array the programs read (the task steps' packed weights, the portable steps' float
// constants) once, whichever programs read it ("KESTRELW", format version, payload,
// FNV-1a checksum). A program written with it names the file and holds its checksum,
// so a program and weights file of different exports are refused.
inline constexpr const char* kWeightsFile = "model.weights";

// Writes `program` to `path` (a versioned binary file with a checksum: little-endian
// numbers, strings and arrays with their counts; program.cpp), its float arrays in it.
// Not Cap'n Proto, which the wire protocol uses: the model runtime links no capnp (300 KB
// of a board build, docs/device-size.md), and this file is written and read by one
// program's code. Throws ModelError when the file cannot be written (the message names
// it and why).
void save_program(const Program& program, const std::string& path);

// What save_programs wrote.
struct SavedPrograms {
  std::uint64_t weights_bytes = 0;                // the weights file
  std::vector<std::uint64_t> program_bytes;       // each program
  std::size_t arrays = 0;                         // float arrays the programs read, all of them
  std::size_t stored = 0;                         // distinct ones, in the weights file
};
// Writes the programs of one export into folder `dir`: add() each, then finish() writes
// their float arrays, each distinct content once, to `dir/model.weights` (kWeightsFile),
// then each program to `dir/<name>` naming it: the buckets of one export repeat none of
// their weights. Holds the distinct arrays and the programs' encodings until finish(),
// not the programs. finish() throws ModelError when a file cannot be written.
class ArrayStore;
class ProgramsWriter {
 public:
  explicit ProgramsWriter(std::string dir);
  ~ProgramsWriter();
  ProgramsWriter(const ProgramsWriter&) = delete;
  ProgramsWriter& operator=(const ProgramsWriter&) = delete;

  void add(const Program& program, const std::string& name);
  SavedPrograms finish();

 private:
  struct Pending;
  std::string dir_;
  std::unique_ptr<ArrayStore> store_;
  std::vector<Pending> pending_;
};

// Reads a file save_program or a ProgramsWriter wrote (with the weights file it names, from
// the same folder). Throws ModelError naming the file: missing, not a Kestrel program
// (or weights file), another format version, truncated or corrupt (checksum), a weights
// file other than the one the program was written with, or inconsistent (a value, node,
// packed weight or array out of range, an unsound memory plan).
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
// (once) when a later step wants the other one. Their memory is one arena of the
// program's MemoryPlan, allocated once when the runner is built: each buffer the runner
// makes goes at its planned offset (tensor.h's TensorArena), so a run allocates no
// activation memory and after the first run touches no fresh page. What the plan leaves
// out (integer values, values of unknown shape, a portable operator's temporaries, a
// placement refused because the range is still in use) comes from the allocator, which
// keeps blocks by size. The outputs run() returns are copies the caller owns, out of the
// arena. Kernels' scratch is the kernel services' own. Not thread-safe: one run at a
// time.
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
  // Seconds each step took: its median over the runs since time_steps(true) (two clock
  // reads per step; off by default: a small model's run would pay a tenth of its time for
  // them); zeros when no run was timed. time_steps(true) starts the samples afresh.
  std::vector<StepTime> step_times() const;
  void time_steps(bool on);

  // The arena (bytes; 0 without a plan) and how its placements went since the runner was
  // built: `placed` buffers at their offsets, `refused` ones (the plan did not fit the
  // run: those came from the allocator).
  struct Memory {
    std::size_t arena = 0;
    std::size_t placed = 0, refused = 0;
  };
  Memory memory() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kestrel::deploy
