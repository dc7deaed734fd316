// Task extraction: which operator instances of a model Kestrel tunes (as which op and
// workload, with which epilogue fused), which it runs with a portable implementation,
// and in what order a runner executes them. Pure: no compiler, no device.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "kestrel/model/graph.h"
#include "kestrel/ops/op.h"
#include "kestrel/ops/target_traits.h"
#include "kestrel/ops/workload_sets.h"

namespace kestrel::model {

// The smallest output (P*Q pixels) a convolution runs as conv2d_winograd at (PlanOptions::
// winograd), and the smallest it runs F(4x4, 3x3) at (F(2x2, 3x3) between the two): the
// transformed weights are 1.8x (F(2x2)) and 4x (F(4x4)) the filter's size, and a deep
// layer with a small output reads them once per run for few outputs.
inline constexpr std::int64_t kWinogradMinPixels = 14 * 14;
inline constexpr std::int64_t kWinograd4MinPixels = 28 * 28;

struct PlanOptions {
  // The ops a plan's tasks point to (their CPU variants); it must outlive the plan. Null:
  // ops::builtin_registry(), which lives as long as the process.
  const ops::Registry* registry = nullptr;
  // Channels per block of the NCHWc layout the convolutions and pools use; 0: from the
  // traits (their fp32 lanes per vector, at least 4: 16 on AVX-512, 8 on AVX2, 4 on NEON).
  std::int64_t block = 0;
  ops::TargetTraits traits;
  // 3x3 convolutions with stride 1, no dilation and no groups whose output has at least
  // kWinogradMinPixels pixels run as conv2d_winograd (Winograd's F(4x4, 3x3) from
  // kWinograd4MinPixels, F(2x2, 3x3) below) when the registry has it; the others as
  // conv2d_nchwc.
  bool winograd = true;
  // Products by a constant 2-D B (MatMul, Gemm) take B packed once, when the model is
  // loaded, in the column panels the gemm micro-kernel reads (gemm's `panels` parameter,
  // layouts gemm_panels and gemm_panels_transposed), as wide as the micro-tile the traits
  // give (gemm_panel_width); false: B as the model holds it, packed by the kernel on
  // every call.
  bool gemm_panels = true;
  // Values of the model's symbolic dimensions for this plan (a bucket). Every symbol of
  // the model needs one (ModelError otherwise).
  std::map<std::string, std::int64_t> symbols;
};

// A workload parameter that scales with a symbolic dimension: value = multiplier * symbol.
// The exported kernel takes it as a run-time argument.
struct DynamicParam {
  std::string param;   // "M", "rows", "cols", "batch", "n", ...
  std::string symbol;  // "seq"
  std::int64_t multiplier = 1;
  friend bool operator==(const DynamicParam&, const DynamicParam&) = default;
};

// "M=seq,rows=12*seq"; empty when there are none.
std::string to_string(const std::vector<DynamicParam>& dynamic);

// One distinct Kestrel task of the model (at this plan's symbol values): an op's
// workload, the op being the CPU variant from PlanOptions::registry, labelled
// "<pattern> <params>" ("Conv+Add+Relu C=64,H=56,...").
struct ModelTask : ops::Workload {
  std::vector<DynamicParam> dynamic;    // params that follow a symbol; empty: static
  std::string pattern;                  // the ONNX operators it covers: "Conv+Add+Relu"
  int occurrences = 0;                  // instances in the model
  double flops = 0;                     // per instance (the op's count)
  std::string op_name() const;          // op->name(): "conv2d_nchwc"
  std::string key() const;              // "<op>/<format_params(params)>"
  // key() plus the run-time parameters ("/M=1seq/N=1seq"): what makes two tasks distinct
  // in a plan and two kernels distinct in an export.
  std::string identity() const;
};

// How an argument of a task step is stored for the op, from the ONNX value it comes from.
enum class ArgLayout {
  plain,          // as in ONNX, row-major (activations of gemm, softmax, ...)
  nchwc,          // activation [N][C/B][H][W][B] (lanes past C zero)
  conv_weight,    // ONNX [K][C/groups][R][S] -> conv2d_nchwc's [K/B][C/groups/B][R][S][B][B]
  dw_weight,      // ONNX [C][1][R][S] -> depthwise_conv2d's [C/B][R][S][B]
  transposed,     // a 2-D initializer transposed ([N][K] of Gemm transB=1 -> [K][N])
  channel_vector, // bias/scale per channel, zero-padded to the op's tensor size
  winograd_weight,// ONNX [K][C][3][3] -> conv2d_winograd's [36][K/B][C/B][B][B]: F(4x4)'s G g G^T per (k, c)
  winograd2_weight,// the same for F(2x2, 3x3) (conv2d_winograd m=2): [16][K/B][C/B][B][B]
  gemm_panels,    // a 2-D initializer [K][N] -> gemm's panels=P layout [ceil(N/P)][K][P] (columns past N zero)
  gemm_panels_transposed,  // the same from [N][K] (Gemm transB=1)
};

struct StepArg {
  std::string value;                  // the ONNX value (initializer or activation)
  ArgLayout layout = ArgLayout::plain;
};

// One step of execution: a task instance (covering one or more fused ONNX nodes) or one
// ONNX node run by a portable implementation.
struct Step {
  enum class Kind { task, portable };
  Kind kind = Kind::portable;
  std::size_t task = 0;             // index into Plan::tasks (Kind::task)
  std::vector<std::size_t> nodes;   // indices into Graph::nodes, in order
  std::vector<StepArg> args;        // Kind::task: the op's tensors in its order, output last
};

// Operators Kestrel does not tune, grouped by type and reason (never silently dropped).
struct Untuned {
  std::string op_type;
  std::string reason;     // "layout operator", "no Kestrel op", "asymmetric padding", ...
  int occurrences = 0;
  double flops = 0;       // estimated, all instances (0 for pure data movement)
};

struct Plan {
  std::int64_t block = 0;
  std::map<std::string, std::int64_t> symbols;
  std::vector<ModelTask> tasks;       // distinct, in order of first appearance
  std::vector<Step> steps;            // every node covered exactly once, topological
  std::vector<Untuned> untuned;
  double total_flops = 0;             // tuned tasks (x occurrences) + untuned estimates
};

// Plans `model` at `options.symbols`. Throws ModelError for a missing symbol value and
// ops::OpError never (a workload the op refuses makes the node untuned, with the reason).
Plan plan_model(const Model& model, const PlanOptions& options);

// The block a target's convolutions use when PlanOptions::block is 0.
std::int64_t default_block(const ops::TargetTraits& traits);

// Default bucket sizes for a symbolic dimension when the user gives none.
std::vector<std::int64_t> default_buckets();

}  // namespace kestrel::model
