// Graph helpers that need no ONNX types (the importer is onnx_import.cpp).
#include "kestrel/model/graph.h"

#include <set>

namespace kestrel::model {

std::string to_string(const Shape& shape) {
  std::string out = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i) out += ",";
    out += !shape[i].symbolic() ? std::to_string(shape[i].value) : shape[i].symbol.empty() ? "?" : shape[i].symbol;
  }
  return out + "]";
}

std::int64_t Node::attr_int(const std::string& key, std::int64_t fallback) const {
  auto it = attributes.find(key);
  return it != attributes.end() && it->second.i ? *it->second.i : fallback;
}

float Node::attr_float(const std::string& key, float fallback) const {
  auto it = attributes.find(key);
  return it != attributes.end() && it->second.f ? *it->second.f : fallback;
}

std::vector<std::int64_t> Node::attr_ints(const std::string& key) const {
  auto it = attributes.find(key);
  return it != attributes.end() ? it->second.ints : std::vector<std::int64_t>{};
}

const ValueInfo* Graph::value(const std::string& name) const {
  auto it = values.find(name);
  return it == values.end() ? nullptr : &it->second;
}

const Initializer* Graph::initializer(const std::string& name) const {
  auto it = initializers.find(name);
  return it == initializers.end() ? nullptr : &it->second;
}

std::vector<std::string> Graph::symbols() const {
  std::vector<std::string> out;
  std::set<std::string> seen;
  for (const auto& input : inputs) {
    if (!input.shape) continue;
    for (const auto& dim : *input.shape) {
      if (dim.symbolic() && seen.insert(dim.symbol).second) out.push_back(dim.symbol);
    }
  }
  return out;
}

}  // namespace kestrel::model
