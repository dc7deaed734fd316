// The sizes a model's symbolic dimensions are tuned, exported and run at: the one parser
// of `--buckets` and `--shape` for every model command.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace kestrel::model {

using Binding = std::map<std::string, std::int64_t>;

// "seq=8,32,128;batch=1,4" (or "8,32,128" when the model has one symbol) -> one binding
// per combination, in order. Empty text: default_buckets() for every symbol. A model with
// no symbol gets one empty binding (and text must be empty). Throws ModelError for a
// symbol the model does not have, a missing one, or a size that is not a positive integer.
std::vector<Binding> parse_buckets(const std::vector<std::string>& symbols, const std::string& text);

// "seq=50" (or "50" with one symbol): one binding; every symbol needs a value.
Binding parse_binding(const std::vector<std::string>& symbols, const std::string& text);

// "seq=32" / "" for printing.
std::string to_string(const Binding& binding);

}  // namespace kestrel::model
