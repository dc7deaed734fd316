// Weights kept in an external file beside the model (TensorProto.data_location EXTERNAL,
// as torch's dynamo exporter writes `<name>.onnx.data`), read into the tensors' raw_data.
// Private to the importer (ONNX types).
#pragma once

#include <onnx/onnx_pb.h>

#include <string>

namespace kestrel::model {

// Reads the data of every external tensor (initializers, Constant values, subgraphs
// included) of the model read from `path`, from the file its `location` names relative
// to the model's folder, at `offset` for `length` bytes (to the end of the file when no
// length is given). Throws ModelError for a location that is absolute or leaves the
// model's folder, a missing file, and a file too short for the tensor.
void load_external_data(onnx::ModelProto& proto, const std::string& path);

}  // namespace kestrel::model
