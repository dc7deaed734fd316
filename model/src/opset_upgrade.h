// Reading newer ONNX files as written with Debian's libonnx 1.12 (IR 8, opsets up to 17),
// which runs the checker and shape inference: IR 9 and 10 files whose content IR 8 can
// express, and opset 18 to 21 graphs whose nodes are rewritten into their opset-17
// equivalents where the operator changed (Reduce* axes as an input, Split's num_outputs,
// Pad's axes, Gelu and Mish decomposed, ...). Operators with no such equivalent are
// refused by name. Private to the importer (ONNX types).
#pragma once

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <string>

#include "kestrel/model/graph.h"

namespace kestrel::model {

inline constexpr std::int64_t kNewestIrVersion = 10;  // read as written
inline constexpr std::int64_t kLibIrVersion = 8;      // what libonnx 1.12 checks
inline constexpr std::int64_t kNewestOpset = kMaxOpset;     // 18..21 rewritten to 17
inline constexpr std::int64_t kLibOpset = 17;

// Refuses the element types IR 9 and 10 added (float8, int4, uint4, and newer ones) on any
// tensor, value or Cast target of the graph and its subgraphs, naming the first one.
void check_element_types(const onnx::ModelProto& proto, const std::string& path);

// Rewrites every node of the default domain (subgraphs included) from `opset` (18 to 21)
// into opset 17 and sets the default domain's import to 17. Throws ModelError naming the
// node and operator for one with no opset-17 equivalent, or one whose rewrite needs a
// constant that is computed at run time.
void rewrite_to_opset17(onnx::ModelProto& proto, std::int64_t opset, const std::string& path);

}  // namespace kestrel::model
