/* layout_nchwc_ref.c: the reference for layout_nchwc.c: out[n][c/B][h][x][c%B] =
 * in[n][c][h][x], lanes past C written as 0; straightforward loops. Needs
 * LAYOUT_{N,C,H,W,BLOCK}. Returns 2 on bad arguments. */
#include "kestrel/kernel/abi.h"

#if !defined(LAYOUT_N) || !defined(LAYOUT_C) || !defined(LAYOUT_H) || !defined(LAYOUT_W) || !defined(LAYOUT_BLOCK)
#error "layout_nchwc_ref.c needs LAYOUT_{N,C,H,W,BLOCK}"
#endif

#define B LAYOUT_BLOCK
#define CB ((LAYOUT_C + B - 1) / B)

KESTREL_KERNEL(svc, args, num_args) {
  (void)svc;
  if (num_args != 2 || !args[0].data || !args[1].data ||
      args[0].i64 != (int64_t)LAYOUT_N * LAYOUT_C * LAYOUT_H * LAYOUT_W ||
      args[1].i64 != (int64_t)LAYOUT_N * CB * LAYOUT_H * LAYOUT_W * B) {
    return 2;
  }
  const float* in = (const float*)args[0].data;
  float* out = (float*)args[1].data;
  for (int64_t n = 0; n < LAYOUT_N; ++n) {
    for (int64_t c = 0; c < CB * B; ++c) {
      for (int64_t h = 0; h < LAYOUT_H; ++h) {
        for (int64_t x = 0; x < LAYOUT_W; ++x) {
          out[(((n * CB + c / B) * LAYOUT_H + h) * LAYOUT_W + x) * B + c % B] =
              c < LAYOUT_C ? in[((n * LAYOUT_C + c) * LAYOUT_H + h) * LAYOUT_W + x] : 0.0f;
        }
      }
    }
  }
  return 0;
}
