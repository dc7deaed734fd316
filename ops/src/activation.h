// The `act` parameter of the ops with a fused epilogue (gemm, conv2d_nchwc,
// depthwise_conv2d): its codes are KESTREL_ACT_* of kestrel/kernel/math.h, which the
// kernels pass to kestrel_activate; the range and help text are kept here once.
#pragma once

#include <cstdint>

#include "kestrel/ops/op.h"

namespace kestrel::ops::detail {

// KESTREL_ACT_MAX of kestrel/kernel/math.h.
inline constexpr std::int64_t kMaxActivation = 9;

// The optional `act` parameter, its help starting with `what`.
inline ParamSpec activation_param(const std::string& what) {
  return {"act",
          what + ": 0 none, 1 relu, 2 relu6, 3 gelu (erf form), 4 sigmoid, 5 silu (x * sigmoid(x)), 6 hardswish, "
                 "7 hardsigmoid (x / 6 + 1/2 clamped to [0, 1]), 8 tanh, 9 gelu (tanh form)",
          0,
          kMaxActivation,
          0,
          true};
}

}  // namespace kestrel::ops::detail
