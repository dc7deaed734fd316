// Helpers shared by the built-in ops: knob domains sized to the workload, config lookup
// and domain checks, and the #define list of a kernel source.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kestrel/ops/op.h"

namespace kestrel::embedded {
// Kernel sources embedded at build time (cmake/KestrelEmbed.cmake).
std::string_view gemm_c();
std::string_view gemm_ref_c();
// ops/glue/ref_math.h: the double exp, erf and tanh that references prepend.
std::string_view ref_math_h();
std::string_view conv2d_c();
std::string_view conv2d_ref_c();
std::string_view conv2d_nchwc_c();
std::string_view conv2d_nchwc_ref_c();
std::string_view conv2d_winograd_c();
std::string_view conv2d_winograd_ref_c();
std::string_view depthwise_conv2d_c();
std::string_view depthwise_conv2d_ref_c();
std::string_view layout_nchwc_c();
std::string_view layout_nchwc_ref_c();
std::string_view gemm_cu();
std::string_view gemm_cl();
std::string_view conv2d_cu();
std::string_view conv2d_cl();
std::string_view batch_matmul_c();
std::string_view batch_matmul_ref_c();
std::string_view batch_matmul_cu();
std::string_view batch_matmul_cl();
}  // namespace kestrel::embedded

namespace kestrel::ops::detail {

// The value of an optional workload parameter (absent when at its fallback).
inline std::int64_t param_or(const Params& params, const std::string& name, std::int64_t fallback) {
  auto it = params.find(name);
  return it == params.end() ? fallback : it->second;
}

// The target source() checks configurations against: the largest register file, so that
// only the rules that hold on every target are enforced there. The target's own limits
// were checked before (Op::check with its traits), and kernels refuse at compile time
// what does not fit the registers they are compiled for.
inline const TargetTraits& any_target() {
  static const TargetTraits widest = TargetTraits::of(Isa::avx512);
  return widest;
}

// The tile sizes of `base` (ascending) that are not absurdly larger than a dimension of
// `dim`: at most twice the dimension, but always at least the smallest one.
inline std::vector<std::int64_t> tiles_for(const std::vector<std::int64_t>& base, std::int64_t dim) {
  std::vector<std::int64_t> out;
  for (auto v : base) {
    if (out.empty() || v <= 2 * dim) out.push_back(v);
  }
  return out;
}

// The largest value of `domain` that is <= target, or the smallest value.
inline std::int64_t largest_at_most(const std::vector<std::int64_t>& domain, std::int64_t target) {
  std::int64_t best = domain.front();
  for (auto v : domain) {
    if (v <= target) best = std::max(best, v);
  }
  return best;
}

inline std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

// Empty when every knob of `knobs` is set in `config` to a value of its domain and
// `config` names no other knob; otherwise the first problem.
inline std::string check_domains(const std::vector<Knob>& knobs, const Config& config) {
  for (const auto& knob : knobs) {
    auto it = config.find(knob.name);
    if (it == config.end()) return "knob " + knob.name + " is missing";
    if (std::find(knob.values.begin(), knob.values.end(), it->second) == knob.values.end()) {
      std::string domain;
      for (auto v : knob.values) domain += (domain.empty() ? "" : ",") + std::to_string(v);
      return "knob " + knob.name + "=" + std::to_string(it->second) + " is not in its domain {" + domain +
             "} for this workload";
    }
  }
  for (const auto& [name, value] : config) {
    bool known = std::any_of(knobs.begin(), knobs.end(), [&](const Knob& k) { return k.name == name; });
    if (!known) return "unknown knob '" + name + "'";
  }
  return {};
}

// Appends PREFIX_NAME=value for every entry, names upper-cased.
inline void add_defines(std::vector<Define>& defines, std::string_view prefix,
                        const std::map<std::string, std::int64_t>& values) {
  for (const auto& [name, value] : values) {
    std::string upper(name);
    std::transform(upper.begin(), upper.end(), upper.begin(), [](unsigned char ch) {
      return static_cast<char>(ch >= 'a' && ch <= 'z' ? ch - 'a' + 'A' : ch);
    });
    defines.push_back({std::string(prefix) + upper, std::to_string(value)});
  }
}

// The tolerance of an fp32 dot product of `length` terms with inputs in [-1, 1], against
// a double reference, for the check |out - ref| <= tol * (1 + |ref|). Rounding errors of
// a sequential fp32 sum grow like u*length/4 (u = 6e-8) in the worst place (ref near 0)
// and like u*sqrt(length) relative to |ref| ~ sqrt(length)/3 elsewhere; the terms below
// give >10 standard deviations of margin for a kernel that sums in any blocked order.
// A single wrong or missing product (~0.1-0.3) still fails up to lengths of a few
// thousand; a wrong block or element fails at any length.
inline double dot_tolerance(double length) { return 1e-5 * std::sqrt(length) + 2e-7 * length; }

}  // namespace kestrel::ops::detail
