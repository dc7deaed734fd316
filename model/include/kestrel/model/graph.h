// A model as Kestrel sees it: an ONNX graph read with ONNX's own parser (libonnx, the
// protobuf schema) and its shapes inferred with ONNX's shape inference, turned into plain
// structs that the task extraction, the tuner and the runner read. The protobuf types
// never leave model/src.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace kestrel::model {

// A user error in a model or its use: a missing or corrupt file, an unsupported opset,
// an input without a shape, a symbolic dimension with no value. The message names the
// file and says what to do.
struct ModelError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// One dimension: a number, or a symbol (ONNX dim_param, "seq") whose value is bound
// later (a bucket size, the run's input). value < 0 when symbolic.
struct Dim {
  std::int64_t value = -1;
  std::string symbol;
  bool symbolic() const { return value < 0; }
  friend bool operator==(const Dim&, const Dim&) = default;
};
using Shape = std::vector<Dim>;
std::string to_string(const Shape& shape);  // "[1,3,224,224]", "[1,seq,768]"

enum class ElemType { f32, i64, i32, other };

struct ValueInfo {
  std::string name;
  ElemType type = ElemType::f32;
  std::optional<Shape> shape;  // none when shape inference could not tell
};

// A constant tensor (ONNX initializer or Constant node output). f32 data in `f32`,
// integer data (Reshape shapes, Gather indices) and booleans (as 0/1, type other) in `i64`;
// the other is empty (both, for types Kestrel does not read: fp16, int8, ...).
struct Initializer {
  std::string name;
  ElemType type = ElemType::f32;
  std::vector<std::int64_t> shape;
  std::vector<float> f32;
  std::vector<std::int64_t> i64;
};

// One attribute value; which member is set follows ONNX's attribute type.
struct Attribute {
  std::optional<std::int64_t> i;
  std::optional<float> f;
  std::optional<std::string> s;
  std::vector<std::int64_t> ints;
  std::vector<float> floats;
  std::optional<Initializer> t;  // a tensor attribute (Constant's value)
};

struct Node {
  std::string name;     // ONNX's node name, or "<op_type>_<index>" when it has none
  std::string op_type;  // "Conv", "MatMul", ...
  std::string domain;   // "" for the default ONNX domain
  std::vector<std::string> inputs;   // "" for an omitted optional input
  std::vector<std::string> outputs;
  std::map<std::string, Attribute> attributes;

  std::int64_t attr_int(const std::string& key, std::int64_t fallback) const;
  float attr_float(const std::string& key, float fallback) const;
  std::vector<std::int64_t> attr_ints(const std::string& key) const;  // empty when absent
};

// A model's graph in topological order, every value's type and (inferred) shape.
struct Graph {
  std::string path;          // where it was read from (for messages)
  std::int64_t opset = 0;    // of the default ONNX domain
  std::vector<ValueInfo> inputs;   // graph inputs that are not initializers
  std::vector<ValueInfo> outputs;
  std::vector<Node> nodes;         // topologically sorted
  std::map<std::string, Initializer> initializers;  // Constant nodes' outputs included
  std::map<std::string, ValueInfo> values;          // every value: inputs, outputs, intermediates

  const ValueInfo* value(const std::string& name) const;  // null when unknown
  const Initializer* initializer(const std::string& name) const;
  // The symbols of the inputs' symbolic dimensions, in order of first appearance.
  std::vector<std::string> symbols() const;
};

// The opsets the importer reads (of the default domain; 18 to 21 are rewritten into 17,
// the newest libonnx 1.12 knows). Models outside are refused by name ("opset 22 is not
// supported: Kestrel reads opsets 11 to 21").
inline constexpr std::int64_t kMinOpset = 11;
inline constexpr std::int64_t kMaxOpset = 21;

// A model file read once, kept so that shapes can be inferred again for bindings of its
// symbols. Thread-compatible.
class Model {
 public:
  // Reads and checks `path`. Throws ModelError: no such file, not an ONNX model (corrupt
  // or truncated protobuf), unsupported opset or IR version, a node in a domain other
  // than ONNX's, an input with no shape.
  static Model load(const std::string& path);
  ~Model();
  Model(Model&&) noexcept;
  Model& operator=(Model&&) noexcept;

  // The graph with its shapes inferred; symbolic dimensions of the inputs stay symbolic
  // (shape inference carries them where it can).
  const Graph& graph() const;
  // The graph with every symbol bound to a value and shapes inferred again, so every
  // value has a concrete shape. Throws ModelError for a symbol with no binding or one
  // the model does not have, and when a value's shape stays unknown.
  Graph bind(const std::map<std::string, std::int64_t>& symbols) const;

 private:
  struct Impl;
  explicit Model(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kestrel::model
