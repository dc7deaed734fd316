// Operators written in another form than the one Kestrel plans, rewritten into it when
// the two are the same computation: torch's dynamo exporter writes global average
// pooling (adaptive_avg_pool2d(x, 1), squeeze-excite) as ReduceMean over the spatial
// axes with keepdims, the legacy exporter as GlobalAveragePool. Pure graph rewriting (no
// ONNX types), after shape inference.
#pragma once

#include "kestrel/model/graph.h"

namespace kestrel::model {

// ReduceMean / ReduceMax with keepdims=1 over exactly axes 2 and 3 of a 4-D f32 input
// become GlobalAveragePool / GlobalMaxPool (same output [N,C,1,1]). Returns the number of
// nodes rewritten.
int canonicalize_ops(Graph& graph);

}  // namespace kestrel::model
