/* layout_nchwc.c: the layout transform from NCHW to the blocked-channel NCHWc layout of
 * conv2d_nchwc.c, fp32, for the CPU backend:
 *   out[n][c/B][h][x][c%B] = in[n][c][h][x]   (lanes past C written as 0)
 * Its own op, so the cost of changing layouts is measured apart from the convolution.
 *
 * Freestanding C specialised by #defines (see layout_nchwc.cpp):
 *   workload  LAYOUT_N LAYOUT_C LAYOUT_H LAYOUT_W LAYOUT_BLOCK
 *   LAYOUT_TW     columns per step: TW columns of each of the B channels are read, then
 *                 written as TW vectors of B lanes (a B x TW transpose in registers)
 *   LAYOUT_SPLIT  parallel_for tasks: 0 = one per (image, channel block), 1 = one per row
 * Returns 0, or 2 on bad arguments.
 */
#include "kestrel/kernel/abi.h"

#if !defined(LAYOUT_N) || !defined(LAYOUT_C) || !defined(LAYOUT_H) || !defined(LAYOUT_W) || \
    !defined(LAYOUT_BLOCK) || !defined(LAYOUT_TW) || !defined(LAYOUT_SPLIT)
#error "layout_nchwc.c needs LAYOUT_{N,C,H,W,BLOCK,TW,SPLIT}"
#endif

#define B LAYOUT_BLOCK
#define CB ((LAYOUT_C + B - 1) / B)
#define KESTREL_PRAGMA(x) _Pragma(#x)
#define UNROLL_FULL KESTREL_PRAGMA(clang loop unroll(full))

typedef struct layout_ctx {
  const float* in;
  float* out;
} layout_ctx;

/* Row h of channel block cb of image n (row index t = (n * CB + cb) * H + h). */
static inline __attribute__((always_inline)) void row(const layout_ctx* ctx, int64_t t) {
  int64_t h = t % LAYOUT_H, ncb = t / LAYOUT_H, cb = ncb % CB, n = ncb / CB;
  const float* src = ctx->in + ((n * LAYOUT_C + cb * B) * LAYOUT_H + h) * (int64_t)LAYOUT_W;
  float* dst = ctx->out + t * (int64_t)LAYOUT_W * B;
  int64_t lanes = LAYOUT_C - cb * B < B ? LAYOUT_C - cb * B : B;
  int64_t x0 = 0;
  if (lanes == B) {
    for (; x0 + LAYOUT_TW <= LAYOUT_W; x0 += LAYOUT_TW) {
      float tile[LAYOUT_TW][B];
      UNROLL_FULL for (int l = 0; l < B; ++l) {
        UNROLL_FULL for (int x = 0; x < LAYOUT_TW; ++x) tile[x][l] = src[(int64_t)l * LAYOUT_H * LAYOUT_W + x0 + x];
      }
      UNROLL_FULL for (int x = 0; x < LAYOUT_TW; ++x) {
        UNROLL_FULL for (int l = 0; l < B; ++l) dst[(x0 + x) * B + l] = tile[x][l];
      }
    }
  }
  for (; x0 < LAYOUT_W; ++x0) {
    for (int64_t l = 0; l < B; ++l) dst[x0 * B + l] = l < lanes ? src[l * LAYOUT_H * LAYOUT_W + x0] : 0.0f;
  }
}

#if LAYOUT_SPLIT == 0
static void plane_task(int64_t t, void* p) {
  for (int64_t h = 0; h < LAYOUT_H; ++h) row((const layout_ctx*)p, t * LAYOUT_H + h);
}
#else
static void row_task(int64_t t, void* p) { row((const layout_ctx*)p, t); }
#endif

KESTREL_KERNEL(svc, args, num_args) {
  if (num_args != 2 || !args[0].data || !args[1].data ||
      args[0].i64 != (int64_t)LAYOUT_N * LAYOUT_C * LAYOUT_H * LAYOUT_W ||
      args[1].i64 != (int64_t)LAYOUT_N * CB * LAYOUT_H * LAYOUT_W * B) {
    return 2;
  }
  layout_ctx ctx = {(const float*)args[0].data, (float*)args[1].data};
#if LAYOUT_SPLIT == 0
  kestrel_parallel_for(svc, (int64_t)LAYOUT_N * CB, plane_task, &ctx);
#elif LAYOUT_SPLIT == 1
  kestrel_parallel_for(svc, (int64_t)LAYOUT_N * CB * LAYOUT_H, row_task, &ctx);
#else
#error "layout_nchwc.c: LAYOUT_SPLIT must be 0 or 1"
#endif
  return 0;
}
