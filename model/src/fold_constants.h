// Constant folding of initializer-only layout subgraphs before planning: a node of the
// default domain whose inputs are all constants (initializers or Constant nodes' values)
// and whose op only moves or converts data (Identity, Cast, Reshape, Transpose, Unsqueeze,
// Squeeze, Flatten, Concat) becomes an initializer of its result. torch's legacy exporter
// merges identical initializers (zero conv biases) and feeds the copies through Identity;
// folded, they are constants again and the ops that need a constant bias get one. Pure
// graph rewriting (no ONNX types).
#pragma once

#include "kestrel/model/graph.h"

namespace kestrel::model {

// Folds every such node (in topological order, so chains fold whole) of f32 or integer
// (int64, int32) data, except one whose output is a graph output. The result is named
// after the node's output; the constants it read are removed when nothing else uses them.
// Returns the number of nodes folded.
int fold_constants(Graph& graph);

}  // namespace kestrel::model
