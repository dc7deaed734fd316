// Constant folding of shape computations (Shape -> Gather -> Unsqueeze -> Concat ->
// Reshape, as exporters write them for dynamic axes, and the legacy torch exporter's
// `expand(1, -1, -1)` chains: ConstantOfShape -> Mul -> Equal -> Where -> Expand) in a model
// whose inputs have concrete shapes: ONNX's shape inference does not follow them through
// initializers, so a Reshape or Expand fed by them would keep an unknown shape. Private to
// the importer (ONNX types).
#pragma once

#include <onnx/onnx_pb.h>

#include <functional>

namespace kestrel::model {

// Replaces every node of `proto` whose int64/int32 result is computable from constants and
// known shapes with an initializer of that result, running `infer` (shape inference on
// `proto`) between rounds so that shapes downstream become known. Folded, with ONNX's
// semantics (numpy broadcasting for the element-wise ones): Constant, Shape, Identity,
// Cast (to int64, int32, bool), Reshape, Gather, Unsqueeze, Squeeze, Concat, Slice,
// ConstantOfShape (an integer or bool value), Range, Expand, Where, Add/Sub/Mul/Div,
// Min/Max, Equal/Less/Greater/LessOrEqual/GreaterOrEqual, Not/And/Or/Xor. A bool result
// feeds the fold but is never written as an initializer (the importer keeps bool
// constants without their values): its node stays while a node that is not folded reads
// it. No tensor of more than 4096 elements is read or made. Returns the number of nodes
// folded.
int fold_shape_computations(onnx::ModelProto& proto, const std::function<void(onnx::ModelProto&)>& infer);

}  // namespace kestrel::model
