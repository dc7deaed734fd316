/* pool2d.c: 2-D max or average pooling of an fp32 tensor in the blocked-channel layout
 * NCHWc (block 1: plain NCHW), for the CPU backend:
 *   out[n][c/B][p][q][c%B] = max or mean of in[n][c/B][h][x][c%B]
 *   over h in [p*stride - pad, +R), x in [q*stride - pad, +S), clipped to the image
 * Padding never takes part: a max ignores it (ONNX pads with -infinity) and a mean
 * divides by the positions inside the image (ONNX count_include_pad=0). Global pooling
 * takes the whole H x W plane (P = Q = 1). Lanes past C are written as 0.
 *
 * Freestanding C specialised by #defines (see ops/src/pool2d.cpp):
 *   workload  POOL_N POOL_C POOL_H POOL_W POOL_R POOL_S POOL_STRIDE POOL_PAD POOL_KIND
 *             (0 max, 1 average) POOL_GLOBAL POOL_BLOCK
 *   POOL_TW     output columns computed together (independent accumulators)
 *   POOL_SPLIT  parallel_for tasks: 0 = one per (image, channel block) plane, 1 = one per
 *               output row
 * Arguments: in [N][C/B][H][W][B], out [N][C/B][P][Q][B]. Returns 0, or 2 on bad
 * arguments. */
#include "kestrel/kernel/abi.h"
#include "kestrel/kernel/math.h"

#if !defined(POOL_N) || !defined(POOL_C) || !defined(POOL_H) || !defined(POOL_W) || !defined(POOL_R) || \
    !defined(POOL_S) || !defined(POOL_STRIDE) || !defined(POOL_PAD) || !defined(POOL_KIND) ||             \
    !defined(POOL_GLOBAL) || !defined(POOL_BLOCK) || !defined(POOL_TW) || !defined(POOL_SPLIT)
#error "pool2d.c needs POOL_{N,C,H,W,R,S,STRIDE,PAD,KIND,GLOBAL,BLOCK,TW,SPLIT}"
#endif

#define B POOL_BLOCK
#define CB ((POOL_C + B - 1) / B)
#if POOL_GLOBAL
#define R POOL_H
#define S POOL_W
#define STRIDE 1
#define PAD 0
#define P 1
#define Q 1
#else
#define R POOL_R
#define S POOL_S
#define STRIDE POOL_STRIDE
#define PAD POOL_PAD
#define P ((POOL_H + 2 * POOL_PAD - POOL_R) / POOL_STRIDE + 1)
#define Q ((POOL_W + 2 * POOL_PAD - POOL_S) / POOL_STRIDE + 1)
#endif
#define KESTREL_PRAGMA(x) _Pragma(#x)
#define UNROLL_FULL KESTREL_PRAGMA(clang loop unroll(full))
#define INLINE static inline __attribute__((always_inline))
#define LOWEST (-3.40282347e38f)

typedef float vf __attribute__((vector_size(B * sizeof(float))));

#define VLOAD(v, p) __builtin_memcpy(&(v), (p), sizeof(vf))
#define VSTORE(p, v) __builtin_memcpy((p), &(v), sizeof(vf))

INLINE int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }
INLINE int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

typedef struct pool_ctx {
  const float* in;
  float* out;
} pool_ctx;

/* Output columns q .. q+T-1 (T <= TW, a constant once inlined) of row p of plane (n, cb):
 * `plane` is the input plane, `dst` the output row, `lanes` the real channels of this
 * block. */
INLINE void columns(const float* restrict plane, float* restrict dst, int64_t p, int64_t q, int64_t lanes,
                    const int T) {
  const int64_t h0 = p * STRIDE - PAD, hs = max64(h0, 0), he = min64(h0 + R, POOL_H);
  int64_t xs[POOL_TW], xe[POOL_TW];
  vf acc[POOL_TW];
  UNROLL_FULL for (int t = 0; t < T; ++t) {
    const int64_t x0 = (q + t) * STRIDE - PAD;
    xs[t] = max64(x0, 0);
    xe[t] = min64(x0 + S, POOL_W);
    acc[t] = (vf){0} + (POOL_KIND == 0 ? LOWEST : 0.0f);
  }
  for (int64_t h = hs; h < he; ++h) {
    const float* src = plane + h * POOL_W * B;
    UNROLL_FULL for (int t = 0; t < T; ++t) {
      for (int64_t x = xs[t]; x < xe[t]; ++x) {
        vf v;
        VLOAD(v, src + x * B);
#if POOL_KIND == 0
        acc[t] = kestrel_max(acc[t], v);
#else
        acc[t] += v;
#endif
      }
    }
  }
  UNROLL_FULL for (int t = 0; t < T; ++t) {
#if POOL_KIND != 0
    acc[t] *= 1.0f / (float)((he - hs) * (xe[t] - xs[t]));
#endif
    if (lanes == B) {
      VSTORE(dst + (q + t) * B, acc[t]);
    } else {
      float tmp[B];
      VSTORE(tmp, acc[t]);
      for (int64_t l = 0; l < B; ++l) dst[(q + t) * B + l] = l < lanes ? tmp[l] : 0.0f;
    }
  }
}

/* Output row p of plane t = n * CB + cb. */
INLINE void row(const pool_ctx* ctx, int64_t t, int64_t p) {
  const float* plane = ctx->in + t * (int64_t)POOL_H * POOL_W * B;
  float* dst = ctx->out + (t * P + p) * (int64_t)Q * B;
  const int64_t cb = t % CB, lanes = min64(POOL_C - cb * B, B);
  int64_t q = 0;
  for (; q + POOL_TW <= Q; q += POOL_TW) columns(plane, dst, p, q, lanes, POOL_TW);
  for (; q < Q; ++q) columns(plane, dst, p, q, lanes, 1);
}

#if POOL_SPLIT == 0
static void task(int64_t t, void* ctx) {
  for (int64_t p = 0; p < P; ++p) row((const pool_ctx*)ctx, t, p);
}
#define TASKS ((int64_t)POOL_N * CB)
#else
static void task(int64_t t, void* ctx) { row((const pool_ctx*)ctx, t / P, t % P); }
#define TASKS ((int64_t)POOL_N * CB * P)
#endif

KESTREL_KERNEL(svc, args, num_args) {
  if (num_args != 2 || !args[0].data || !args[1].data ||
      args[0].i64 != (int64_t)POOL_N * CB * POOL_H * POOL_W * B || args[1].i64 != (int64_t)POOL_N * CB * P * Q * B) {
    return 2;
  }
  pool_ctx ctx = {(const float*)args[0].data, (float*)args[1].data};
  kestrel_parallel_for(svc, TASKS, task, &ctx);
  return 0;
}
