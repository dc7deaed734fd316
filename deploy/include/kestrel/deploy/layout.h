// Conversions between the ONNX layouts of a model's values and the layouts Kestrel's
// kernels take (tasks.h's ArgLayout): activations between plain NCHW and NCHWc, and
// initializers repacked once for a task argument. The blocked layouts are those of
// ops/conv2d/*_ref.c.
#pragma once

#include <cstdint>

#include "kestrel/deploy/tensor.h"
#include "kestrel/kernel/abi.h"
#include "kestrel/model/tasks.h"

namespace kestrel::deploy {

// A plain 4-D [N][C][H][W] float tensor as [N][ceil(C/B)][H][W][B], lanes past C zero.
// Throws ModelError when the tensor is not 4-D float. Split over the pool of `services`
// (one channel block per task) when given.
Tensor to_nchwc(const Tensor& plain, std::int64_t block, const kestrel_services* services = nullptr);
// Back to plain row-major (a copy when already plain).
Tensor to_plain(const Tensor& tensor, const kestrel_services* services = nullptr);

// An initializer in the layout a task argument takes, padded with zeros to `elements`
// (the op's tensor size):
//   plain          as stored
//   transposed     a 2-D [R][C] as [C][R]
//   conv_weight    [K][Cg][R][S] as [ceil(K/B)][ceil(Cg/B)][R][S][B(c)][B(k)]
//   dw_weight      [C][1][R][S] as [ceil(C/B)][R][S][B]
//   channel_vector a vector, zero-padded
//   winograd_weight [K][C][3][3] as [36][ceil(K/B)][ceil(C/B)][B(c)][B(k)]: the Winograd
//                  F(4x4, 3x3) transform G g G^T of each filter, computed in double
//   winograd2_weight the same for F(2x2, 3x3): [16][ceil(K/B)][ceil(C/B)][B(c)][B(k)]
//   gemm_panels    a 2-D [K][N] as gemm's panels=B: [ceil(N/B)][K][B], columns past N zero
//   gemm_panels_transposed  the same from [N][K]
//   nchwc          a 4-D tensor as to_nchwc()
// B is the layout's block: the NCHWc block, or the panel width of the gemm layouts.
// Throws ModelError naming the initializer when its rank or size does not fit.
AlignedFloats pack_initializer(const model::Initializer& init, model::ArgLayout layout, std::int64_t block, std::int64_t elements);

}  // namespace kestrel::deploy
