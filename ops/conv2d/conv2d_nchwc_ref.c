/* conv2d_nchwc_ref.c: the reference for conv2d_nchwc.c. Direct convolution, fp32, in the
 * blocked-channel layout, with stride, zero padding and dilation; straightforward loops
 * accumulating in double, single-threaded, reading only lanes of real channels. Needs
 * CONV_{N,C,H,W,K,R,S,STRIDE,PAD,DILATION,BLOCK}. Same arguments as conv2d_nchwc.c:
 * input [N][C/B][H][W][B], weight [K/B][C/B][R][S][B(c)][B(k)] (inputs), output
 * [N][K/B][P][Q][B] (lanes past K written as 0). Returns 2 on bad arguments. */
#include "kestrel/kernel/abi.h"

#if !defined(CONV_N) || !defined(CONV_C) || !defined(CONV_H) || !defined(CONV_W) || !defined(CONV_K) ||  \
    !defined(CONV_R) || !defined(CONV_S) || !defined(CONV_STRIDE) || !defined(CONV_PAD) ||               \
    !defined(CONV_DILATION) || !defined(CONV_BLOCK)
#error "conv2d_nchwc_ref.c needs CONV_{N,C,H,W,K,R,S,STRIDE,PAD,DILATION,BLOCK}"
#endif

#define B CONV_BLOCK
#define P ((CONV_H + 2 * CONV_PAD - CONV_DILATION * (CONV_R - 1) - 1) / CONV_STRIDE + 1)
#define Q ((CONV_W + 2 * CONV_PAD - CONV_DILATION * (CONV_S - 1) - 1) / CONV_STRIDE + 1)
#define CB ((CONV_C + B - 1) / B)
#define KB ((CONV_K + B - 1) / B)

KESTREL_KERNEL(svc, args, num_args) {
  (void)svc;
  if (num_args != 3 || !args[0].data || !args[1].data || !args[2].data ||
      args[0].i64 != (int64_t)CONV_N * CB * CONV_H * CONV_W * B ||
      args[1].i64 != (int64_t)KB * CB * CONV_R * CONV_S * B * B || args[2].i64 != (int64_t)CONV_N * KB * P * Q * B) {
    return 2;
  }
  const float* in = (const float*)args[0].data;
  const float* w = (const float*)args[1].data;
  float* out = (float*)args[2].data;
  for (int64_t n = 0; n < CONV_N; ++n) {
    for (int64_t k = 0; k < KB * B; ++k) {
      for (int64_t p = 0; p < P; ++p) {
        for (int64_t q = 0; q < Q; ++q) {
          double sum = 0.0;
          for (int64_t c = 0; k < CONV_K && c < CONV_C; ++c) {
            for (int64_t r = 0; r < CONV_R; ++r) {
              int64_t h = p * CONV_STRIDE - CONV_PAD + r * CONV_DILATION;
              if (h < 0 || h >= CONV_H) continue;
              for (int64_t s = 0; s < CONV_S; ++s) {
                int64_t x = q * CONV_STRIDE - CONV_PAD + s * CONV_DILATION;
                if (x < 0 || x >= CONV_W) continue;
                sum += (double)in[(((n * CB + c / B) * CONV_H + h) * CONV_W + x) * B + c % B] *
                       (double)w[((((k / B * CB + c / B) * CONV_R + r) * CONV_S + s) * B + c % B) * B + k % B];
              }
            }
          }
          out[(((n * KB + k / B) * P + p) * Q + q) * B + k % B] = (float)sum;
        }
      }
    }
  }
  return 0;
}
