// Shared by the convolution ops (conv2d, conv2d_nchwc): the workload parameters, their
// validation and the output size.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kestrel/ops/op.h"

namespace kestrel::ops::detail {

struct ConvShape {
  std::int64_t n, c, h, w, k, r, s, stride, pad, dilation;
  // Output rows and columns; 0 when the dilated filter exceeds the padded input.
  std::int64_t p() const { return out_size(h, r); }
  std::int64_t q() const { return out_size(w, s); }
  std::int64_t out_size(std::int64_t in, std::int64_t filter) const {
    std::int64_t span = in + 2 * pad - dilation * (filter - 1) - 1;
    return span < 0 ? 0 : span / stride + 1;
  }
  double flops() const {
    return 2.0 * static_cast<double>(n) * static_cast<double>(k) * static_cast<double>(p()) *
           static_cast<double>(q()) * static_cast<double>(c) * static_cast<double>(r) * static_cast<double>(s);
  }
};

inline ConvShape conv_shape(const Params& p) {
  return {p.at("N"), p.at("C"), p.at("H"), p.at("W"), p.at("K"), p.at("R"), p.at("S"),
          p.at("stride"), p.at("pad"), p.at("dilation")};
}

// N, C, H, W, K, R, S, stride, pad, dilation (the positional order of a shape).
inline std::vector<ParamSpec> conv_params() {
  return {
      {"N", "batch size (default 1)", 1, 65536, 1},
      {"C", "input channels", 1, 65536, 0},
      {"H", "input height", 1, 65536, 0},
      {"W", "input width", 1, 65536, 0},
      {"K", "output channels", 1, 65536, 0},
      {"R", "filter height", 1, 1024, 0},
      {"S", "filter width", 1, 1024, 0},
      {"stride", "stride in both dimensions (default 1)", 1, 64, 1},
      {"pad", "zero padding on each side in both dimensions (default 0)", 0, 1024, 0},
      {"dilation", "filter dilation in both dimensions (default 1)", 1, 64, 1},
  };
}

// Throws OpError (messages prefixed with `op`) unless every parameter of `specs` is present
// and in range, no other is given, and the output is not empty.
inline void validate_conv(std::string_view op, const std::vector<ParamSpec>& specs, const Params& p) {
  const std::string prefix = std::string(op) + ": ";
  for (const auto& spec : specs) {
    auto it = p.find(spec.name);
    if (it == p.end()) throw OpError(prefix + "missing parameter " + spec.name + " (" + spec.help + ")");
    if (it->second < spec.min || it->second > spec.max) {
      throw OpError(prefix + "parameter " + spec.name + "=" + std::to_string(it->second) + " is outside " +
                    std::to_string(spec.min) + ".." + std::to_string(spec.max));
    }
  }
  for (const auto& entry : p) {
    bool known = std::any_of(specs.begin(), specs.end(), [&](const ParamSpec& s) { return s.name == entry.first; });
    if (!known) throw OpError(prefix + "unknown parameter " + entry.first);
  }
  ConvShape s = conv_shape(p);
  if (s.p() < 1 || s.q() < 1) {
    throw OpError(prefix + "empty output: the filter " + std::to_string(s.r) + "x" + std::to_string(s.s) +
                  " dilated by " + std::to_string(s.dilation) + " spans " +
                  std::to_string(s.dilation * (s.r - 1) + 1) + "x" + std::to_string(s.dilation * (s.s - 1) + 1) +
                  ", more than the padded input " + std::to_string(s.h + 2 * s.pad) + "x" +
                  std::to_string(s.w + 2 * s.pad) + " (P = (H + 2*pad - dilation*(R-1) - 1)/stride + 1 must be >= 1)");
  }
}

// Throws OpError when a tensor has more than 2^31 elements.
inline void check_tensor_sizes(std::string_view op, const std::vector<TensorSpec>& tensors) {
  for (const auto& tensor : tensors) {
    if (tensor.elements() > (std::int64_t{1} << 31)) {
      throw OpError(std::string(op) + ": tensor " + tensor.name + " has " + std::to_string(tensor.elements()) +
                    " elements, more than the 2^31 supported");
    }
  }
}

}  // namespace kestrel::ops::detail
