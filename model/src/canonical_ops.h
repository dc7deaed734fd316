// Operators written in another form than the one Kestrel plans, rewritten into it when
// the two are the same computation: torch's dynamo exporter writes global average
// pooling (adaptive_avg_pool2d(x, 1), squeeze-excite) as ReduceMean over the spatial
// axes with keepdims, the legacy exporter as GlobalAveragePool; both write the tanh GELU as
// eight elementwise nodes. Pure graph rewriting (no
// ONNX types), after shape inference.
#pragma once

#include "kestrel/model/graph.h"

namespace kestrel::model {

// ReduceMean / ReduceMax with keepdims=1 over exactly axes 2 and 3 of a 4-D f32 input
// become GlobalAveragePool / GlobalMaxPool (same output [N,C,1,1]). Returns the number of
// nodes rewritten.
int canonicalize_ops(Graph& graph);

// torch's tanh GELU (GPT-2's gelu_new, nn.GELU(approximate="tanh")), exported as the eight
// nodes of 0.5*x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3))), becomes one ONNX Gelu
// node with approximate="tanh" (opset 20's): one pass over x instead of eight. Every
// constant must match (to 1e-4 relative) and every intermediate value have no reader
// outside the pattern. Returns the number of patterns rewritten.
int fuse_tanh_gelu(Graph& graph);

// An activation applied to a Reshape's (Flatten's, Squeeze's, Unsqueeze's) output is
// applied before it instead: GPT-2's Conv1D writes MatMul/Gemm -> Reshape -> Gelu, and a
// kernel can fuse the activation into its epilogue only when it reads the kernel's own
// output. Elementwise functions commute with a change of shape, so the values are the same.
// Only where the reshaped value has no other reader and the reshape's input has no other
// reader either (else nothing would fuse). Returns the number of activations moved.
int hoist_activations_over_reshapes(Graph& graph);

}  // namespace kestrel::model
