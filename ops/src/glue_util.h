// Helpers shared by the glue ops (pool2d, softmax, layernorm, elementwise): a workload
// checked against the op's parameter specs, the workload with its optional parameters
// filled in (for the kernels' #defines), and the target's vector width.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kestrel/ops/op.h"
#include "kestrel/ops/target_traits.h"
#include "knob_util.h"

namespace kestrel::embedded {
// The glue ops' kernel sources, embedded at build time (ops/CMakeLists.txt).
std::string_view pool2d_c();
std::string_view pool2d_ref_c();
std::string_view softmax_c();
std::string_view softmax_ref_c();
std::string_view layernorm_c();
std::string_view layernorm_ref_c();
std::string_view elementwise_c();
std::string_view elementwise_ref_c();
std::string_view softmax_cu();
std::string_view softmax_cl();
std::string_view layernorm_cu();
std::string_view layernorm_cl();
std::string_view elementwise_cu();
std::string_view elementwise_cl();
std::string_view pool2d_cu();
std::string_view pool2d_cl();
}  // namespace kestrel::embedded

namespace kestrel::ops::detail {

// Throws OpError when a required parameter is missing, a value is outside its range or a
// name is not a parameter. Optional parameters may be absent.
inline void validate_specs(std::string_view op, const std::vector<ParamSpec>& specs, const Params& p) {
  std::string names;
  for (const auto& spec : specs) names += (names.empty() ? "" : ",") + spec.name;
  for (const auto& spec : specs) {
    auto it = p.find(spec.name);
    if (it == p.end()) {
      if (spec.optional) continue;
      throw OpError(std::string(op) + ": missing parameter " + spec.name + " (" + spec.help + ")");
    }
    if (it->second < spec.min || it->second > spec.max) {
      throw OpError(std::string(op) + ": parameter " + spec.name + "=" + std::to_string(it->second) + " is outside " +
                    std::to_string(spec.min) + ".." + std::to_string(spec.max));
    }
  }
  for (const auto& entry : p) {
    bool known = std::any_of(specs.begin(), specs.end(), [&](const ParamSpec& s) { return s.name == entry.first; });
    if (!known) throw OpError(std::string(op) + ": unknown parameter " + entry.first + " (parameters: " + names + ")");
  }
}

// Throws OpError when a tensor has more elements than the kernels' 32-bit-safe limit.
inline void check_tensor_sizes(std::string_view op, const std::vector<TensorSpec>& tensors) {
  for (const auto& tensor : tensors) {
    if (tensor.elements() > (std::int64_t{1} << 31)) {
      throw OpError(std::string(op) + ": tensor " + tensor.name + " has " + std::to_string(tensor.elements()) +
                    " elements, more than the 2^31 supported");
    }
  }
}

// The workload with every parameter present: optional ones left out take their fallback.
inline Params with_fallbacks(const std::vector<ParamSpec>& specs, const Params& p) {
  Params out = p;
  for (const auto& spec : specs) out.emplace(spec.name, spec.fallback);
  return out;
}

// The target's vector width among the domain {1, 4, 8, 16}: the largest at most its
// register's floats.
inline std::int64_t native_vec(const std::vector<std::int64_t>& domain, const TargetTraits& traits) {
  return largest_at_most(domain, traits.vector_floats);
}

// The #defines of a layernorm workload for its CPU and GPU kernels: every parameter
// (optional ones at their fallback) and LAYERNORM_EPSILON, 10^-eps as a float literal.
inline void add_layernorm_defines(std::vector<Define>& defines, const std::vector<ParamSpec>& specs,
                                  const Params& p) {
  Params all = with_fallbacks(specs, p);
  add_defines(defines, "LAYERNORM_", all);
  defines.push_back({"LAYERNORM_EPSILON", "1e-" + std::to_string(all.at("eps")) + "f"});
}

}  // namespace kestrel::ops::detail
