// --shape and --buckets of the model commands (see model_args.h).
#include "model_args.h"

#include <algorithm>

#include "kestrel/model/tasks.h"
#include "kestrel/ops/op.h"
#include "usage.h"

namespace kestrel::tools {

namespace {

std::string known_list(const std::vector<std::string>& symbols) {
  if (symbols.empty()) return "the model has no symbolic dimension";
  std::string out;
  for (const auto& s : symbols) out += (out.empty() ? "" : ", ") + s;
  return "the model's symbolic dimensions: " + out;
}

void check_known(const std::vector<std::string>& symbols, const std::string& name, const std::string& option) {
  if (std::find(symbols.begin(), symbols.end(), name) == symbols.end()) {
    throw UsageError("--" + option + " names '" + name + "', which is not a symbolic dimension of the model (" +
                     known_list(symbols) + ")");
  }
}

std::int64_t positive(const std::string& option, const std::string& text) {
  return parse_int_option(option, text, 1, std::int64_t{1} << 24);
}

}  // namespace

std::string format_symbols(const SymbolValues& symbols) {
  std::string out;
  for (const auto& [name, value] : symbols) out += (out.empty() ? "" : ",") + name + "=" + std::to_string(value);
  return out;
}

std::vector<SymbolValues> model_bindings(const model::Graph& graph, const std::string& shape,
                                         const std::string& buckets) {
  const std::vector<std::string> symbols = graph.symbols();
  SymbolValues fixed;
  if (!shape.empty()) {
    try {
      fixed = ops::parse_pairs(shape);
    } catch (const ops::OpError& e) {
      throw UsageError("--shape expects symbol=value pairs such as seq=50: " + std::string(e.what()));
    }
    for (const auto& [name, value] : fixed) {
      check_known(symbols, name, "shape");
      if (value < 1) throw UsageError("--shape " + name + "=" + std::to_string(value) + " must be at least 1");
    }
  }
  std::vector<std::string> open;
  for (const auto& s : symbols) {
    if (!fixed.contains(s)) open.push_back(s);
  }
  std::string bucket_symbol;
  std::vector<std::int64_t> sizes;
  if (!buckets.empty()) {
    std::string list = buckets;
    if (auto eq = buckets.find('='); eq != std::string::npos) {
      bucket_symbol = buckets.substr(0, eq);
      list = buckets.substr(eq + 1);
      check_known(symbols, bucket_symbol, "buckets");
      if (fixed.contains(bucket_symbol)) throw UsageError("'" + bucket_symbol + "' is given by both --shape and --buckets");
    } else if (open.size() == 1) {
      bucket_symbol = open.front();
    } else {
      if (symbols.empty()) throw UsageError("--buckets: the model has no symbolic dimension");
      if (open.empty()) throw UsageError("--buckets: every symbolic dimension already has a value from --shape");
      throw UsageError("--buckets must name its symbol (e.g. " + open.front() + "=8,32,128): " +
                       known_list(symbols));
    }
    std::size_t start = 0;
    while (start <= list.size()) {
      std::size_t comma = list.find(',', start);
      std::string item = list.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
      sizes.push_back(positive("buckets", item));
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
    std::sort(sizes.begin(), sizes.end());
    sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  } else if (open.size() == 1) {
    bucket_symbol = open.front();
    sizes = model::default_buckets();
  }
  for (const auto& s : open) {
    if (s != bucket_symbol) {
      throw UsageError("no value for the symbolic dimension '" + s + "': give it with --shape " + s +
                       "=N (or --buckets " + s + "=8,32,128); " + known_list(symbols));
    }
  }
  if (bucket_symbol.empty()) return {fixed};
  std::vector<SymbolValues> out;
  for (auto size : sizes) {
    SymbolValues binding = fixed;
    binding[bucket_symbol] = size;
    out.push_back(std::move(binding));
  }
  return out;
}

}  // namespace kestrel::tools
