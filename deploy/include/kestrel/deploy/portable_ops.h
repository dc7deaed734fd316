// Portable C++ implementations of the ONNX operators the model runner executes without a
// Kestrel kernel (plain row-major tensors, fp32 with float accumulation in double where
// it matters): Conv, Gemm, MatMul, Add/Sub/Mul/Div/Pow with numpy broadcasting, Relu,
// Clip, Erf, Sqrt, Sigmoid, Tanh, Softmax, LayerNormalization, MaxPool, AveragePool,
// GlobalAveragePool, Flatten, Reshape, Transpose, Concat, Gather, Unsqueeze, Squeeze,
// Shape, Slice, Cast, Identity, Dropout (inference: identity).
#pragma once

#include <string>
#include <vector>

#include "kestrel/deploy/tensor.h"
#include "kestrel/model/graph.h"

namespace kestrel::deploy {

// True when run_portable() implements `op_type` (default ONNX domain).
bool has_portable(const std::string& op_type);

// Runs `node` on its inputs (plain layout; null for an omitted optional input) and
// returns its outputs in order. Throws ModelError naming the node for an operator with no
// portable implementation, an attribute it does not support, or inputs of the wrong
// shape.
std::vector<Tensor> run_portable(const model::Node& node, const std::vector<const Tensor*>& inputs);

// The shape numpy broadcasting gives two shapes; throws ModelError when they do not
// broadcast.
std::vector<std::int64_t> broadcast_shape(const std::vector<std::int64_t>& a, const std::vector<std::int64_t>& b);

}  // namespace kestrel::deploy
