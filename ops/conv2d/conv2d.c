/* conv2d.c: direct 2-D convolution, fp32 NCHW, for the CPU backend, optionally grouped.
 *   out[n][k][p][q] = sum_{c,r,s} in[n][g*C/G + c][p*STRIDE - PAD + r*DILATION][q*STRIDE - PAD + s*DILATION]
 *                                 * w[k][c][r][s]      (out-of-range input reads as 0)
 *   with G = CONV_GROUPS groups, g = k / (K/G) the group of output channel k and c over the
 *   C/G input channels of a group
 *
 * Freestanding C specialised entirely by #defines (see conv2d.cpp, Conv2dOp::source):
 *   workload  CONV_N CONV_C CONV_H CONV_W CONV_K CONV_R CONV_S CONV_STRIDE CONV_PAD CONV_DILATION,
 *             optional CONV_GROUPS (default 1; divides C and K)
 *   CONV_TK     output channels per register tile (weights broadcast, one row each)
 *   CONV_TW     output columns per register tile (CONV_TW / CONV_VEC vectors)
 *   CONV_VEC    floats per vector
 *   CONV_TH     output rows per block (the unit of work with CONV_TK channels)
 *   CONV_TC     input channels per block (the output tile is finished after C / TC passes)
 *   CONV_UNROLL unroll count of the input-channel loop
 *   CONV_SPLIT  parallel_for tasks: 0 = one per TK channel block, 1 = one per TH row block,
 *               2 = one per (channel block, row block)
 *
 * Layout tricks that keep the inner loop free of bounds checks: the weights are packed
 * once into [G][ceil(K/G/TK)][C/G][R][S][TK] (zero channels past a group's last) so a
 * tile's TK weights are contiguous and within one group, and each image is packed into a zero-padded copy whose rows are split into
 * STRIDE phases: padded column x goes to phase x % STRIDE, position x / STRIDE. Output
 * column q with filter column s then reads phase (s*DILATION) % STRIDE at position
 * q + (s*DILATION) / STRIDE, so TW consecutive outputs read TW consecutive floats for any
 * stride. Rows and phase rows are padded so tiles past Q compute on zeros; their extra
 * columns are never stored. Returns 0, 1 when scratch memory runs out, 2 on bad arguments.
 */
#include "kestrel/kernel/abi.h"

#if !defined(CONV_N) || !defined(CONV_C) || !defined(CONV_H) || !defined(CONV_W) || !defined(CONV_K) || \
    !defined(CONV_R) || !defined(CONV_S) || !defined(CONV_STRIDE) || !defined(CONV_PAD) ||              \
    !defined(CONV_DILATION) || !defined(CONV_TK) || !defined(CONV_TH) || !defined(CONV_TW) ||                 \
    !defined(CONV_TC) || !defined(CONV_UNROLL) || !defined(CONV_VEC) || !defined(CONV_SPLIT)
#error "conv2d.c needs CONV_{N,C,H,W,K,R,S,STRIDE,PAD,DILATION,TK,TH,TW,TC,UNROLL,VEC,SPLIT}"
#endif
#ifndef CONV_GROUPS
#define CONV_GROUPS 1
#endif
#if CONV_C % CONV_GROUPS != 0 || CONV_K % CONV_GROUPS != 0
#error "conv2d.c: GROUPS must divide C and K"
#endif
#if CONV_TW % CONV_VEC != 0
#error "conv2d.c: TW must be a multiple of VEC"
#endif

#define P ((CONV_H + 2 * CONV_PAD - CONV_DILATION * (CONV_R - 1) - 1) / CONV_STRIDE + 1)
#define Q ((CONV_W + 2 * CONV_PAD - CONV_DILATION * (CONV_S - 1) - 1) / CONV_STRIDE + 1)
#if CONV_H + 2 * CONV_PAD < CONV_DILATION * (CONV_R - 1) + 1 || CONV_W + 2 * CONV_PAD < CONV_DILATION * (CONV_S - 1) + 1
#error "conv2d.c: the output is empty (the dilated filter is larger than the padded input)"
#endif
#define TV (CONV_TW / CONV_VEC)                             /* vectors per tile row */
#define CG (CONV_C / CONV_GROUPS)                           /* input channels of a group */
#define KG (CONV_K / CONV_GROUPS)                           /* output channels of a group */
#define KBG ((KG + CONV_TK - 1) / CONV_TK)                  /* channel blocks of a group */
#define KB (CONV_GROUPS * KBG)                              /* channel blocks */
#define PB ((P + CONV_TH - 1) / CONV_TH)                    /* row blocks */
#define QT ((Q + CONV_TW - 1) / CONV_TW * CONV_TW)          /* columns computed */
#define MW (QT + (CONV_S - 1) * CONV_DILATION / CONV_STRIDE)     /* floats per phase row */
#define HP (CONV_H + 2 * CONV_PAD)                          /* padded rows */
#define XROW ((int64_t)CONV_STRIDE * MW)                    /* floats per packed row */
#define XCH ((int64_t)HP * XROW)                            /* floats per packed channel */
#define WBLOCK ((int64_t)CG * CONV_R * CONV_S * CONV_TK)    /* floats per packed channel block */

#define KESTREL_PRAGMA(x) _Pragma(#x)
#define UNROLL_COUNT(n) KESTREL_PRAGMA(clang loop unroll_count(n))
#define UNROLL_FULL KESTREL_PRAGMA(clang loop unroll(full))

typedef float vf __attribute__((vector_size(CONV_VEC * sizeof(float))));
/* Unaligned vector loads and stores (macros: functions taking or returning vectors wider
 * than the target's registers trip -Wpsabi). */
#define VLOAD(v, p) __builtin_memcpy(&(v), (p), sizeof(vf))
#define VSTORE(p, v) __builtin_memcpy((p), &(v), sizeof(vf))

static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

typedef struct conv_ctx {
  const float* in;  /* the current image, [C][H][W] */
  const float* w;   /* [K][C/G][R][S] */
  float* out;       /* the current image, [K][P][Q] */
  float* xp;        /* packed image, [C][HP][STRIDE][MW] */
  float* wp;        /* packed weights, [KB][C/G][R][S][TK] */
} conv_ctx;

static void pack_weights(int64_t kb, void* p) {
  conv_ctx* ctx = (conv_ctx*)p;
  float* dst = ctx->wp + kb * WBLOCK;
  for (int64_t u = 0; u < CONV_TK; ++u) {
    int64_t kl = kb % KBG * CONV_TK + u; /* the channel within its group */
    if (kl < KG) {
      const float* src = ctx->w + (kb / KBG * KG + kl) * CG * CONV_R * CONV_S;
      for (int64_t crs = 0; crs < (int64_t)CG * CONV_R * CONV_S; ++crs) dst[crs * CONV_TK + u] = src[crs];
    } else {
      for (int64_t crs = 0; crs < (int64_t)CG * CONV_R * CONV_S; ++crs) dst[crs * CONV_TK + u] = 0.0f;
    }
  }
}

static void pack_image(int64_t c, void* p) {
  conv_ctx* ctx = (conv_ctx*)p;
  const float* src = ctx->in + c * CONV_H * CONV_W;
  float* dst = ctx->xp + c * XCH;
  for (int64_t hp = 0; hp < HP; ++hp) {
    int64_t h = hp - CONV_PAD;
    for (int64_t phase = 0; phase < CONV_STRIDE; ++phase) {
      float* row = dst + hp * XROW + phase * MW;
      for (int64_t m = 0; m < MW; ++m) {
        int64_t x = m * CONV_STRIDE + phase - CONV_PAD;
        row[m] = (h >= 0 && h < CONV_H && x >= 0 && x < CONV_W) ? src[h * CONV_W + x] : 0.0f;
      }
    }
  }
}

/* One register tile: output channels of block kb, row p, columns q0..q0+TW, input
 * channels cb..cb+cn of the block's group; the first channel block stores, later ones
 * accumulate. */
static inline __attribute__((always_inline)) void tile(const conv_ctx* ctx, int64_t kb, int64_t cb, int64_t cn,
                                                       int64_t p, int64_t q0) {
  vf acc[CONV_TK][TV];
  UNROLL_FULL for (int u = 0; u < CONV_TK; ++u) {
    UNROLL_FULL for (int v = 0; v < TV; ++v) acc[u][v] = (vf){0};
  }
  const float* wbase = ctx->wp + kb * WBLOCK + cb * CONV_R * CONV_S * CONV_TK;
  const float* xbase = ctx->xp + (kb / KBG * CG + cb) * XCH + p * CONV_STRIDE * XROW + q0;
  UNROLL_COUNT(CONV_UNROLL) for (int64_t c = 0; c < cn; ++c) {
    for (int r = 0; r < CONV_R; ++r) {
      const float* xrow = xbase + c * XCH + r * CONV_DILATION * XROW;
      const float* wrow = wbase + (c * CONV_R + r) * CONV_S * CONV_TK;
      UNROLL_FULL for (int s = 0; s < CONV_S; ++s) {
        const float* x = xrow + (s * CONV_DILATION) % CONV_STRIDE * MW + (s * CONV_DILATION) / CONV_STRIDE;
        vf xv[TV];
        UNROLL_FULL for (int v = 0; v < TV; ++v) VLOAD(xv[v], x + v * CONV_VEC);
        UNROLL_FULL for (int u = 0; u < CONV_TK; ++u) {
          vf wv = (vf){0} + wrow[s * CONV_TK + u];
          UNROLL_FULL for (int v = 0; v < TV; ++v) acc[u][v] += wv * xv[v];
        }
      }
    }
  }
  int accumulate = cb > 0;
  UNROLL_FULL for (int u = 0; u < CONV_TK; ++u) {
    int64_t kl = kb % KBG * CONV_TK + u;
    if (kl >= KG) break;
    float* o = ctx->out + ((kb / KBG * KG + kl) * P + p) * Q + q0;
    if (q0 + CONV_TW <= Q) {
      UNROLL_FULL for (int v = 0; v < TV; ++v) {
        if (accumulate) {
          vf old;
          VLOAD(old, o + v * CONV_VEC);
          acc[u][v] += old;
        }
        VSTORE(o + v * CONV_VEC, acc[u][v]);
      }
    } else {
      float row[CONV_TW];
      UNROLL_FULL for (int v = 0; v < TV; ++v) VSTORE(row + v * CONV_VEC, acc[u][v]);
      int64_t n = Q - q0;
      if (accumulate) {
        for (int64_t j = 0; j < n; ++j) o[j] += row[j];
      } else {
        for (int64_t j = 0; j < n; ++j) o[j] = row[j];
      }
    }
  }
}

/* Output channel blocks [kb0, kb1) x row blocks [pb0, pb1) of the current image. */
static void run_blocks(const conv_ctx* ctx, int64_t kb0, int64_t kb1, int64_t pb0, int64_t pb1) {
  int64_t p1 = min64(pb1 * CONV_TH, P);
  for (int64_t kb = kb0; kb < kb1; ++kb) {
    for (int64_t cb = 0; cb < CG; cb += CONV_TC) {
      int64_t cn = min64(CONV_TC, CG - cb);
      for (int64_t p = pb0 * CONV_TH; p < p1; ++p) {
        for (int64_t q0 = 0; q0 < Q; q0 += CONV_TW) tile(ctx, kb, cb, cn, p, q0);
      }
    }
  }
}

static void task(int64_t t, void* p) {
  const conv_ctx* ctx = (const conv_ctx*)p;
#if CONV_SPLIT == 0
  run_blocks(ctx, t, t + 1, 0, PB);
#elif CONV_SPLIT == 1
  run_blocks(ctx, 0, KB, t, t + 1);
#elif CONV_SPLIT == 2
  run_blocks(ctx, t / PB, t / PB + 1, t % PB, t % PB + 1);
#else
#error "conv2d.c: CONV_SPLIT must be 0, 1 or 2"
#endif
}

KESTREL_KERNEL(svc, args, num_args) {
  if (num_args != 3 || !args[0].data || !args[1].data || !args[2].data ||
      args[0].i64 != (int64_t)CONV_N * CONV_C * CONV_H * CONV_W ||
      args[1].i64 != (int64_t)CONV_K * CG * CONV_R * CONV_S || args[2].i64 != (int64_t)CONV_N * CONV_K * P * Q) {
    return 2;
  }
  conv_ctx ctx;
  ctx.w = (const float*)args[1].data;
  ctx.xp = (float*)kestrel_alloc(svc, (size_t)CONV_C * XCH * sizeof(float));
  ctx.wp = (float*)kestrel_alloc(svc, (size_t)KB * WBLOCK * sizeof(float));
  int32_t rc = 1;
  if (ctx.xp && ctx.wp) {
    kestrel_parallel_for(svc, KB, pack_weights, &ctx);
    for (int64_t n = 0; n < CONV_N; ++n) {
      ctx.in = (const float*)args[0].data + n * CONV_C * CONV_H * CONV_W;
      ctx.out = (float*)args[2].data + n * CONV_K * P * Q;
      kestrel_parallel_for(svc, CONV_C, pack_image, &ctx);
#if CONV_SPLIT == 0
      kestrel_parallel_for(svc, KB, task, &ctx);
#elif CONV_SPLIT == 1
      kestrel_parallel_for(svc, PB, task, &ctx);
#else
      kestrel_parallel_for(svc, (int64_t)KB * PB, task, &ctx);
#endif
    }
    rc = 0;
  }
  if (ctx.xp) kestrel_release(svc, ctx.xp);
  if (ctx.wp) kestrel_release(svc, ctx.wp);
  return rc;
}
