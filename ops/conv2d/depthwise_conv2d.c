/* depthwise_conv2d.c: depthwise 2-D convolution (channel multiplier 1), fp32, in the
 * blocked-channel layout (NCHWc), for the CPU backend, with an optional fused epilogue.
 *   out[n][c/B][p][q][c%B] = act(sum_{r,s} in[n][c/B][h][x][c%B] * w[c/B][r][s][c%B]
 *                                + bias[c] + residual[n][c/B][p][q][c%B])
 *   with h = p*STRIDE - PAD + r*DILATION, x = q*STRIDE - PAD + s*DILATION (out of range: 0)
 *
 * Channels are split into blocks of B = CONV_BLOCK, one vector each; lanes past C of the
 * input, weights, bias and residual are ignored (they may hold anything finite), output
 * lanes past C are written as 0.
 *
 * Freestanding C specialised entirely by #defines (see depthwise_conv2d.cpp):
 *   workload  CONV_N CONV_C CONV_H CONV_W CONV_R CONV_S CONV_STRIDE CONV_PAD CONV_DILATION
 *             CONV_BLOCK, optional CONV_BIAS CONV_RESIDUAL (0/1) CONV_ACT (0..8, KESTREL_ACT_* of
 *             kestrel/kernel/math.h)
 *   CONV_OW     output columns per register tile
 *   CONV_OH     output rows per register tile (an input row is loaded once for all of them)
 *   CONV_UNROLL unroll count of the loop over the interior column tiles of a row
 *   CONV_SPLIT  parallel_for tasks: 0 = one per channel block, 1 = one per OH row tile,
 *               2 = one per (channel block, row tile); images are always split
 *
 * The micro-kernel keeps OH x OW output vectors in registers; per input row it loads the
 * OH filter rows' weight vectors that apply to it and each input vector once, reused by
 * every output row of the tile. There is no padded copy of the input (the op does little
 * arithmetic per byte, a copy would cost as much as the convolution): columns whose
 * filter window lies inside the input use tiles without bounds checks; the first columns
 * use checked single-column tiles and the last ones a checked full tile. Rows are checked
 * per input row of the tile. The epilogue is applied to the registers before the single
 * store. Tensors: input, weight, [bias], [residual], output. Returns 0, 2 on bad
 * arguments.
 */
#include "kestrel/kernel/abi.h"
#include "kestrel/kernel/math.h"

#if !defined(CONV_N) || !defined(CONV_C) || !defined(CONV_H) || !defined(CONV_W) || !defined(CONV_R) ||        \
    !defined(CONV_S) || !defined(CONV_STRIDE) || !defined(CONV_PAD) || !defined(CONV_DILATION) ||              \
    !defined(CONV_BLOCK) || !defined(CONV_OW) || !defined(CONV_OH) || !defined(CONV_UNROLL) || !defined(CONV_SPLIT)
#error "depthwise_conv2d.c needs CONV_{N,C,H,W,R,S,STRIDE,PAD,DILATION,BLOCK,OW,OH,UNROLL,SPLIT}"
#endif
#ifndef CONV_BIAS
#define CONV_BIAS 0
#endif
#ifndef CONV_RESIDUAL
#define CONV_RESIDUAL 0
#endif
#ifndef CONV_ACT
#define CONV_ACT 0
#endif

#define B CONV_BLOCK
#define OW CONV_OW
#define OH CONV_OH
#define P ((CONV_H + 2 * CONV_PAD - CONV_DILATION * (CONV_R - 1) - 1) / CONV_STRIDE + 1)
#define Q ((CONV_W + 2 * CONV_PAD - CONV_DILATION * (CONV_S - 1) - 1) / CONV_STRIDE + 1)
#if CONV_H + 2 * CONV_PAD < CONV_DILATION * (CONV_R - 1) + 1 || CONV_W + 2 * CONV_PAD < CONV_DILATION * (CONV_S - 1) + 1
#error "depthwise_conv2d.c: the output is empty (the dilated filter is larger than the padded input)"
#endif
#define CB ((CONV_C + B - 1) / B)                                      /* channel blocks */
#define PT ((P + OH - 1) / OH)                                         /* row tiles */
#define IH ((OH - 1) * CONV_STRIDE + (CONV_R - 1) * CONV_DILATION + 1) /* input rows of a row tile */
/* Columns [Q_LO, Q_HI) have their whole filter window inside the input. */
#define Q_LO_RAW ((CONV_PAD + CONV_STRIDE - 1) / CONV_STRIDE)
#define Q_LO (Q_LO_RAW < Q ? Q_LO_RAW : Q)
#define Q_SPAN (CONV_W - 1 + CONV_PAD - (CONV_S - 1) * CONV_DILATION)
#define Q_HI_RAW (Q_SPAN < 0 ? 0 : Q_SPAN / CONV_STRIDE + 1)
#define Q_HI (Q_HI_RAW > Q ? Q : Q_HI_RAW < Q_LO ? Q_LO : Q_HI_RAW)
#define IN_PLANE ((int64_t)CONV_H * CONV_W * B)  /* floats per input channel block */
#define OUT_PLANE ((int64_t)P * Q * B)           /* floats per output channel block */
#define WBLOCK ((int64_t)CONV_R * CONV_S * B)    /* floats per weight channel block */
#if CONV_SPLIT == 0
#define TASKS_PER_IMAGE CB
#elif CONV_SPLIT == 1
#define TASKS_PER_IMAGE PT
#elif CONV_SPLIT == 2
#define TASKS_PER_IMAGE ((int64_t)CB * PT)
#else
#error "depthwise_conv2d.c: CONV_SPLIT must be 0, 1 or 2"
#endif

#define KESTREL_PRAGMA(x) _Pragma(#x)
#define UNROLL_COUNT(n) KESTREL_PRAGMA(clang loop unroll_count(n))
#define UNROLL_FULL KESTREL_PRAGMA(clang loop unroll(full))
#define INLINE static inline __attribute__((always_inline))

typedef float vf __attribute__((vector_size(B * sizeof(float))));
typedef int32_t vi __attribute__((vector_size(B * sizeof(int32_t))));
/* Unaligned vector loads and stores (macros: functions taking or returning vectors wider
 * than the target's registers trip -Wpsabi). */
#define VLOAD(v, p) __builtin_memcpy(&(v), (p), sizeof(vf))
#define VSTORE(p, v) __builtin_memcpy((p), &(v), sizeof(vf))

typedef struct dw_ctx {
  const float* in;       /* [N][CB][H][W][B] */
  const float* w;        /* [CB][R][S][B] */
  const float* bias;     /* [CB*B] (CONV_BIAS) */
  const float* residual; /* [N][CB][P][Q][B] (CONV_RESIDUAL) */
  float* out;            /* [N][CB][P][Q][B] */
} dw_ctx;

/* The filter row that input row i of a row tile contributes to output row j through, or
 * -1 (compile-time constants once the loops are unrolled). */
INLINE int filter_row(int i, int j) {
  int d = i - j * CONV_STRIDE;
  return d >= 0 && d % CONV_DILATION == 0 && d / CONV_DILATION < CONV_R ? d / CONV_DILATION : -1;
}

/* One register tile of image n, channel block cb: rows p0..p0+OH, columns q0..q0+width
 * (width is OW or 1, a constant at every call). `checked` tiles skip input columns
 * outside the input and store only columns < Q; unchecked ones need the whole window of
 * every column inside the input and all columns < Q. */
INLINE void tile(const dw_ctx* ctx, int64_t n, int64_t cb, int64_t p0, int64_t q0, int width, int checked) {
  vf acc[OH][OW];
  UNROLL_FULL for (int j = 0; j < OH; ++j) {
    UNROLL_FULL for (int q = 0; q < OW; ++q) acc[j][q] = (vf){0};
  }
  const float* in = ctx->in + (n * CB + cb) * IN_PLANE;
  const float* wb = ctx->w + cb * WBLOCK;
  const int64_t h0 = p0 * CONV_STRIDE - CONV_PAD, x0 = q0 * CONV_STRIDE - CONV_PAD;
  UNROLL_FULL for (int i = 0; i < IH; ++i) {
    const int64_t h = h0 + i;
    if (h < 0 || h >= CONV_H) continue;
    const float* row = in + h * CONV_W * B;
    UNROLL_FULL for (int s = 0; s < CONV_S; ++s) {
      vf wj[OH];
      UNROLL_FULL for (int j = 0; j < OH; ++j) {
        if (filter_row(i, j) >= 0) VLOAD(wj[j], wb + (filter_row(i, j) * CONV_S + s) * B);
      }
      UNROLL_FULL for (int q = 0; q < OW; ++q) {
        if (q >= width) break;
        const int64_t x = x0 + q * CONV_STRIDE + s * CONV_DILATION;
        if (checked && (x < 0 || x >= CONV_W)) continue;
        vf xv;
        VLOAD(xv, row + x * B);
        UNROLL_FULL for (int j = 0; j < OH; ++j) {
          if (filter_row(i, j) >= 0) acc[j][q] += xv * wj[j];
        }
      }
    }
  }
#if CONV_BIAS
  vf bias;
  VLOAD(bias, ctx->bias + cb * B);
#endif
#if CONV_C % B != 0
  vi keep = (vi){0} - 1;
  if (cb == CB - 1) { /* lanes past C hold products of unused weights: zero them */
    UNROLL_FULL for (int l = 0; l < B; ++l) keep[l] = l < CONV_C % B ? -1 : 0;
  }
#endif
  UNROLL_FULL for (int j = 0; j < OH; ++j) {
    const int64_t p = p0 + j;
    if (p >= P) break;
    const int64_t at = ((n * CB + cb) * P + p) * (int64_t)Q * B + q0 * B;
    UNROLL_FULL for (int q = 0; q < OW; ++q) {
      if (q >= width) break;
      if (checked && q0 + q >= Q) break;
      vf v = acc[j][q];
#if CONV_BIAS
      v += bias;
#endif
#if CONV_RESIDUAL
      vf res;
      VLOAD(res, ctx->residual + at + q * B);
      v += res;
#endif
#if CONV_ACT != 0
      v = kestrel_activate(v, CONV_ACT);
#endif
#if CONV_C % B != 0
      v = (vf)((vi)v & keep);
#endif
      VSTORE(ctx->out + at + q * B, v);
    }
  }
}

/* Every column of the row tile at p0: checked single columns on the left, unchecked
 * tiles while the window stays inside the input, checked tiles for the rest (one, unless
 * the right border is wider than a tile). */
INLINE void row_tile(const dw_ctx* ctx, int64_t n, int64_t cb, int64_t p0) {
  int64_t q0 = 0;
  for (; q0 < Q_LO; ++q0) tile(ctx, n, cb, p0, q0, 1, 1);
  UNROLL_COUNT(CONV_UNROLL) for (; q0 + OW <= Q_HI; q0 += OW) tile(ctx, n, cb, p0, q0, OW, 0);
  for (; q0 < Q; q0 += OW) tile(ctx, n, cb, p0, q0, OW, 1);
}

static void task(int64_t t, void* p) {
  const dw_ctx* ctx = (const dw_ctx*)p;
  const int64_t n = t / TASKS_PER_IMAGE, item = t % TASKS_PER_IMAGE;
#if CONV_SPLIT == 0
  for (int64_t pt = 0; pt < PT; ++pt) row_tile(ctx, n, item, pt * OH);
#elif CONV_SPLIT == 1
  for (int64_t cb = 0; cb < CB; ++cb) row_tile(ctx, n, cb, item * OH);
#else
  row_tile(ctx, n, item / PT, item % PT * OH);
#endif
}

KESTREL_KERNEL(svc, args, num_args) {
  enum { kBiasArg = 2, kResidualArg = 2 + CONV_BIAS, kOutArg = 2 + CONV_BIAS + CONV_RESIDUAL };
  if (num_args != kOutArg + 1) return 2;
  for (int i = 0; i < num_args; ++i) {
    if (!args[i].data) return 2;
  }
  if (args[0].i64 != (int64_t)CONV_N * CB * IN_PLANE || args[1].i64 != (int64_t)CB * WBLOCK ||
      args[kOutArg].i64 != (int64_t)CONV_N * CB * OUT_PLANE) {
    return 2;
  }
  dw_ctx ctx;
  ctx.in = (const float*)args[0].data;
  ctx.w = (const float*)args[1].data;
  ctx.bias = 0;
  ctx.residual = 0;
#if CONV_BIAS
  if (args[kBiasArg].i64 != (int64_t)CB * B) return 2;
  ctx.bias = (const float*)args[kBiasArg].data;
#endif
#if CONV_RESIDUAL
  if (args[kResidualArg].i64 != (int64_t)CONV_N * CB * OUT_PLANE) return 2;
  ctx.residual = (const float*)args[kResidualArg].data;
#endif
  ctx.out = (float*)args[kOutArg].data;
  kestrel_parallel_for(svc, (int64_t)CONV_N * TASKS_PER_IMAGE, task, &ctx);
  return 0;
}
