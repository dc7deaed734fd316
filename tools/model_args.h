// What the model commands (tasks, and tune/export/run with --model) share: the values of
// a model's symbolic dimensions they plan at, from --shape and --buckets.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "kestrel/model/graph.h"

namespace kestrel::tools {

using SymbolValues = std::map<std::string, std::int64_t>;

// One binding of every symbol of `graph` per bucket. `shape` ("seq=50" or
// "seq=50,batch=2") fixes symbols; `buckets` ("seq=8,32,128", or "8,32,128" when one
// symbol is left) gives one symbol's bucket sizes. A symbol with neither takes
// model::default_buckets() when it is the only one left. A model without symbols gives
// one empty binding. Throws UsageError naming the option (unknown symbol, malformed or
// non-positive value, a symbol given twice, several symbols without values).
std::vector<SymbolValues> model_bindings(const model::Graph& graph, const std::string& shape,
                                         const std::string& buckets);

// "seq=8" / "seq=8,batch=1" ("" for none).
std::string format_symbols(const SymbolValues& symbols);

}  // namespace kestrel::tools
