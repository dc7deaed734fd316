/* conv2d_nchwc.c: direct 2-D convolution, fp32, blocked-channel layout (NCHWc), for the
 * CPU backend, optionally grouped, with an optional fused epilogue.
 *   out[n][k/B][p][q][k%B] = act(sum_{c,r,s} in[n][c/B][h][x][c%B] * w[k/B][c'/B][r][s][c'%B][k%B]
 *                                + bias[k] + residual[n][k/B][p][q][k%B])
 *   with h = p*STRIDE - PAD + r*DILATION, x = q*STRIDE - PAD + s*DILATION (out of range: 0),
 *   c over the input channels of k's group (GROUPS groups of C/GROUPS input and K/GROUPS
 *   output channels, both multiples of B when GROUPS > 1) and c' = c - group*C/GROUPS
 *
 * Channels are split into blocks of B = CONV_BLOCK (input and output); channel lanes past
 * C in the input and in the weights are never read (they may hold anything, NaN included),
 * those past K in the weights are ignored (anything finite), output lanes past K are
 * written as 0. The transform from NCHW is its own op
 * (layout_nchwc.c), so its cost is measured apart from the convolution's.
 *
 * Freestanding C specialised entirely by #defines (see conv2d_nchwc.cpp):
 *   workload  CONV_N CONV_C CONV_H CONV_W CONV_K CONV_R CONV_S CONV_STRIDE CONV_PAD CONV_DILATION
 *             CONV_BLOCK (channels per block = floats per vector), optional CONV_GROUPS
 *             (default 1), CONV_BIAS CONV_RESIDUAL (0/1), CONV_ACT (0..8, KESTREL_ACT_* of
 *             kestrel/kernel/math.h), CONV_PLAIN_IN (0/1)
 *   CONV_OW     output columns per register tile (one broadcast input float each)
 *   CONV_OK     output-channel blocks per register tile (one weight vector each); divides
 *               the output-channel blocks of a group
 *   CONV_OH     output rows per work block
 *   CONV_TC     input-channel blocks per pass (outputs are revisited ceil(C/B / TC) times)
 *   CONV_UNROLL unroll count of the loop over the B lanes of an input-channel block
 *   CONV_SPLIT  parallel_for tasks: 0 = one per OK group of channel blocks, 1 = one per OH
 *               row block, 2 = one per (group, row block)
 *
 * The micro-kernel keeps an OW x (OK*B) tile of outputs in OW*OK vector accumulators
 * (vector-extension variables): per input channel it loads OK weight vectors and
 * broadcasts OW input floats. Each image is first copied into a zero-padded buffer (rows
 * and columns of the padding, plus enough columns that tiles past Q compute on zeros),
 * so the inner loops have no bounds checks; lanes past C are zeroed there (a single partial
 * block, an RGB input's, keeps only its C lanes). When no padding
 * is needed (e.g. 1x1 convolutions without pad) the input is read in place. Weights are
 * always read in place. The epilogue (bias, residual, activation) is applied to the
 * registers of the last input-channel pass before its store: no extra pass over the
 * output. Tensors: input, weight, [bias [K/B*B]], [residual (the output's shape)],
 * output. With CONV_PLAIN_IN (C < B, no groups) the input is plain NCHW [N][C][H][W], which
 * the padded copy gathers: an RGB image needs no blocked copy of its own. Returns 0, 1 when
 * scratch memory runs out, 2 on bad arguments.
 */
#include "kestrel/kernel/abi.h"

#if !defined(CONV_N) || !defined(CONV_C) || !defined(CONV_H) || !defined(CONV_W) || !defined(CONV_K) ||        \
    !defined(CONV_R) || !defined(CONV_S) || !defined(CONV_STRIDE) || !defined(CONV_PAD) ||                     \
    !defined(CONV_DILATION) || !defined(CONV_BLOCK) || !defined(CONV_OW) || !defined(CONV_OK) ||                \
    !defined(CONV_OH) || !defined(CONV_TC) || !defined(CONV_UNROLL) || !defined(CONV_SPLIT)
#error "conv2d_nchwc.c needs CONV_{N,C,H,W,K,R,S,STRIDE,PAD,DILATION,BLOCK,OW,OK,OH,TC,UNROLL,SPLIT}"
#endif
#ifndef CONV_GROUPS
#define CONV_GROUPS 1
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
#ifndef CONV_PLAIN_IN
#define CONV_PLAIN_IN 0
#endif
#if CONV_PLAIN_IN && (CONV_C >= CONV_BLOCK || CONV_GROUPS != 1)
#error "conv2d_nchwc.c: a plain input (CONV_PLAIN_IN) needs C < block and no groups"
#endif
#if CONV_ACT != 0
#include "kestrel/kernel/math.h"
#endif

#define B CONV_BLOCK
#define P ((CONV_H + 2 * CONV_PAD - CONV_DILATION * (CONV_R - 1) - 1) / CONV_STRIDE + 1)
#define Q ((CONV_W + 2 * CONV_PAD - CONV_DILATION * (CONV_S - 1) - 1) / CONV_STRIDE + 1)
#if CONV_H + 2 * CONV_PAD < CONV_DILATION * (CONV_R - 1) + 1 || CONV_W + 2 * CONV_PAD < CONV_DILATION * (CONV_S - 1) + 1
#error "conv2d_nchwc.c: the output is empty (the dilated filter is larger than the padded input)"
#endif
#define CB ((CONV_C + B - 1) / B) /* input-channel blocks */
#define KB ((CONV_K + B - 1) / B) /* output-channel blocks */
#if CONV_GROUPS > 1 && (CONV_C % (CONV_GROUPS * B) != 0 || CONV_K % (CONV_GROUPS * B) != 0)
#error "conv2d_nchwc.c: with groups, C/GROUPS and K/GROUPS must be multiples of the block"
#endif
#define CBG (CB / CONV_GROUPS) /* input-channel blocks of a group */
#define KBG (KB / CONV_GROUPS) /* output-channel blocks of a group */
#if KBG % CONV_OK != 0
#error "conv2d_nchwc.c: OK must divide the number of output-channel blocks of a group"
#endif
/* Lanes of an input-channel block the reduction visits: all B, or only C when there is
 * one partial block (e.g. an RGB input). The last block of more than one, when C is not a
 * multiple of B, is visited for its C % B lanes only (LAST_LANES): no multiply-adds on
 * lanes that hold no channel, and no copy to zero them. */
#define LANES (CONV_C < B ? CONV_C : B)
#define LAST_LANES (CONV_C > B && CONV_C % B != 0 ? CONV_C % B : LANES)
#define KG (KB / CONV_OK)                                  /* groups of OK blocks */
#define PB ((P + CONV_OH - 1) / CONV_OH)                   /* row blocks */
#define QT ((Q + CONV_OW - 1) / CONV_OW * CONV_OW)         /* columns computed */
#define HP (CONV_H + 2 * CONV_PAD)                         /* rows of the padded copy */
#define WP_NEEDED ((QT - 1) * CONV_STRIDE + (CONV_S - 1) * CONV_DILATION + 1)
#define WP (WP_NEEDED > CONV_W + 2 * CONV_PAD ? WP_NEEDED : CONV_W + 2 * CONV_PAD) /* its columns */
/* The input is read in place when no padding is needed at all: no zero border, no extra
 * columns for the last tile (the reduction visits no lane past C). */
#define IN_PLACE (!CONV_PLAIN_IN && CONV_PAD == 0 && WP == CONV_W)
/* Floats of one image of the input: blocked, or plain with CONV_PLAIN_IN. */
#define IN_IMAGE ((int64_t)(CONV_PLAIN_IN ? CONV_C : CB * B) * CONV_H * CONV_W)
/* Floats per column of what the tiles read: B, or in a padded copy of one partial block
 * only its C lanes (an RGB input's copy is then C/B of the size to write and to read). */
#define XL (IN_PLACE ? B : LANES)
#define XROW ((int64_t)WP * XL)                            /* floats per padded row */
#define XCB ((int64_t)HP * XROW)                           /* floats per padded channel block */
#define WRS ((int64_t)B * B)                               /* floats per (r, s) of a weight block */
#define WKB ((int64_t)CBG * CONV_R * CONV_S * WRS)         /* floats per output-channel block */

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

INLINE int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

typedef struct conv_ctx {
  const float* in;       /* the current image, [CB][H][W][B] */
  const float* w;        /* [KB][CBG][R][S][B][B] */
  const float* bias;     /* [KB*B] (CONV_BIAS) */
  const float* residual; /* the current image, [KB][P][Q][B] (CONV_RESIDUAL) */
  float* out;            /* the current image, [KB][P][Q][B] */
  float* xp;       /* padded image, [CB][HP][WP][XL] (scratch) */
  const float* x;  /* what the tiles read: xp, or the input itself (IN_PLACE) */
} conv_ctx;

#if !IN_PLACE
/* Copies padded row hp of channel block cb (hp over CB*HP); zeros where there is no input
 * and in lanes past C. */
static void pad_row(int64_t t, void* p) {
  const conv_ctx* ctx = (const conv_ctx*)p;
  int64_t cb = t / HP, hp = t % HP, h = hp - CONV_PAD;
  float* dst = ctx->xp + cb * XCB + hp * XROW;
  int64_t lanes = min64(B, CONV_C - cb * B);
  for (int64_t x = 0; x < WP; ++x) {
    int64_t wx = x - CONV_PAD;
    if (h >= 0 && h < CONV_H && wx >= 0 && wx < CONV_W) {
#if CONV_PLAIN_IN
      /* Gathered from the C planes of a plain image (one block: cb = 0). */
      (void)lanes;
      const float* src = ctx->in + (int64_t)h * CONV_W + wx;
      for (int64_t l = 0; l < XL; ++l) dst[x * XL + l] = src[l * (int64_t)CONV_H * CONV_W];
#else
      const float* src = ctx->in + ((cb * CONV_H + h) * CONV_W + wx) * B;
      for (int64_t l = 0; l < XL; ++l) dst[x * XL + l] = l < lanes ? src[l] : 0.0f;
#endif
    } else {
      for (int64_t l = 0; l < XL; ++l) dst[x * XL + l] = 0.0f;
    }
  }
}
#endif

/* One register tile: output-channel blocks kb0..kb0+OK, row p, columns q0..q0+OW, input
 * channel blocks cb0..cb0+cn of their group; the first pass stores, later ones accumulate,
 * the last one applies the epilogue. */
INLINE void tile(const conv_ctx* ctx, int64_t kb0, int64_t cb0, int64_t cn, int64_t p, int64_t q0) {
  vf acc[CONV_OW][CONV_OK];
  UNROLL_FULL for (int q = 0; q < CONV_OW; ++q) {
    UNROLL_FULL for (int j = 0; j < CONV_OK; ++j) acc[q][j] = (vf){0};
  }
  const float* wbase = ctx->w + kb0 * WKB + cb0 * CONV_R * CONV_S * WRS;
  const int64_t group = kb0 / KBG;
  const float* xbase = ctx->x + (group * CBG + cb0) * XCB + p * CONV_STRIDE * XROW + q0 * CONV_STRIDE * XL;
/* The multiply-adds of input-channel block c over its `lanes` lanes (a constant). */
#define TAPS(lanes)                                                                                   \
  for (int r = 0; r < CONV_R; ++r) {                                                                  \
    for (int s = 0; s < CONV_S; ++s) {                                                                \
      const float* x = xbase + c * XCB + r * CONV_DILATION * XROW + s * CONV_DILATION * XL;           \
      const float* wv = wbase + ((c * CONV_R + r) * CONV_S + s) * WRS;                                \
      UNROLL_COUNT(CONV_UNROLL) for (int l = 0; l < (lanes); ++l) {                                  \
        vf wj[CONV_OK];                                                                               \
        UNROLL_FULL for (int j = 0; j < CONV_OK; ++j) VLOAD(wj[j], wv + j * WKB + l * B);             \
        UNROLL_FULL for (int q = 0; q < CONV_OW; ++q) {                                               \
          float xv = x[q * CONV_STRIDE * XL + l]; /* splat: one broadcast load */                    \
          UNROLL_FULL for (int j = 0; j < CONV_OK; ++j) acc[q][j] += xv * wj[j];                      \
        }                                                                                             \
      }                                                                                               \
    }                                                                                                 \
  }
  for (int64_t c = 0; c < cn; ++c) {
#if LAST_LANES != LANES
    if (cb0 + c == CB - 1) { /* the partial last block (no groups: C % B != 0) */
      TAPS(LAST_LANES)
      continue;
    }
#endif
    TAPS(LANES)
  }
#undef TAPS
  int accumulate = cb0 > 0;
#if CONV_BIAS || CONV_RESIDUAL || CONV_ACT != 0
  int last = cb0 + cn >= CBG;
#endif
  UNROLL_FULL for (int j = 0; j < CONV_OK; ++j) {
    int64_t kb = kb0 + j;
#if CONV_K % B != 0
    vi keep = (vi){0} - 1;
    if (kb == KB - 1) { /* lanes past K hold products of unused weights: zero them */
      UNROLL_FULL for (int l = 0; l < B; ++l) keep[l] = l < CONV_K % B ? -1 : 0;
    }
#endif
#if CONV_BIAS
    vf bias;
    VLOAD(bias, ctx->bias + kb * B);
#endif
    const int64_t at = (kb * P + p) * (int64_t)Q * B + q0 * B;
    float* o = ctx->out + at;
    UNROLL_FULL for (int q = 0; q < CONV_OW; ++q) {
      if (q0 + q < Q) {
        vf v = acc[q][j];
        if (accumulate) {
          vf old;
          VLOAD(old, o + q * B);
          v += old;
        }
#if CONV_BIAS || CONV_RESIDUAL || CONV_ACT != 0
        if (last) {
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
        }
#endif
#if CONV_K % B != 0
        v = (vf)((vi)v & keep);
#endif
        VSTORE(o + q * B, v);
      }
    }
  }
}

/* Groups [g0, g1) of OK output-channel blocks x row blocks [pb0, pb1) of the current image. */
static void run_blocks(const conv_ctx* ctx, int64_t g0, int64_t g1, int64_t pb0, int64_t pb1) {
  int64_t p1 = min64(pb1 * CONV_OH, P);
  for (int64_t g = g0; g < g1; ++g) {
    for (int64_t cb = 0; cb < CBG; cb += CONV_TC) {
      int64_t cn = min64(CONV_TC, CBG - cb);
      for (int64_t p = pb0 * CONV_OH; p < p1; ++p) {
        for (int64_t q0 = 0; q0 < Q; q0 += CONV_OW) tile(ctx, g * CONV_OK, cb, cn, p, q0);
      }
    }
  }
}

static void task(int64_t t, void* p) {
  const conv_ctx* ctx = (const conv_ctx*)p;
#if CONV_SPLIT == 0
  run_blocks(ctx, t, t + 1, 0, PB);
#elif CONV_SPLIT == 1
  run_blocks(ctx, 0, KG, t, t + 1);
#elif CONV_SPLIT == 2
  run_blocks(ctx, t / PB, t / PB + 1, t % PB, t % PB + 1);
#else
#error "conv2d_nchwc.c: CONV_SPLIT must be 0, 1 or 2"
#endif
}

KESTREL_KERNEL(svc, args, num_args) {
  enum { kBiasArg = 2, kResidualArg = 2 + CONV_BIAS, kOutArg = 2 + CONV_BIAS + CONV_RESIDUAL };
  if (num_args != kOutArg + 1) return 2;
  for (int i = 0; i < num_args; ++i) {
    if (!args[i].data) return 2;
  }
  if (args[0].i64 != (int64_t)CONV_N * IN_IMAGE || args[1].i64 != (int64_t)KB * WKB ||
      args[kOutArg].i64 != (int64_t)CONV_N * KB * P * Q * B ||
      (CONV_BIAS && args[kBiasArg].i64 != (int64_t)KB * B) ||
      (CONV_RESIDUAL && args[kResidualArg].i64 != args[kOutArg].i64)) {
    return 2;
  }
  conv_ctx ctx;
  ctx.w = (const float*)args[1].data;
  ctx.bias = CONV_BIAS ? (const float*)args[kBiasArg].data : 0;
#if IN_PLACE
  ctx.xp = 0;
#else
  ctx.xp = (float*)kestrel_alloc(svc, (size_t)CB * XCB * sizeof(float));
  if (!ctx.xp) return 1;
#endif
  for (int64_t n = 0; n < CONV_N; ++n) {
    ctx.in = (const float*)args[0].data + n * IN_IMAGE;
    ctx.out = (float*)args[kOutArg].data + n * (int64_t)KB * P * Q * B;
    ctx.residual = CONV_RESIDUAL ? (const float*)args[kResidualArg].data + n * (int64_t)KB * P * Q * B : 0;
#if IN_PLACE
    ctx.x = ctx.in;
#else
    ctx.x = ctx.xp;
    kestrel_parallel_for(svc, (int64_t)CB * HP, pad_row, &ctx);
#endif
#if CONV_SPLIT == 0
    kestrel_parallel_for(svc, KG, task, &ctx);
#elif CONV_SPLIT == 1
    kestrel_parallel_for(svc, PB, task, &ctx);
#else
    kestrel_parallel_for(svc, (int64_t)KG * PB, task, &ctx);
#endif
  }
#if !IN_PLACE
  kestrel_release(svc, ctx.xp);
#endif
  return 0;
}
