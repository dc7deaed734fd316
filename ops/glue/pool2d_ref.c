/* pool2d_ref.c: the reference for pool2d.c: each output lane of a real channel is the
 * maximum, or the mean in double, of the window's positions inside the image; lanes past C
 * are 0. Needs POOL_{N,C,H,W,R,S,STRIDE,PAD,KIND,GLOBAL,BLOCK}. Same arguments as
 * pool2d.c: in [N][C/B][H][W][B], out [N][C/B][P][Q][B]. Returns 2 on bad arguments. */
#include "kestrel/kernel/abi.h"

#if !defined(POOL_N) || !defined(POOL_C) || !defined(POOL_H) || !defined(POOL_W) || !defined(POOL_R) || \
    !defined(POOL_S) || !defined(POOL_STRIDE) || !defined(POOL_PAD) || !defined(POOL_KIND) ||             \
    !defined(POOL_GLOBAL) || !defined(POOL_BLOCK)
#error "pool2d_ref.c needs POOL_{N,C,H,W,R,S,STRIDE,PAD,KIND,GLOBAL,BLOCK}"
#endif

#define B POOL_BLOCK
#define CB ((POOL_C + B - 1) / B)
#define R (POOL_GLOBAL ? POOL_H : POOL_R)
#define S (POOL_GLOBAL ? POOL_W : POOL_S)
#define STRIDE (POOL_GLOBAL ? 1 : POOL_STRIDE)
#define PAD (POOL_GLOBAL ? 0 : POOL_PAD)
#define P ((POOL_H + 2 * PAD - R) / STRIDE + 1)
#define Q ((POOL_W + 2 * PAD - S) / STRIDE + 1)

KESTREL_KERNEL(svc, args, num_args) {
  (void)svc;
  if (num_args != 2 || !args[0].data || !args[1].data ||
      args[0].i64 != (int64_t)POOL_N * CB * POOL_H * POOL_W * B || args[1].i64 != (int64_t)POOL_N * CB * P * Q * B) {
    return 2;
  }
  const float* in = (const float*)args[0].data;
  float* out = (float*)args[1].data;
  for (int64_t n = 0; n < POOL_N; ++n) {
    for (int64_t c = 0; c < CB * B; ++c) {
      for (int64_t p = 0; p < P; ++p) {
        for (int64_t q = 0; q < Q; ++q) {
          double best = 0.0, sum = 0.0;
          int64_t count = 0;
          for (int64_t r = 0; c < POOL_C && r < R; ++r) {
            int64_t h = p * STRIDE - PAD + r;
            if (h < 0 || h >= POOL_H) continue;
            for (int64_t s = 0; s < S; ++s) {
              int64_t x = q * STRIDE - PAD + s;
              if (x < 0 || x >= POOL_W) continue;
              double v = (double)in[(((n * CB + c / B) * POOL_H + h) * POOL_W + x) * B + c % B];
              best = count == 0 || v > best ? v : best;
              sum += v;
              ++count;
            }
          }
          double value = count == 0 ? 0.0 : POOL_KIND == 0 ? best : sum / (double)count;
          out[(((n * CB + c / B) * P + p) * Q + q) * B + c % B] = (float)value;
        }
      }
    }
  }
  return 0;
}
