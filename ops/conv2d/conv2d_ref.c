/* conv2d_ref.c: the reference for conv2d.c. Direct convolution, fp32 NCHW, with
 * stride, zero padding, dilation and groups; straightforward loops accumulating in double,
 * single-threaded. Needs CONV_{N,C,H,W,K,R,S,STRIDE,PAD,DILATION}, optional CONV_GROUPS.
 * Same arguments as conv2d.c: input [N][C][H][W], weight [K][C/GROUPS][R][S] (inputs),
 * output [N][K][P][Q]. Returns 2 on bad arguments. */
#include "kestrel/kernel/abi.h"

#if !defined(CONV_N) || !defined(CONV_C) || !defined(CONV_H) || !defined(CONV_W) || !defined(CONV_K) || \
    !defined(CONV_R) || !defined(CONV_S) || !defined(CONV_STRIDE) || !defined(CONV_PAD) || !defined(CONV_DILATION)
#error "conv2d_ref.c needs CONV_{N,C,H,W,K,R,S,STRIDE,PAD,DILATION}"
#endif
#ifndef CONV_GROUPS
#define CONV_GROUPS 1
#endif
#define CG (CONV_C / CONV_GROUPS) /* input channels of a group */
#define KG (CONV_K / CONV_GROUPS) /* output channels of a group */

#define P ((CONV_H + 2 * CONV_PAD - CONV_DILATION * (CONV_R - 1) - 1) / CONV_STRIDE + 1)
#define Q ((CONV_W + 2 * CONV_PAD - CONV_DILATION * (CONV_S - 1) - 1) / CONV_STRIDE + 1)

KESTREL_KERNEL(svc, args, num_args) {
  (void)svc;
  if (num_args != 3 || !args[0].data || !args[1].data || !args[2].data ||
      args[0].i64 != (int64_t)CONV_N * CONV_C * CONV_H * CONV_W ||
      args[1].i64 != (int64_t)CONV_K * CG * CONV_R * CONV_S || args[2].i64 != (int64_t)CONV_N * CONV_K * P * Q) {
    return 2;
  }
  const float* in = (const float*)args[0].data;
  const float* w = (const float*)args[1].data;
  float* out = (float*)args[2].data;
  for (int64_t n = 0; n < CONV_N; ++n) {
    for (int64_t k = 0; k < CONV_K; ++k) {
      for (int64_t p = 0; p < P; ++p) {
        for (int64_t q = 0; q < Q; ++q) {
          const int64_t c0 = k / KG * CG; /* the group's first input channel */
          double sum = 0.0;
          for (int64_t c = c0; c < c0 + CG; ++c) {
            for (int64_t r = 0; r < CONV_R; ++r) {
              int64_t h = p * CONV_STRIDE - CONV_PAD + r * CONV_DILATION;
              if (h < 0 || h >= CONV_H) continue;
              for (int64_t s = 0; s < CONV_S; ++s) {
                int64_t x = q * CONV_STRIDE - CONV_PAD + s * CONV_DILATION;
                if (x < 0 || x >= CONV_W) continue;
                sum += (double)in[((n * CONV_C + c) * CONV_H + h) * CONV_W + x] *
                       (double)w[((k * CG + c - c0) * CONV_R + r) * CONV_S + s];
              }
            }
          }
          out[((n * CONV_K + k) * P + p) * Q + q] = (float)sum;
        }
      }
    }
  }
  return 0;
}
