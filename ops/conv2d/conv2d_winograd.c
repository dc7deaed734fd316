/* conv2d_winograd.c: 3x3 convolution with stride 1, fp32, blocked-channel layout (NCHWc),
 * by Winograd's minimal filtering F(MxM, 3x3), M = 4 or 2, with the fused epilogue of
 * conv2d_nchwc.
 *   out[n][k/B][p][q][k%B] = act(sum_{c,r,s} in[n][c/B][p-PAD+r][q-PAD+s][c%B] * w(k, c, r, s)
 *                                + bias[k] + residual[n][k/B][p][q][k%B])
 *
 * The output is cut into MxM tiles, each computed from the (M+2)x(M+2) input patch under it:
 *   Y = A^T [ sum_c U(k, c) . V(c) ] A,  V(c) = B^T d(c) B,  U(k, c) = G g(k, c) G^T
 * with the interpolation points 0, 1, -1, 2, -2 and infinity (M = 4) or 0, 1, -1 and
 * infinity (M = 2). The weights come already transformed (the layouts winograd_weight and
 * winograd2_weight: the model runtime transforms them once when it packs them):
 * U[XI][K/B][C/B][B(c)][B(k)], one C x K matrix per position xi = (M+2)*i + j of the patch
 * (XI = 36 or 16). F(4x4): 36 multiplies per 16 outputs instead of 144 (4x fewer), weights
 * 4x the filter's size; F(2x2): 16 per 4 (2.25x fewer), weights 1.8x. Paid for with three
 * passes over memory (the input transform, the XI matrix products, the output transform).
 *
 * Freestanding C specialised entirely by #defines (see conv2d_winograd.cpp):
 *   workload  CONV_N CONV_C CONV_H CONV_W CONV_K CONV_PAD CONV_BLOCK, CONV_M (output tile:
 *             4 or 2; 4 when absent), CONV_BIAS CONV_RESIDUAL (0/1), CONV_ACT (0..9, KESTREL_ACT_* of kestrel/kernel/math.h); CONV_R,
 *             CONV_S (3), CONV_STRIDE, CONV_DILATION (1), CONV_GROUPS (1) are checked
 *   WINO_NT     tiles per chunk: a chunk's transformed input and products stay in cache
 *   WINO_MR     tiles per register tile (one broadcast each)
 *   WINO_NR     output-channel blocks per register tile (one weight vector each); divides K/B
 *   WINO_UNROLL unroll count of the loop over the B lanes of an input-channel block
 *   WINO_SPLIT  0 = a task per chunk runs all three passes (scratch per chunk), 1 = chunks
 *               one after another, each pass split over the threads
 *
 * Lanes past C in the input are never used (the input transform zeroes them, NaN
 * included); weight lanes past C and K must be finite; output lanes past K are written as 0.
 * Tensors: input [N][C/B][H][W][B], weight [XI][K/B][C/B][B][B], [bias [K/B*B]],
 * [residual (the output's shape)], output [N][K/B][P][Q][B]. Returns 0, 1 when scratch
 * memory runs out, 2 on bad arguments.
 */
#include "kestrel/kernel/abi.h"

#if !defined(CONV_N) || !defined(CONV_C) || !defined(CONV_H) || !defined(CONV_W) || !defined(CONV_K) ||        \
    !defined(CONV_PAD) || !defined(CONV_BLOCK) || !defined(WINO_NT) || !defined(WINO_MR) || !defined(WINO_NR) || \
    !defined(WINO_UNROLL) || !defined(WINO_SPLIT)
#error "conv2d_winograd.c needs CONV_{N,C,H,W,K,PAD,BLOCK} and WINO_{NT,MR,NR,UNROLL,SPLIT}"
#endif
#if (defined(CONV_R) && CONV_R != 3) || (defined(CONV_S) && CONV_S != 3) || (defined(CONV_STRIDE) && CONV_STRIDE != 1) || \
    (defined(CONV_DILATION) && CONV_DILATION != 1) || (defined(CONV_GROUPS) && CONV_GROUPS != 1)
#error "conv2d_winograd.c: only 3x3 filters, stride 1, no dilation, no groups"
#endif
#ifndef CONV_M
#define CONV_M 4
#endif
#if CONV_M != 4 && CONV_M != 2
#error "conv2d_winograd.c: CONV_M (the output tile) must be 4 or 2"
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
#if CONV_ACT != 0
#include "kestrel/kernel/math.h"
#endif

#define B CONV_BLOCK
#define P (CONV_H + 2 * CONV_PAD - 2)
#define Q (CONV_W + 2 * CONV_PAD - 2)
#if P < 1 || Q < 1
#error "conv2d_winograd.c: the output is empty (the 3x3 filter is larger than the padded input)"
#endif
#define CB ((CONV_C + B - 1) / B) /* input-channel blocks */
#define KB ((CONV_K + B - 1) / B) /* output-channel blocks */
#if KB % WINO_NR != 0
#error "conv2d_winograd.c: NR must divide the number of output-channel blocks"
#endif
#define M CONV_M                               /* output tile: M x M */
#define ALPHA (M + 2)                          /* input patch: ALPHA x ALPHA */
#define TP ((P + M - 1) / M)                   /* tile rows */
#define TQ ((Q + M - 1) / M)                   /* tile columns */
#define TILES (TP * TQ)                        /* tiles per image */
#define NT (WINO_NT < TILES ? WINO_NT : TILES) /* tiles per chunk */
#define CHUNKS ((TILES + NT - 1) / NT)         /* chunks per image */
#define NTR ((NT + WINO_MR - 1) / WINO_MR * WINO_MR) /* a chunk's tiles, rounded up to MR */
#define XI (ALPHA * ALPHA)                     /* positions of the patch */
#define VPOS ((int64_t)CB * NTR * B)           /* floats of one position's transformed input */
#define MPOS ((int64_t)KB * NTR * B)           /* floats of one position's products */
#define CHUNK_FLOATS ((int64_t)XI * (VPOS + MPOS))
#define UPOS ((int64_t)KB * CB * B * B)        /* floats of one position's weights */
#define IN_IMAGE ((int64_t)CB * CONV_H * CONV_W * B)
#define OUT_IMAGE ((int64_t)KB * P * Q * B)
#define LAST_LANES (CONV_C % B == 0 ? B : CONV_C % B)

#define KESTREL_PRAGMA(x) _Pragma(#x)
#define UNROLL_COUNT(n) KESTREL_PRAGMA(clang loop unroll_count(n))
#define UNROLL_FULL KESTREL_PRAGMA(clang loop unroll(full))
#define INLINE static inline __attribute__((always_inline))

typedef float vf __attribute__((vector_size(B * sizeof(float))));
typedef int32_t vi __attribute__((vector_size(B * sizeof(int32_t))));
#define VLOAD(v, p) __builtin_memcpy(&(v), (p), sizeof(vf))
#define VSTORE(p, v) __builtin_memcpy((p), &(v), sizeof(vf))

INLINE int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

typedef struct wino_ctx {
  const float* in;       /* the current image, [CB][H][W][B] */
  const float* u;        /* [XI][KB][CB][B][B] */
  const float* bias;     /* [KB*B] (CONV_BIAS) */
  const float* residual; /* the current image, [KB][P][Q][B] (CONV_RESIDUAL) */
  float* out;            /* the current image, [KB][P][Q][B] */
  float* scratch;        /* per chunk (WINO_SPLIT 0) or one chunk's: V [XI][CB][NTR][B], M [XI][KB][NTR][B] */
  int64_t chunk;         /* WINO_SPLIT 1: the chunk being computed */
} wino_ctx;

INLINE float* chunk_v(const wino_ctx* ctx, int64_t chunk) {
  return ctx->scratch + (WINO_SPLIT == 0 ? chunk : 0) * CHUNK_FLOATS;
}
INLINE float* chunk_m(const wino_ctx* ctx, int64_t chunk) { return chunk_v(ctx, chunk) + XI * VPOS; }

#if M == 4
/* B^T x for the six vectors x[0], x[s], ..., x[5s] (one row or column of a patch). */
#define BT_APPLY(o, x, s)                                          \
  do {                                                             \
    vf x0 = (x)[0], x1 = (x)[s], x2 = (x)[2 * (s)], x3 = (x)[3 * (s)]; \
    vf x4 = (x)[4 * (s)], x5 = (x)[5 * (s)];                       \
    (o)[0] = 4.0f * x0 - 5.0f * x2 + x4;                           \
    (o)[s] = x3 + x4 - 4.0f * (x1 + x2);                           \
    (o)[2 * (s)] = 4.0f * (x1 - x2) + x4 - x3;                     \
    (o)[3 * (s)] = 2.0f * (x3 - x1) + x4 - x2;                     \
    (o)[4 * (s)] = 2.0f * (x1 - x3) + x4 - x2;                     \
    (o)[5 * (s)] = 4.0f * x1 - 5.0f * x3 + x5;                     \
  } while (0)
#else
/* B^T x for the four vectors x[0], x[s], x[2s], x[3s]. */
#define BT_APPLY(o, x, s)                                              \
  do {                                                                 \
    vf x0 = (x)[0], x1 = (x)[s], x2 = (x)[2 * (s)], x3 = (x)[3 * (s)]; \
    (o)[0] = x0 - x2;                                                  \
    (o)[s] = x1 + x2;                                                  \
    (o)[2 * (s)] = x2 - x1;                                            \
    (o)[3 * (s)] = x1 - x3;                                            \
  } while (0)
#endif

/* Input transform of tiles [t0, t1) of a chunk (tile indices within the image: first + i),
 * channel blocks [cb0, cb1): V[xi][cb][i][lanes] = (B^T d B)[xi]. The tiles of the chunk's
 * rounding to MR transform zeros. */
static void transform_input(const wino_ctx* ctx, float* v, int64_t first, int64_t i0, int64_t i1, int64_t cb0,
                            int64_t cb1) {
  for (int64_t cb = cb0; cb < cb1; ++cb) {
#if CONV_C % B != 0
    vi keep = (vi){0} - 1;
    if (cb == CB - 1) {
      UNROLL_FULL for (int l = 0; l < B; ++l) keep[l] = l < LAST_LANES ? -1 : 0;
    }
#endif
    const float* plane = ctx->in + cb * (int64_t)CONV_H * CONV_W * B;
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t t = first + i;
      vf d[XI];
      if (i >= NT || t >= TILES) { /* past the chunk or the image */
        UNROLL_FULL for (int e = 0; e < XI; ++e) d[e] = (vf){0};
      } else {
        const int64_t h0 = (t / TQ) * M - CONV_PAD, x0 = (t % TQ) * M - CONV_PAD;
        if (h0 >= 0 && x0 >= 0 && h0 + ALPHA <= CONV_H && x0 + ALPHA <= CONV_W) {
          UNROLL_FULL for (int r = 0; r < ALPHA; ++r) {
            const float* row = plane + ((h0 + r) * (int64_t)CONV_W + x0) * B;
            UNROLL_FULL for (int s = 0; s < ALPHA; ++s) VLOAD(d[r * ALPHA + s], row + s * B);
          }
        } else {
          UNROLL_FULL for (int r = 0; r < ALPHA; ++r) {
            UNROLL_FULL for (int s = 0; s < ALPHA; ++s) {
              const int64_t h = h0 + r, x = x0 + s;
              if (h >= 0 && h < CONV_H && x >= 0 && x < CONV_W) {
                VLOAD(d[r * ALPHA + s], plane + (h * (int64_t)CONV_W + x) * B);
              } else {
                d[r * ALPHA + s] = (vf){0};
              }
            }
          }
        }
#if CONV_C % B != 0
        UNROLL_FULL for (int e = 0; e < XI; ++e) d[e] = (vf)((vi)d[e] & keep);
#endif
      }
      vf tmp[XI];
      UNROLL_FULL for (int s = 0; s < ALPHA; ++s) BT_APPLY(tmp + s, d + s, ALPHA);  /* columns: B^T d */
      UNROLL_FULL for (int r = 0; r < ALPHA; ++r) BT_APPLY(d + r * ALPHA, tmp + r * ALPHA, 1); /* rows: (B^T d) B */
      UNROLL_FULL for (int e = 0; e < XI; ++e) VSTORE(v + (e * VPOS) + (cb * NTR + i) * B, d[e]);
    }
  }
}

/* Products of position xi for output-channel blocks [kb0, kb0+NR) and tiles [i0, i0+MR)
 * of a chunk: M[xi][kb][i] = sum_c V[xi][c][i] * U[xi][kb][c]. */
INLINE void product_tile(const wino_ctx* ctx, const float* v, float* m, int64_t xi, int64_t kb0, int64_t i0) {
  vf acc[WINO_MR][WINO_NR];
  UNROLL_FULL for (int i = 0; i < WINO_MR; ++i) {
    UNROLL_FULL for (int j = 0; j < WINO_NR; ++j) acc[i][j] = (vf){0};
  }
  const float* ub = ctx->u + xi * UPOS + kb0 * (int64_t)CB * B * B;
  const float* vb = v + xi * VPOS + i0 * B;
  for (int64_t cb = 0; cb < CB; ++cb) {
    const float* uc = ub + cb * (int64_t)B * B;
    const float* vc = vb + cb * (int64_t)NTR * B;
    UNROLL_COUNT(WINO_UNROLL) for (int l = 0; l < B; ++l) {
      vf w[WINO_NR];
      UNROLL_FULL for (int j = 0; j < WINO_NR; ++j) VLOAD(w[j], uc + j * (int64_t)CB * B * B + l * B);
      UNROLL_FULL for (int i = 0; i < WINO_MR; ++i) {
        float x = vc[i * B + l];
        UNROLL_FULL for (int j = 0; j < WINO_NR; ++j) acc[i][j] += x * w[j];
      }
    }
  }
  UNROLL_FULL for (int j = 0; j < WINO_NR; ++j) {
    float* mo = m + xi * MPOS + ((kb0 + j) * NTR + i0) * B;
    UNROLL_FULL for (int i = 0; i < WINO_MR; ++i) VSTORE(mo + i * B, acc[i][j]);
  }
}

/* The first `count` tiles of a chunk (rounded up to MR) for position xi and the NR blocks
 * from kb0. */
static void products(const wino_ctx* ctx, const float* v, float* m, int64_t count, int64_t xi, int64_t kb0) {
  for (int64_t i0 = 0; i0 < count; i0 += WINO_MR) product_tile(ctx, v, m, xi, kb0, i0);
}

/* Tiles of chunk c, and their count rounded up to MR (the last chunk may be short). */
INLINE int64_t chunk_tiles(int64_t c) { return min64(NT, TILES - c * NT); }
INLINE int64_t rounded(int64_t count) { return (count + WINO_MR - 1) / WINO_MR * WINO_MR; }

#if M == 4
/* A^T x for six vectors x[0], x[s], ..., x[5s] into four o[0], o[so], ... */
#define AT_APPLY(o, so, x, s)                                              \
  do {                                                                     \
    vf x0 = (x)[0], x1 = (x)[s], x2 = (x)[2 * (s)], x3 = (x)[3 * (s)];     \
    vf x4 = (x)[4 * (s)], x5 = (x)[5 * (s)];                               \
    vf a = x1 + x2, b = x1 - x2, c = x3 + x4, e = x3 - x4;                 \
    (o)[0] = x0 + a + c;                                                   \
    (o)[so] = b + 2.0f * e;                                                \
    (o)[2 * (so)] = a + 4.0f * c;                                          \
    (o)[3 * (so)] = b + 8.0f * e + x5;                                     \
  } while (0)
#else
/* A^T x for four vectors x[0], x[s], x[2s], x[3s] into two o[0], o[so]. */
#define AT_APPLY(o, so, x, s)                                          \
  do {                                                                 \
    vf x0 = (x)[0], x1 = (x)[s], x2 = (x)[2 * (s)], x3 = (x)[3 * (s)]; \
    (o)[0] = x0 + x1 + x2;                                             \
    (o)[so] = x1 - x2 - x3;                                            \
  } while (0)
#endif

/* Output transform of tiles [i0, i1) of a chunk for blocks [kb0, kb1), with the epilogue. */
static void transform_output(const wino_ctx* ctx, const float* m, int64_t first, int64_t i0, int64_t i1, int64_t kb0,
                             int64_t kb1) {
  for (int64_t kb = kb0; kb < kb1; ++kb) {
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
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t t = first + i;
      if (t >= TILES) break;
      vf x[XI], tmp[M * ALPHA], y[M * M];
      UNROLL_FULL for (int e = 0; e < XI; ++e) VLOAD(x[e], m + e * MPOS + (kb * NTR + i) * B);
      UNROLL_FULL for (int s = 0; s < ALPHA; ++s) AT_APPLY(tmp + s, ALPHA, x + s, ALPHA); /* A^T M: M rows */
      UNROLL_FULL for (int r = 0; r < M; ++r) AT_APPLY(y + r * M, 1, tmp + r * ALPHA, 1); /* (A^T M) A */
      const int64_t p0 = (t / TQ) * M, q0 = (t % TQ) * M;
      const int64_t at = (kb * (int64_t)P + p0) * Q * B + q0 * B;
      UNROLL_FULL for (int r = 0; r < M; ++r) {
        if (p0 + r >= P) break;
        UNROLL_FULL for (int s = 0; s < M; ++s) {
          if (q0 + s >= Q) break;
          const int64_t o = at + ((int64_t)r * Q + s) * B;
          vf val = y[r * M + s];
#if CONV_BIAS
          val += bias;
#endif
#if CONV_RESIDUAL
          vf res;
          VLOAD(res, ctx->residual + o);
          val += res;
#endif
#if CONV_ACT != 0
          val = kestrel_activate(val, CONV_ACT);
#endif
#if CONV_K % B != 0
          val = (vf)((vi)val & keep);
#endif
          VSTORE(ctx->out + o, val);
        }
      }
    }
  }
}

#if WINO_SPLIT == 0
/* A whole chunk: its three passes, in its own scratch. */
static void chunk_task(int64_t c, void* p) {
  const wino_ctx* ctx = (const wino_ctx*)p;
  float* v = chunk_v(ctx, c);
  float* m = chunk_m(ctx, c);
  const int64_t first = c * NT, count = chunk_tiles(c);
  transform_input(ctx, v, first, 0, rounded(count), 0, CB);
  for (int64_t xi = 0; xi < XI; ++xi) {
    for (int64_t kb = 0; kb < KB; kb += WINO_NR) products(ctx, v, m, rounded(count), xi, kb);
  }
  transform_output(ctx, m, first, 0, count, 0, KB);
}
#elif WINO_SPLIT == 1
/* One chunk, pass by pass: channel blocks, then (position, block group), then blocks. */
static void input_task(int64_t cb, void* p) {
  const wino_ctx* ctx = (const wino_ctx*)p;
  transform_input(ctx, chunk_v(ctx, 0), ctx->chunk * NT, 0, rounded(chunk_tiles(ctx->chunk)), cb, cb + 1);
}
static void product_task(int64_t t, void* p) {
  const wino_ctx* ctx = (const wino_ctx*)p;
  products(ctx, chunk_v(ctx, 0), chunk_m(ctx, 0), rounded(chunk_tiles(ctx->chunk)), t % XI, (t / XI) * WINO_NR);
}
static void output_task(int64_t kb, void* p) {
  const wino_ctx* ctx = (const wino_ctx*)p;
  transform_output(ctx, chunk_m(ctx, 0), ctx->chunk * NT, 0, chunk_tiles(ctx->chunk), kb, kb + 1);
}
#else
#error "conv2d_winograd.c: WINO_SPLIT must be 0 or 1"
#endif

KESTREL_KERNEL(svc, args, num_args) {
  enum { kBiasArg = 2, kResidualArg = 2 + CONV_BIAS, kOutArg = 2 + CONV_BIAS + CONV_RESIDUAL };
  if (num_args != kOutArg + 1) return 2;
  for (int i = 0; i < num_args; ++i) {
    if (!args[i].data) return 2;
  }
  if (args[0].i64 != (int64_t)CONV_N * IN_IMAGE || args[1].i64 != (int64_t)XI * UPOS ||
      args[kOutArg].i64 != (int64_t)CONV_N * OUT_IMAGE || (CONV_BIAS && args[kBiasArg].i64 != (int64_t)KB * B) ||
      (CONV_RESIDUAL && args[kResidualArg].i64 != args[kOutArg].i64)) {
    return 2;
  }
  wino_ctx ctx;
  ctx.u = (const float*)args[1].data;
  ctx.bias = CONV_BIAS ? (const float*)args[kBiasArg].data : 0;
  ctx.scratch = (float*)kestrel_alloc(svc, (size_t)(WINO_SPLIT == 0 ? CHUNKS : 1) * CHUNK_FLOATS * sizeof(float));
  if (!ctx.scratch) return 1;
  for (int64_t n = 0; n < CONV_N; ++n) {
    ctx.in = (const float*)args[0].data + n * IN_IMAGE;
    ctx.out = (float*)args[kOutArg].data + n * OUT_IMAGE;
    ctx.residual = CONV_RESIDUAL ? (const float*)args[kResidualArg].data + n * OUT_IMAGE : 0;
#if WINO_SPLIT == 0
    kestrel_parallel_for(svc, CHUNKS, chunk_task, &ctx);
#else
    for (int64_t c = 0; c < CHUNKS; ++c) {
      ctx.chunk = c;
      kestrel_parallel_for(svc, CB, input_task, &ctx);
      kestrel_parallel_for(svc, (int64_t)XI * (KB / WINO_NR), product_task, &ctx);
      kestrel_parallel_for(svc, KB, output_task, &ctx);
    }
#endif
  }
  kestrel_release(svc, ctx.scratch);
  return 0;
}
