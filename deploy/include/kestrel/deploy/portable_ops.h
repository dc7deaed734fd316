// Portable C++ implementations of the ONNX operators the model runner executes without a
// Kestrel kernel (plain row-major tensors, fp32 with float accumulation in double where
// it matters): Conv, Gemm, MatMul, Add/Sub/Mul/Div/Pow with numpy broadcasting, Relu,
// Clip, Erf, Gelu, Sqrt, Sigmoid, Tanh, Softmax, LayerNormalization, MaxPool, AveragePool,
// GlobalAveragePool, Flatten, Reshape, Transpose, Concat, Gather, Unsqueeze, Squeeze,
// Shape, Slice, Cast, Identity, Dropout (inference: identity), and what torch's exporters
// write around them: HardSigmoid, HardSwish, IsNaN, Where, Equal, Less(OrEqual),
// Greater(OrEqual), And, Or, Xor, Not, Expand, ConstantOfShape, GatherElements,
// GatherND, Range, Split, Max, Min, ReduceMean/Sum/Max/Min. Booleans are held as i64
// tensors of 0 and 1.
#pragma once

#include <string>
#include <vector>

#include "kestrel/deploy/tensor.h"
#include "kestrel/kernel/abi.h"
#include "kestrel/model/graph.h"
#include "kestrel/model/tasks.h"

namespace kestrel::deploy {

// True when run_portable() implements `op_type` (default ONNX domain).
bool has_portable(const std::string& op_type);

// An operator type among a plan's portable steps that has no portable implementation
// (a model with one cannot run): how many nodes, the first node's name.
struct MissingPortable {
  std::string op_type;  // "HardSwish", or "com.microsoft.Foo" for another domain
  int nodes = 0;
  std::string first_node;
};
// Every such operator of `plan`'s portable steps over `graph`, in order of first
// appearance; empty when the model can run.
std::vector<MissingPortable> missing_portable(const model::Graph& graph, const model::Plan& plan);
// The same over the nodes a program's portable steps run (program.h).
std::vector<MissingPortable> missing_portable(const std::vector<const model::Node*>& nodes);
// "no portable implementation of HardSwish (19 nodes, first /features/0/HardSwish),
// HardSigmoid (9 nodes, ...)"; "" for none.
std::string missing_portable_text(const std::vector<MissingPortable>& missing);

// Runs `node` on its inputs (plain layout; null for an omitted optional input) and
// returns its outputs in order; the heavy operators (elementwise, broadcasts, MatMul,
// Conv, pooling, normalisations, Softmax, Transpose) split their loops over the thread
// pool of `services` when given. Throws ModelError naming the node for an operator with
// no portable implementation, an attribute it does not support, or inputs of the wrong
// shape.
std::vector<Tensor> run_portable(const model::Node& node, const std::vector<const Tensor*>& inputs,
                                 const kestrel_services* services = nullptr);

// out = x op v for a tensor in the NCHWc layout, [n][blocks][hw][block], and one value per
// channel padded to whole blocks, v[blocks][block] (`vector_first`: v op x); op is "Add",
// "Sub", "Mul" or "Div"; block a multiple of 4. Split over the pool of `services` when
// given. The squeeze-excite scale on a blocked activation.
void blocked_channel_binary(const std::string& op, bool vector_first, const float* x, const float* v, float* out,
                            std::int64_t n, std::int64_t blocks, std::int64_t hw, std::int64_t block,
                            const kestrel_services* services = nullptr);

// The shape numpy broadcasting gives two shapes; throws ModelError when they do not
// broadcast.
std::vector<std::int64_t> broadcast_shape(const std::vector<std::int64_t>& a, const std::vector<std::int64_t>& b);

}  // namespace kestrel::deploy
