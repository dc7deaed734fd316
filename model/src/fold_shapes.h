// Constant folding of shape computations (Shape -> Gather -> Unsqueeze -> Concat ->
// Reshape, as exporters write them for dynamic axes) in a model whose inputs have concrete
// shapes: ONNX's shape inference does not follow them through initializers, so a Reshape
// fed by them would keep an unknown shape. Private to the importer (ONNX types).
#pragma once

#include <onnx/onnx_pb.h>

#include <functional>

namespace kestrel::model {

// Replaces every node of `proto` whose int64 result is computable from constants and
// known shapes (Shape, Gather, Unsqueeze, Squeeze, Concat, Slice, Cast, Identity,
// Add/Sub/Mul/Div of integers) with an initializer of that result, running `infer` (shape
// inference on `proto`) between rounds so that shapes downstream become known. Returns the
// number of nodes folded.
int fold_shape_computations(onnx::ModelProto& proto, const std::function<void(onnx::ModelProto&)>& infer);

}  // namespace kestrel::model
