// Shared by the convolution ops (conv2d, conv2d_nchwc, depthwise_conv2d): the workload
// parameters (groups and the fused epilogue among them), their validation, the output
// size and the epilogue's tensors.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kestrel/ops/op.h"
#include "activation.h"
#include "knob_util.h"

namespace kestrel::ops::detail {

struct ConvShape {
  std::int64_t n, c, h, w, k, r, s, stride, pad, dilation, groups = 1;
  // Output rows and columns; 0 when the dilated filter exceeds the padded input.
  std::int64_t p() const { return out_size(h, r); }
  std::int64_t q() const { return out_size(w, s); }
  std::int64_t out_size(std::int64_t in, std::int64_t filter) const {
    std::int64_t span = in + 2 * pad - dilation * (filter - 1) - 1;
    return span < 0 ? 0 : span / stride + 1;
  }
  // Each output sums over the c/groups input channels of its group.
  double flops() const {
    return 2.0 * static_cast<double>(n) * static_cast<double>(k) * static_cast<double>(p()) *
           static_cast<double>(q()) * static_cast<double>(c / groups) * static_cast<double>(r) *
           static_cast<double>(s);
  }
};

inline ConvShape conv_shape(const Params& p) {
  return {p.at("N"),      p.at("C"),   p.at("H"),        p.at("W"),           p.at("K"), p.at("R"), p.at("S"),
          p.at("stride"), p.at("pad"), p.at("dilation"), param_or(p, "groups", 1)};
}

// The optional epilogue parameters of a convolution: out = act(acc + bias + residual).
inline std::vector<ParamSpec> conv_epilogue_params() {
  return {
      {"bias", "1 = add a bias per output channel (a tensor after the inputs)", 0, 1, 0, true},
      {"residual", "1 = add a tensor of the output's shape (ResNet's shortcut)", 0, 1, 0, true},
      activation_param("activation of the sum"),
  };
}

// Appends the epilogue's tensors the workload asks for: `bias` of shape `bias_shape`,
// then `residual` of the output's shape (the contract's order: inputs, bias, residual,
// output).
inline void add_conv_epilogue_tensors(std::vector<TensorSpec>& tensors, const Params& p,
                                      std::vector<std::int64_t> bias_shape, const std::vector<std::int64_t>& output) {
  if (param_or(p, "bias", 0) != 0) tensors.push_back({"bias", DType::f32, Role::input, std::move(bias_shape)});
  if (param_or(p, "residual", 0) != 0) tensors.push_back({"residual", DType::f32, Role::input, output});
}

// N, C, H, W, K, R, S, stride, pad, dilation (the positional order of a shape), then the
// optional groups.
inline std::vector<ParamSpec> conv_params() {
  return {
      {"N", "batch size", 1, 65536, 1},
      {"C", "input channels", 1, 65536, 0},
      {"H", "input height", 1, 65536, 0},
      {"W", "input width", 1, 65536, 0},
      {"K", "output channels", 1, 65536, 0},
      {"R", "filter height", 1, 1024, 0},
      {"S", "filter width", 1, 1024, 0},
      {"stride", "stride in both dimensions", 1, 64, 1},
      {"pad", "zero padding on each side in both dimensions", 0, 1024, 0},
      {"dilation", "filter dilation in both dimensions", 1, 64, 1},
      {"groups", "channel groups: each output channel sums over the C/groups input channels of its group "
                 "(ResNeXt)", 1, 65536, 1, true},
  };
}

// Throws OpError (messages prefixed with `op`) unless every required parameter of `specs`
// is present, every one given is in range, no other is given, groups (when given) divides
// C and K, and the output is not empty.
inline void validate_conv(std::string_view op, const std::vector<ParamSpec>& specs, const Params& p) {
  const std::string prefix = std::string(op) + ": ";
  for (const auto& spec : specs) {
    auto it = p.find(spec.name);
    if (it == p.end()) {
      if (spec.optional) continue;
      throw OpError(prefix + "missing parameter " + spec.name + " (" + spec.help + ")");
    }
    if (it->second < spec.min || it->second > spec.max) {
      throw OpError(prefix + "parameter " + spec.name + "=" + std::to_string(it->second) + " is outside " +
                    std::to_string(spec.min) + ".." + std::to_string(spec.max));
    }
  }
  for (const auto& entry : p) {
    bool known = std::any_of(specs.begin(), specs.end(), [&](const ParamSpec& s) { return s.name == entry.first; });
    if (!known) throw OpError(prefix + "unknown parameter " + entry.first);
  }
  if (auto g = p.find("groups"); g != p.end() && (p.at("C") % g->second != 0 || p.at("K") % g->second != 0)) {
    throw OpError(prefix + "groups=" + std::to_string(g->second) + " does not divide C=" + std::to_string(p.at("C")) +
                  " and K=" + std::to_string(p.at("K")));
  }
  ConvShape s = p.contains("K") ? conv_shape(p) : ConvShape{p.at("N"), p.at("C"), p.at("H"), p.at("W"), p.at("C"),
                                                             p.at("R"), p.at("S"), p.at("stride"), p.at("pad"),
                                                             p.at("dilation")};
  if (s.p() < 1 || s.q() < 1) {
    throw OpError(prefix + "empty output: the filter " + std::to_string(s.r) + "x" + std::to_string(s.s) +
                  " dilated by " + std::to_string(s.dilation) + " spans " +
                  std::to_string(s.dilation * (s.r - 1) + 1) + "x" + std::to_string(s.dilation * (s.s - 1) + 1) +
                  ", more than the padded input " + std::to_string(s.h + 2 * s.pad) + "x" +
                  std::to_string(s.w + 2 * s.pad) + " (P = (H + 2*pad - dilation*(R-1) - 1)/stride + 1 must be >= 1)");
  }
}

// The channel block of the NCHWc ops (the `block` parameter) and its check.
inline ParamSpec block_param() {
  return {"block", "channels per block and floats per vector: 16 for AVX-512, 8 for AVX2, 4 for NEON", 1, 64, 16};
}
inline void validate_block(std::string_view op, const Params& p) {
  const std::int64_t block = p.at("block");
  if (block != 4 && block != 8 && block != 16) {
    throw OpError(std::string(op) + ": parameter block=" + std::to_string(block) + " is not 4, 8 or 16");
  }
}

// Vector registers of a broadcast register tile on `target`: `columns` broadcast inputs
// (output columns, Winograd tiles) by `blocks` weight vectors of `block` floats holds
// columns*blocks accumulators, the blocks' weight vectors and one broadcast.
inline std::int64_t tile_registers(std::int64_t columns, std::int64_t blocks, std::int64_t block,
                                   const TargetTraits& target) {
  return (columns * blocks + blocks) * target.registers_per_vector(block) + 1;
}

// The registers such a tile may use: the target's, or the smallest tile's (one column, one
// block) when blocks are so much wider than the registers that even it spills: the layout
// costs that, not the configuration.
inline std::int64_t register_budget(std::int64_t block, const TargetTraits& target) {
  return std::max<std::int64_t>(target.vector_registers, tile_registers(1, 1, block, target));
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
