// --buckets and --shape for models with symbolic dimensions.
#include "kestrel/model/buckets.h"

#include <algorithm>
#include <charconv>

#include "kestrel/model/graph.h"
#include "kestrel/model/tasks.h"

namespace kestrel::model {
namespace {

std::vector<std::string> split(const std::string& text, char sep) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (true) {
    std::size_t end = text.find(sep, start);
    out.push_back(text.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return out;
}

std::int64_t size_of(const std::string& text, const std::string& symbol) {
  std::int64_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || value < 1 || value > (1 << 24)) {
    throw ModelError("size '" + text + "' of " + symbol + " is not a positive integer");
  }
  return value;
}

std::string list(const std::vector<std::string>& symbols) {
  std::string out;
  for (const auto& s : symbols) out += (out.empty() ? "" : ", ") + s;
  return out.empty() ? "none" : out;
}

// "seq=8,32" or "8,32" -> (symbol, sizes).
std::map<std::string, std::vector<std::int64_t>> parse_lists(const std::vector<std::string>& symbols,
                                                             const std::string& text, char list_sep) {
  std::map<std::string, std::vector<std::int64_t>> out;
  if (text.empty()) return out;
  if (symbols.empty()) {
    throw ModelError("the model has no symbolic dimension: sizes '" + text + "' have nothing to bind");
  }
  for (const auto& item : split(text, list_sep)) {
    std::size_t eq = item.find('=');
    std::string symbol, values;
    if (eq == std::string::npos) {
      if (symbols.size() != 1) {
        throw ModelError("'" + item + "' names no symbol; the model has several (" + list(symbols) +
                         "): write e.g. " + symbols.front() + "=8,32");
      }
      symbol = symbols.front();
      values = item;
    } else {
      symbol = item.substr(0, eq);
      values = item.substr(eq + 1);
    }
    if (std::find(symbols.begin(), symbols.end(), symbol) == symbols.end()) {
      throw ModelError("the model has no symbolic dimension '" + symbol + "' (it has: " + list(symbols) + ")");
    }
    if (out.count(symbol)) throw ModelError("sizes of " + symbol + " are given twice");
    for (const auto& v : split(values, ',')) out[symbol].push_back(size_of(v, symbol));
  }
  return out;
}

}  // namespace

std::vector<Binding> parse_buckets(const std::vector<std::string>& symbols, const std::string& text) {
  auto lists = parse_lists(symbols, text, ';');
  for (const auto& s : symbols) {
    if (!lists.count(s)) lists[s] = default_buckets();
    auto& sizes = lists[s];
    std::sort(sizes.begin(), sizes.end());
    sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  }
  std::vector<Binding> out{Binding{}};
  for (const auto& s : symbols) {
    std::vector<Binding> next;
    for (const auto& partial : out) {
      for (std::int64_t v : lists[s]) {
        Binding b = partial;
        b[s] = v;
        next.push_back(std::move(b));
      }
    }
    out = std::move(next);
  }
  return out;
}

Binding parse_binding(const std::vector<std::string>& symbols, const std::string& text) {
  auto lists = parse_lists(symbols, text, ';');
  Binding out;
  for (const auto& s : symbols) {
    auto it = lists.find(s);
    if (it == lists.end()) {
      throw ModelError("the model's dimension '" + s + "' is symbolic: give its size, e.g. --shape " + s + "=32");
    }
    if (it->second.size() != 1) throw ModelError("give one size of " + s + ", not a list");
    out[s] = it->second.front();
  }
  return out;
}

std::string to_string(const Binding& binding) {
  std::string out;
  for (const auto& [s, v] : binding) out += (out.empty() ? "" : ",") + s + "=" + std::to_string(v);
  return out;
}

}  // namespace kestrel::model
