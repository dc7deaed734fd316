// Op registry, workload/config parsing and formatting.
#include "kestrel/ops/op.h"

#include <algorithm>
#include <charconv>
#include <sstream>

#include "kestrel/base/suggest.h"

namespace kestrel::ops {

std::string_view to_string(DType dtype) {
  switch (dtype) {
    case DType::f32: return "f32";
  }
  return "?";
}

std::string_view to_string(Backend backend) {
  switch (backend) {
    case Backend::cpu: return "cpu";
    case Backend::cuda: return "cuda";
    case Backend::opencl: return "opencl";
  }
  return "?";
}

std::size_t size_of(DType dtype) {
  switch (dtype) {
    case DType::f32: return 4;
  }
  return 0;
}

std::int64_t TensorSpec::elements() const {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

std::int64_t TensorSpec::bytes() const { return elements() * static_cast<std::int64_t>(size_of(dtype)); }

std::vector<std::pair<std::string, double>> Op::features(const Params& params, const Config& config) const {
  std::vector<std::pair<std::string, double>> out;
  // Every parameter, optional ones included at their fallback, so the names do not depend
  // on the workload.
  Params all = params;
  for (const auto& spec : this->params()) all.emplace(spec.name, spec.fallback);
  for (const auto& [name, value] : all) out.emplace_back("param." + name, static_cast<double>(value));
  for (const auto& [name, value] : config) out.emplace_back("knob." + name, static_cast<double>(value));
  return out;
}

void Registry::add(std::unique_ptr<Op> op) {
  for (const Op* other : variants(op->name())) {
    for (Backend mine : op->backends()) {
      for (Backend theirs : other->backends()) {
        if (mine == theirs) {
          throw OpError("op " + std::string(op->name()) + " already has a " + std::string(to_string(mine)) + " kernel");
        }
      }
    }
  }
  ops_.push_back(std::move(op));
}

const Op* Registry::find(std::string_view name) const {
  for (const auto& op : ops_) {
    if (op->name() == name) return op.get();
  }
  return nullptr;
}

const Op* Registry::find(std::string_view name, Backend backend) const {
  for (const Op* op : variants(name)) {
    for (Backend b : op->backends()) {
      if (b == backend) return op;
    }
  }
  return nullptr;
}

const Op& Registry::get(std::string_view name, Backend backend) const {
  const Op& primary = get(name);
  if (const Op* op = find(name, backend)) return *op;
  std::string have;
  for (const Op* op : variants(name)) {
    for (Backend b : op->backends()) have += (have.empty() ? "" : ", ") + std::string(to_string(b));
  }
  throw OpError(std::string(primary.name()) + " has no " + std::string(to_string(backend)) + " kernel (backends: " +
                have + ")");
}

std::vector<const Op*> Registry::variants(std::string_view name) const {
  std::vector<const Op*> out;
  for (const auto& op : ops_) {
    if (op->name() == name) out.push_back(op.get());
  }
  return out;
}

const Op& Registry::get(std::string_view name) const {
  if (const Op* op = find(name)) return *op;
  std::string known;
  std::vector<std::string> names;
  for (const Op* op : all()) {
    known += (known.empty() ? "" : ", ") + std::string(op->name());
    names.emplace_back(op->name());
  }
  std::string suggestion = nearest(name, names);
  if (!suggestion.empty()) {
    throw OpError("unknown op '" + std::string(name) + "' (did you mean '" + suggestion + "'? known: " + known + ")");
  }
  throw OpError("unknown op '" + std::string(name) + "' (known: " + known + ")");
}

std::vector<const Op*> Registry::all() const {
  std::vector<const Op*> out;
  for (const auto& op : ops_) {
    if (find(op->name()) == op.get()) out.push_back(op.get());
  }
  return out;
}

namespace {

std::vector<std::string> split(std::string_view text, char sep) {
  std::vector<std::string> parts;
  std::size_t start = 0;
  while (start <= text.size()) {
    auto end = text.find(sep, start);
    if (end == std::string_view::npos) end = text.size();
    parts.emplace_back(text.substr(start, end - start));
    start = end + 1;
  }
  return parts;
}

std::string trim(std::string s) {
  auto first = s.find_first_not_of(" \t");
  auto last = s.find_last_not_of(" \t");
  return first == std::string::npos ? std::string() : s.substr(first, last - first + 1);
}

std::int64_t parse_int(const std::string& text, const std::string& what) {
  std::int64_t value = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || ptr != text.data() + text.size() || text.empty()) {
    throw OpError(what + ": '" + text + "' is not an integer");
  }
  return value;
}

std::string param_names(const Op& op) {
  std::string names;
  for (const auto& p : op.params()) names += (names.empty() ? "" : ",") + p.name;
  return names;
}

}  // namespace

Params parse_params(const Op& op, std::string_view text) {
  auto specs = op.params();
  Params params;
  std::string trimmed = trim(std::string(text));
  if (!trimmed.empty() && trimmed.find('=') == std::string::npos) {
    // Positional form: "512x256x128" in the order of params(), optional parameters (an
    // epilogue, a transpose) only by name.
    auto parts = split(trimmed, 'x');
    std::size_t positional = 0;
    while (positional < specs.size() && !specs[positional].optional) ++positional;
    if (parts.size() > positional) {
      throw OpError("shape '" + trimmed + "' has " + std::to_string(parts.size()) + " values but " +
                    std::string(op.name()) + " takes at most " + std::to_string(positional) + " (" +
                    param_names(op) + ")");
    }
    for (std::size_t i = 0; i < parts.size(); ++i) {
      params[specs[i].name] = parse_int(trim(parts[i]), "shape value " + specs[i].name);
    }
  } else if (!trimmed.empty()) {
    for (const auto& item : split(trimmed, ',')) {
      auto eq = item.find('=');
      if (eq == std::string::npos) throw OpError("malformed shape item '" + item + "': expected NAME=VALUE");
      std::string name = trim(item.substr(0, eq));
      auto spec = std::find_if(specs.begin(), specs.end(), [&](const ParamSpec& p) { return p.name == name; });
      if (spec == specs.end()) {
        throw OpError("unknown parameter '" + name + "' for " + std::string(op.name()) + " (parameters: " +
                      param_names(op) + ")");
      }
      params[name] = parse_int(trim(item.substr(eq + 1)), "parameter " + name);
    }
  }
  for (const auto& spec : specs) {
    auto it = params.find(spec.name);
    if (it == params.end()) {
      if (spec.fallback < spec.min) {
        throw OpError("missing parameter " + spec.name + " for " + std::string(op.name()) + " (" + spec.help +
                      "; parameters: " + param_names(op) + ")");
      }
      if (!spec.optional) params[spec.name] = spec.fallback;
    } else if (spec.optional && it->second == spec.fallback) {
      continue;  // left out by normalize_params
    } else if (it->second < spec.min || it->second > spec.max) {
      throw OpError("parameter " + spec.name + "=" + std::to_string(it->second) + " is outside " +
                    std::to_string(spec.min) + ".." + std::to_string(spec.max));
    }
  }
  params = normalize_params(op, std::move(params));
  op.validate(params);
  return params;
}

Params normalize_params(const Op& op, Params params) {
  for (const auto& spec : op.params()) {
    auto it = params.find(spec.name);
    if (spec.optional && it != params.end() && it->second == spec.fallback) params.erase(it);
  }
  return params;
}

Config parse_config(const Op& op, const Params& params, std::string_view text, const TargetTraits& target) {
  Config config = op.default_config(params, target);
  auto knobs = op.knobs(params);
  std::string trimmed = trim(std::string(text));
  if (trimmed.empty()) return config;
  for (const auto& item : split(trimmed, ',')) {
    auto eq = item.find('=');
    if (eq == std::string::npos) throw OpError("malformed config item '" + item + "': expected KNOB=VALUE");
    std::string name = trim(item.substr(0, eq));
    auto knob = std::find_if(knobs.begin(), knobs.end(), [&](const Knob& k) { return k.name == name; });
    if (knob == knobs.end()) {
      std::string names;
      for (const auto& k : knobs) names += (names.empty() ? "" : ",") + k.name;
      throw OpError("unknown knob '" + name + "' for " + std::string(op.name()) + " (knobs: " + names + ")");
    }
    std::int64_t value = parse_int(trim(item.substr(eq + 1)), "knob " + name);
    if (std::find(knob->values.begin(), knob->values.end(), value) == knob->values.end()) {
      std::string domain;
      for (auto v : knob->values) domain += (domain.empty() ? "" : ",") + std::to_string(v);
      throw OpError("knob " + name + "=" + std::to_string(value) + " is not in its domain {" + domain + "}");
    }
    config[name] = value;
  }
  return config;
}

namespace {
std::string format_map(const std::map<std::string, std::int64_t>& values) {
  std::string out;
  for (const auto& [k, v] : values) out += (out.empty() ? "" : ",") + k + "=" + std::to_string(v);
  return out;
}
}  // namespace

std::string format_params(const Params& params) { return format_map(params); }
std::string format_config(const Config& config) { return format_map(config); }

std::map<std::string, std::int64_t> parse_pairs(std::string_view text) {
  std::map<std::string, std::int64_t> out;
  std::string trimmed = trim(std::string(text));
  if (trimmed.empty()) return out;
  for (const auto& item : split(trimmed, ',')) {
    auto eq = item.find('=');
    if (eq == std::string::npos) throw OpError("malformed item '" + item + "' in '" + trimmed + "': expected NAME=VALUE");
    std::string name = trim(item.substr(0, eq));
    if (name.empty()) throw OpError("malformed item '" + item + "' in '" + trimmed + "': empty name");
    std::int64_t value = parse_int(trim(item.substr(eq + 1)), name);
    if (!out.emplace(name, value).second) throw OpError("'" + name + "' given twice in '" + trimmed + "'");
  }
  return out;
}

}  // namespace kestrel::ops
