// Folding an inference-mode BatchNormalization into the Conv before it: the conv's weight
// and bias are scaled into new initializers, the BatchNormalization node disappears and
// the conv writes its output. Pure graph rewriting (no ONNX types).
#pragma once

#include "kestrel/model/graph.h"

namespace kestrel::model {

// The attribute that marks a Conv with a folded BatchNormalization (string value
// "BatchNormalization"), so that plans can name the pattern.
inline constexpr const char* kFoldedAttribute = "kestrel.folded";

// Folds every BatchNormalization (one output, inference mode) whose input is the only use
// of a Conv's output, when the conv's weight, its bias (if any) and the normalisation's
// scale, bias, mean and variance are f32 initializers. The new initializers are named
// "<batchnorm node>.folded_weight" / ".folded_bias"; the originals are removed when no
// other node uses them.
void fold_batchnorm(Graph& graph);

}  // namespace kestrel::model
