// Checking a model run against ONNX Runtime and timing it: what `kestrel run` does
// between parsing its options and printing. Seeded random inputs, the runner run once for
// its outputs and then timed, ONNX Runtime run on the same inputs at the same thread count
// (scripts/ort_run.py, by a Python found with python_tool.h), each output compared within
// a tolerance relative to ONNX Runtime's largest magnitude, and the latency figures.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "kestrel/deploy/runner.h"
#include "kestrel/deploy/tensor.h"
#include "kestrel/model/graph.h"

namespace kestrel::deploy {

// The run failed after its inputs were accepted: a kernel or step that fails, ONNX
// Runtime's script failing or answering nonsense, a scratch file that cannot be written.
// A failure of the work (`kestrel run` exits 1), not of its input.
struct ModelRunError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The default of --tolerance: the largest absolute difference allowed, relative to the
// largest magnitude of ONNX Runtime's output.
inline constexpr double kDefaultTolerance = 1e-3;

// The inputs `kestrel run` feeds a model with no --inputs: float inputs uniform in
// [-1, 1), the first input from `seed`, the next from seed + 1, ... (device::fill_uniform,
// as a measurement fills its arguments: the same seed gives the same inputs everywhere);
// integer inputs (int64, int32) values a real model
// gets: the indices of a Gather (directly, or through Cast/Reshape/Unsqueeze/Squeeze/
// Flatten/Identity) uniform in [0, the gathered extent) (token ids inside the vocabulary),
// an input whose name contains "mask" all ones, any other small values in [0, 4);
// inputs of another element type (bool) all ones (true). Integer and boolean inputs are
// held as i64 tensors. The graph must be bound (every input shape concrete).
std::map<std::string, Tensor> generated_inputs(const model::Graph& graph, std::uint64_t seed);

// What generated_inputs gives an integer input, for messages: "token ids in [0, 1000)
// (Gather /embeddings/word_embeddings/Gather)", "ones (a mask)", "values in [0, 4)", "true".
std::string generated_input_text(const model::Graph& graph, const std::string& input);

// An array of a .npz file: its shape and its values as float (f4, f8) or integers
// (i8, i4, i2, i1, u1, u2, u4, b1 as 0/1).
struct NpzArray {
  std::string dtype;  // the .npy descr: "<f4", "<i8", "|b1", ...
  std::vector<std::int64_t> shape;
  bool floating = false;
  std::vector<double> values;  // row-major
};
// Reads a NumPy .npz archive (a zip of .npy files, as np.savez writes it: entries stored
// uncompressed) into arrays by entry name without ".npy" ("input:input_ids",
// "logits"). Throws UsageError naming the file and the entry: no such file, not a zip
// archive, a compressed entry (np.savez_compressed), an encrypted or truncated entry,
// a .npy header that cannot be read, Fortran order, a big-endian or unsupported dtype, a
// size that does not match the shape.
std::map<std::string, NpzArray> read_npz(const std::string& path);

// The model's inputs from a .npz's arrays: for each graph input, the entry "input:NAME"
// (as scripts/model-zoo.py writes) or "NAME". Float inputs need a float array, integer and
// boolean ones an integer or boolean array; each must have the input's bound shape.
// Entries "output:..." are not inputs (compare_npz_outputs); another entry naming no input is an error. Throws
// UsageError saying which input and why.
std::map<std::string, Tensor> inputs_from_npz(const model::Graph& graph, const std::map<std::string, NpzArray>& arrays,
                                              const std::string& path);

// The values of the model's symbolic input dimensions the .npz's arrays have, as
// --shape writes them ("batch=1;sequence=16"); "" when the model has no symbol. Throws
// UsageError when two arrays disagree on a symbol.
std::string npz_binding(const model::Graph& graph, const std::map<std::string, NpzArray>& arrays, const std::string& path);

// The outputs whose values are all equal (all zeros, say), in the graph's order: such an
// output "matches" ONNX Runtime at any error and proves little, so `kestrel run` warns.
std::vector<std::string> constant_outputs(const model::Graph& graph, const std::map<std::string, Tensor>& outputs);

// The runner built for a check: as Runner's constructor, with a ModelError (a step that
// cannot run, a kernel that cannot be prepared) thrown as ModelRunError.
std::unique_ptr<Runner> make_checked_runner(const model::Graph& graph, const model::Plan& plan, KernelProvider& kernels,
                                            std::map<std::string, std::int64_t> symbols);

struct Latency {
  double median_ms = 0, min_ms = 0;
  int runs = 0;
};

// Wall-clock times of `repeat` calls of `run` (at least 1).
Latency time_runs(const std::function<void()>& run, int repeat);

struct TimedRun {
  std::map<std::string, Tensor> outputs;  // of the first, untimed run
  Latency latency;                        // of the `repeat` runs after it
};
// Runs the runner once for its outputs, then `repeat` times timed. A ModelError of the
// runner is thrown as ModelRunError.
TimedRun run_and_time(Runner& runner, const std::map<std::string, Tensor>& inputs, int repeat);

// ONNX Runtime as scripts/ort_run.py runs it.
struct OnnxRuntime {
  std::string python;  // find_python()
  std::string script;  // default_ort_script() unless given
};
// scripts/ort_run.py of the source tree.
std::string default_ort_script();
// Why ONNX Runtime cannot check a run ("no script ... (give its path with --ort-script)",
// "<python> cannot import onnxruntime and numpy"); nullopt when it can. Starts the Python.
std::optional<std::string> ort_unavailable(const OnnxRuntime& ort);

struct OrtRun {
  bool available = false;
  std::string why;  // when not available: the script is missing, the Python is not found or lacks a package
  std::map<std::string, Tensor> outputs;  // by output name, plain float
  Latency latency;
  std::string version;  // onnxruntime.__version__
};
// Runs `model_path` under ONNX Runtime on `inputs` with `threads` intra-op threads: one
// untimed run, then `repeat` timed. The inputs and outputs pass through files in a
// temporary directory, removed before returning. Returns available = false with the reason
// when the script, the Python or onnxruntime is missing; throws ModelRunError when the
// script fails or its output cannot be read.
OrtRun run_onnxruntime(const OnnxRuntime& ort, const std::string& model_path, const std::map<std::string, Tensor>& inputs,
                       int threads, int repeat);

// One graph output against ONNX Runtime's.
struct OutputCheck {
  std::string name;
  std::vector<std::int64_t> shape;  // ours
  double max_abs = 0;               // the largest absolute difference (infinite for a NaN)
  double magnitude = 0;             // the largest |value| of ONNX Runtime's output
  double relative = 0;              // max_abs / magnitude
  bool ok = false;                  // relative <= tolerance
  std::string problem;              // why not ok: a missing output, another shape, the error above the tolerance
};
// `got` against `want` (null: ONNX Runtime has no output of that name).
OutputCheck compare_output(const std::string& name, const Tensor& got, const Tensor* want, double tolerance);
// Every graph output in the graph's order, compared with ONNX Runtime's; empty when
// ONNX Runtime did not run (`ort.available` false). `outputs` must hold every graph output.
std::vector<OutputCheck> compare_outputs(const model::Graph& graph, const std::map<std::string, Tensor>& outputs,
                                         const OrtRun& ort, double tolerance);

// The graph outputs that the .npz also holds as "output:NAME" (the zoo's files keep ONNX
// Runtime's outputs for their inputs), each compared with ours as compare_output does;
// empty when it holds none.
std::vector<OutputCheck> compare_npz_outputs(const model::Graph& graph, const std::map<std::string, Tensor>& outputs,
                                             const std::map<std::string, NpzArray>& arrays, double tolerance);

// ONNX Runtime's median latency over ours (0 when ours is 0).
double speedup(const Latency& ours, const Latency& onnxruntime);

// Where the last run's time went: the steps' total, the task steps' share, the steps
// slowest first.
struct StepProfile {
  double total_s = 0, task_s = 0;
  std::vector<Runner::StepTime> slowest;
  // The steps' time by kind (a task's op, a portable step's operator), largest first.
  struct Kind {
    std::string kind;
    bool task = false;
    int steps = 0;
    double seconds = 0;
  };
  std::vector<Kind> by_kind;
};
StepProfile step_profile(const Runner& runner);

// "AMD EPYC (2 cores)": this machine's CPU model (from /proc/cpuinfo; "unknown CPU") and
// hardware threads, the latency figures' context.
std::string machine_description();

}  // namespace kestrel::deploy
