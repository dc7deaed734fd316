/* gemm.c: C[M][N] = A[M][K] * B[K][N], fp32, row-major, for the CPU backend.
 *
 * Freestanding C specialised entirely by #defines (see gemm.cpp, GemmOp::source):
 *   workload  GEMM_M GEMM_N GEMM_K
 *   cache     GEMM_MC GEMM_NC GEMM_KC   (blocks of A: MC x KC, of B: KC x NC)
 *   register  GEMM_MR GEMM_NR GEMM_VEC  (micro-tile MR x NR, NR/VEC vectors per row)
 *   GEMM_UNROLL   unroll count of the micro-kernel's k loop
 *   GEMM_ORDER    cache-block loop nest: 0 = jc,pc,ic  1 = ic,pc,jc  2 = jc,ic,pc
 *   GEMM_PACK_A   1: pack each MC x KC block of A into MR-row panels in scratch;
 *                 0: broadcast from A in place (only edge panels shorter than MR are copied)
 *   GEMM_PACK_B   1: pack each KC x NC block of B into NR-wide panels in scratch;
 *                 0: read B in place (only edge panels narrower than NR are copied)
 *   GEMM_PANELS   (workload, optional) NR: B arrives packed, as NR-wide column panels
 *                 B[ceil(N/NR)][K][NR] with the columns past N zero (a model's weights,
 *                 packed once when it is loaded); the kernel reads the panels where they
 *                 lie and packs nothing (PACK_B is then 1, for what the blocks are)
 *   GEMM_SPLIT    parallel_for tasks: 0 = one per MC block of rows, 1 = one per NC block
 *                 of columns, 2 = one per (MC, NC) block pair (each task packs the B
 *                 blocks it uses itself); 3 = B shared: per (NC, KC) block of B the
 *                 threads pack its panels together once, then take one MC block of rows
 *                 each (the loop nest is jc,pc,ic, whatever GEMM_ORDER says)
 *   epilogue (optional, 0 when absent) GEMM_BIAS: add bias[N] per column; GEMM_RESIDUAL:
 *                 add residual[M][N]; GEMM_ACT: then apply activation KESTREL_ACT_* (0
 *                 none, 1 relu, ... 8 tanh: kestrel/kernel/math.h). C = act(A*B + bias + residual),
 *                 applied in the micro-kernel's store path of the last k block only, so
 *                 once per element after the full reduction. Arguments: A, B, [bias],
 *                 [residual], C.
 *
 * Structure (Goto/BLIS): A blocks are packed into MR-row panels (k-major, rows padded
 * with zeros), B into NR-column panels; the micro-kernel keeps an MR x NR tile of C in
 * vector registers (vector-extension variables, which clang keeps in registers where
 * plain scalar arrays were seen to spill), broadcasts one float of A per row and streams
 * the panels. The micro-tile must fit the target's register file: MR * NR/VEC
 * accumulators, NR/VEC vectors of B and one broadcast; a configuration that does not
 * fit fails to compile with a message (below) rather than running at a fraction of its
 * speed. Edge tiles are computed in full on the zero
 * padding and stored through a separate path, so any shape works with any valid
 * configuration. Every element of C is written (the first k block stores, later ones
 * accumulate). Returns 0, 1 when scratch memory runs out, 2 on bad arguments.
 */
#include "kestrel/kernel/abi.h"
#include "kestrel/kernel/math.h"

#if !defined(GEMM_M) || !defined(GEMM_N) || !defined(GEMM_K) || !defined(GEMM_MC) || !defined(GEMM_NC) || \
    !defined(GEMM_KC) || !defined(GEMM_MR) || !defined(GEMM_NR) || !defined(GEMM_VEC) ||                 \
    !defined(GEMM_UNROLL) || !defined(GEMM_ORDER) || !defined(GEMM_PACK_A) || !defined(GEMM_PACK_B) ||      \
    !defined(GEMM_SPLIT)
#error "gemm.c needs GEMM_{M,N,K,MC,NC,KC,MR,NR,VEC,UNROLL,ORDER,PACK_A,PACK_B,SPLIT}"
#endif
#ifndef GEMM_BIAS
#define GEMM_BIAS 0
#endif
#ifndef GEMM_RESIDUAL
#define GEMM_RESIDUAL 0
#endif
#ifndef GEMM_ACT
#define GEMM_ACT 0
#endif
#ifndef GEMM_PANELS
#define GEMM_PANELS 0
#endif
#define HAS_EPILOGUE (GEMM_BIAS || GEMM_RESIDUAL || GEMM_ACT)
#if GEMM_PANELS && (GEMM_PANELS != GEMM_NR || !GEMM_PACK_B)
#error "gemm.c: B in panels (GEMM_PANELS) needs NR equal to the panel width and PACK_B=1"
#endif
/* B's size: K x N, or whole panels. */
#define B_FLOATS (GEMM_PANELS ? (int64_t)(GEMM_N + GEMM_NR - 1) / GEMM_NR * GEMM_NR * GEMM_K : (int64_t)GEMM_K * GEMM_N)
/* Packing B into scratch: PACK_B without the panels already made. */
#define PACKS_B (GEMM_PACK_B && !GEMM_PANELS)
#if GEMM_NR % GEMM_VEC != 0 || GEMM_MC % GEMM_MR != 0 || GEMM_NC % GEMM_NR != 0
#error "gemm.c: NR must be a multiple of VEC, MC of MR, NC of NR"
#endif

#define NV (GEMM_NR / GEMM_VEC) /* vectors per micro-tile row */

/* The target's vector register file, from the compiler's predefined macros: floats per
 * register and register count. When VEC is the register width, a micro-tile that does not
 * fit is refused here (the op's own check only knows the largest register files). Wider
 * vectors are split by the compiler into several registers and are not checked. */
#if defined(__AVX512F__)
#define REG_FLOATS 16
#define REG_COUNT 32
#elif defined(__AVX__)
#define REG_FLOATS 8
#define REG_COUNT 16
#elif defined(__x86_64__) || (defined(__ARM_NEON) && !defined(__aarch64__))
#define REG_FLOATS 4 /* SSE: 16 xmm; ARMv7 NEON: 16 q */
#define REG_COUNT 16
#elif defined(__aarch64__)
#define REG_FLOATS 4 /* 32 NEON q registers */
#define REG_COUNT 32
#else
#define REG_FLOATS 1 /* scalar floating-point registers (e.g. RISC-V without V) */
#define REG_COUNT 32
#endif
#if GEMM_VEC == REG_FLOATS && GEMM_MR * NV + NV + 1 > REG_COUNT
#error "gemm.c: the micro-tile MR x NR needs more vector registers than this target has (MR*NR/VEC accumulators + NR/VEC vectors of B + 1 broadcast)"
#endif
#define MB ((GEMM_M + GEMM_MC - 1) / GEMM_MC)
#define NB ((GEMM_N + GEMM_NC - 1) / GEMM_NC)
/* The largest blocks actually used, rounded up to whole panels. */
#define MC_EFF (GEMM_MC < GEMM_M ? GEMM_MC : GEMM_M)
#define NC_EFF (GEMM_NC < GEMM_N ? GEMM_NC : GEMM_N)
#define KC_EFF (GEMM_KC < GEMM_K ? GEMM_KC : GEMM_K)
#define MC_PAD ((MC_EFF + GEMM_MR - 1) / GEMM_MR * GEMM_MR)
#define NC_PAD ((NC_EFF + GEMM_NR - 1) / GEMM_NR * GEMM_NR)

#define KESTREL_PRAGMA(x) _Pragma(#x)
#define UNROLL_COUNT(n) KESTREL_PRAGMA(clang loop unroll_count(n))
#define UNROLL_FULL KESTREL_PRAGMA(clang loop unroll(full))
#define INLINE static inline __attribute__((always_inline))

typedef float vf __attribute__((vector_size(GEMM_VEC * sizeof(float))));

/* Unaligned vector loads and stores (macros: functions taking or returning vectors wider
 * than the target's registers trip -Wpsabi). */
#define VLOAD(v, p) __builtin_memcpy(&(v), (p), sizeof(vf))
#define VSTORE(p, v) __builtin_memcpy((p), &(v), sizeof(vf))
INLINE int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
/* Row `row` below the residual element at p (p itself, null, without GEMM_RESIDUAL). */
#if GEMM_RESIDUAL
#define RES_AT(p, row) ((p) + (row) * GEMM_N)
#else
#define RES_AT(p, row) (p)
#endif

/* Packs A[row.., pc..] (rows x kc, rows <= MR) into one MR-row panel: panel[k][i], zero
 * rows past `rows`. */
INLINE void pack_a_panel(float* restrict panel, const float* restrict a, int64_t row, int64_t rows, int64_t pc,
                         int64_t kc) {
  for (int64_t i = 0; i < GEMM_MR; ++i) {
    if (i < rows) {
      const float* src = a + (row + i) * GEMM_K + pc;
      for (int64_t k = 0; k < kc; ++k) panel[k * GEMM_MR + i] = src[k];
    } else {
      for (int64_t k = 0; k < kc; ++k) panel[k * GEMM_MR + i] = 0.0f;
    }
  }
}

/* Packs A[ic.., pc..] (mc x kc) into MR-row panels: ap[panel][k][i] (PACK_A), or only its
 * last panel when it is shorter than MR (in-place A), at ap. */
static void pack_a(float* restrict ap, const float* restrict a, int64_t ic, int64_t pc, int64_t mc, int64_t kc) {
#if GEMM_PACK_A
  for (int64_t ir = 0; ir < mc; ir += GEMM_MR) pack_a_panel(ap + ir * kc, a, ic + ir, min64(GEMM_MR, mc - ir), pc, kc);
#else
  if (mc % GEMM_MR != 0) pack_a_panel(ap, a, ic + mc / GEMM_MR * GEMM_MR, mc % GEMM_MR, pc, kc);
#endif
}

#if !GEMM_PANELS
/* Packs B[pc.., jc + j0 ..] (kc x width, width <= NR) into one NR-wide panel, zero
 * columns past width. */
INLINE void pack_b_panel(float* restrict bp, const float* restrict b, int64_t pc, int64_t col, int64_t width,
                         int64_t kc) {
  for (int64_t k = 0; k < kc; ++k) {
    const float* row = b + (pc + k) * GEMM_N + col;
    float* out = bp + k * GEMM_NR;
    if (width == GEMM_NR) {
      for (int64_t j = 0; j < GEMM_NR; ++j) out[j] = row[j];
    } else {
      for (int64_t j = 0; j < GEMM_NR; ++j) out[j] = j < width ? row[j] : 0.0f;
    }
  }
}
#endif

#if PACKS_B && GEMM_SPLIT != 3
static void pack_b(float* restrict bp, const float* restrict b, int64_t pc, int64_t jc, int64_t nc, int64_t kc) {
  for (int64_t jr = 0; jr < nc; jr += GEMM_NR) pack_b_panel(bp + jr * kc, b, pc, jc + jr, min64(GEMM_NR, nc - jr), kc);
}
#endif

/* c[0..mr)[0..nr) (+)= sum over k < kc of a[i * ars + k * aks] * b[k * ldb + j]: a packed
 * panel (ars = 1, aks = MR) or A in place (ars = K, aks = 1). On the last k block (`last`)
 * the epilogue follows: c = act(c + bias[j] + res[i * N + j]) (bias and res point at the
 * tile's first column / element; unused without GEMM_BIAS / GEMM_RESIDUAL). */
INLINE void micro_kernel(int64_t kc, const float* restrict a, int64_t ars, int64_t aks, const float* restrict b,
                         int64_t ldb, float* restrict c, const float* restrict bias, const float* restrict res,
                         int last, int64_t mr, int64_t nr, int accumulate) {
#if !HAS_EPILOGUE
  (void)last;
#endif
#if !GEMM_BIAS
  (void)bias;
#endif
#if !GEMM_RESIDUAL
  (void)res;
#endif
  vf acc[GEMM_MR][NV];
  UNROLL_FULL for (int i = 0; i < GEMM_MR; ++i) {
    UNROLL_FULL for (int j = 0; j < NV; ++j) acc[i][j] = (vf){0};
  }
  UNROLL_COUNT(GEMM_UNROLL) for (int64_t k = 0; k < kc; ++k) {
    vf bv[NV];
    UNROLL_FULL for (int j = 0; j < NV; ++j) VLOAD(bv[j], b + k * ldb + j * GEMM_VEC);
    UNROLL_FULL for (int i = 0; i < GEMM_MR; ++i) {
      float av = a[i * ars + k * aks]; /* splat by the vector extension: one broadcast load */
      UNROLL_FULL for (int j = 0; j < NV; ++j) acc[i][j] += av * bv[j];
    }
  }
  if (mr == GEMM_MR && nr == GEMM_NR) {
    UNROLL_FULL for (int i = 0; i < GEMM_MR; ++i) {
      UNROLL_FULL for (int j = 0; j < NV; ++j) {
        float* p = c + i * GEMM_N + j * GEMM_VEC;
        if (accumulate) {
          vf old;
          VLOAD(old, p);
          acc[i][j] += old;
        }
#if HAS_EPILOGUE
        if (last) {
#if GEMM_BIAS
          vf bv;
          VLOAD(bv, bias + j * GEMM_VEC);
          acc[i][j] += bv;
#endif
#if GEMM_RESIDUAL
          vf rv;
          VLOAD(rv, res + i * GEMM_N + j * GEMM_VEC);
          acc[i][j] += rv;
#endif
          acc[i][j] = kestrel_activate(acc[i][j], GEMM_ACT);
        }
#endif
        VSTORE(p, acc[i][j]);
      }
    }
  } else {
    for (int64_t i = 0; i < mr; ++i) {
      float tile[GEMM_NR];
      UNROLL_FULL for (int j = 0; j < NV; ++j) VSTORE(tile + j * GEMM_VEC, acc[i][j]);
      float* p = c + i * GEMM_N;
      if (accumulate) {
        for (int64_t j = 0; j < nr; ++j) p[j] += tile[j];
      } else {
        for (int64_t j = 0; j < nr; ++j) p[j] = tile[j];
      }
#if HAS_EPILOGUE
      if (last) {
        for (int64_t j = 0; j < nr; ++j) {
          float v = p[j];
#if GEMM_BIAS
          v += bias[j];
#endif
#if GEMM_RESIDUAL
          v += res[i * GEMM_N + j];
#endif
          p[j] = kestrel_activate(v, GEMM_ACT);
        }
      }
#endif
    }
  }
}

/* The micro-kernel down one B panel (kc x NR at b, row stride ldb) for every MR-row panel
 * of the block's rows: C[ic.., jc + jr..] at crow; the epilogue's bias and residual at
 * bias_col and res_row (the same column, and element, as crow; null without them). */
INLINE void row_panels(const float* restrict ap, const float* restrict a, const float* restrict b, int64_t ldb,
                       float* restrict crow, const float* restrict bias_col, const float* restrict res_row, int64_t ic,
                       int64_t pc, int64_t mc, int64_t kc, int64_t nr) {
  const int last = pc + kc >= GEMM_K;
#if GEMM_PACK_A
  (void)a;
  (void)ic;
  for (int64_t ir = 0; ir < mc; ir += GEMM_MR) {
    micro_kernel(kc, ap + ir * kc, 1, GEMM_MR, b, ldb, crow + ir * GEMM_N, bias_col, RES_AT(res_row, ir), last,
                 min64(GEMM_MR, mc - ir), nr, pc > 0);
  }
#else
  int64_t full = mc / GEMM_MR * GEMM_MR;
  for (int64_t ir = 0; ir < full; ir += GEMM_MR) {
    micro_kernel(kc, a + (ic + ir) * GEMM_K + pc, GEMM_K, 1, b, ldb, crow + ir * GEMM_N, bias_col,
                 RES_AT(res_row, ir), last, GEMM_MR, nr, pc > 0);
  }
  if (full < mc) micro_kernel(kc, ap, 1, GEMM_MR, b, ldb, crow + full * GEMM_N, bias_col, RES_AT(res_row, full), last,
                              mc - full, nr, pc > 0);
#endif
}

/* One cache block: C[ic.., jc..] (+)= A block * B block. ap is the packed A block (or its
 * short edge panel), bp the packed B block (PACK_B) or an NR-wide edge panel buffer. */
static void macro_kernel(const float* restrict ap, float* restrict bp, const float* restrict a,
                         const float* restrict b, float* restrict c, const float* restrict bias,
                         const float* restrict res, int64_t ic, int64_t jc, int64_t pc, int64_t mc, int64_t nc,
                         int64_t kc) {
#if PACKS_B
  (void)b;
#endif
#if GEMM_PANELS
  (void)bp;
#endif
  for (int64_t jr = 0; jr < nc; jr += GEMM_NR) {
    int64_t nr = min64(GEMM_NR, nc - jr);
    float* crow = c + ic * GEMM_N + jc + jr;
    const float* bias_col = GEMM_BIAS ? bias + jc + jr : 0;
    const float* res_row = GEMM_RESIDUAL ? res + ic * GEMM_N + jc + jr : 0;
#if GEMM_PANELS
    /* Panel (jc + jr) / NR from row pc: NC is a multiple of NR, so jc + jr starts a panel. */
    row_panels(ap, a, b + (jc + jr) / GEMM_NR * GEMM_NR * GEMM_K + pc * GEMM_NR, GEMM_NR, crow, bias_col, res_row,
               ic, pc, mc, kc, nr);
#elif GEMM_PACK_B
    row_panels(ap, a, bp + jr * kc, GEMM_NR, crow, bias_col, res_row, ic, pc, mc, kc, nr);
#else
    if (nr == GEMM_NR) {
      row_panels(ap, a, b + pc * GEMM_N + jc + jr, GEMM_N, crow, bias_col, res_row, ic, pc, mc, kc, nr);
    } else {
      pack_b_panel(bp, b, pc, jc + jr, nr, kc);
      row_panels(ap, a, bp, GEMM_NR, crow, bias_col, res_row, ic, pc, mc, kc, nr);
    }
#endif
  }
}

typedef struct gemm_ctx {
  const kestrel_services* svc;
  const float* a;
  const float* b;
  float* c;
  const float* bias; /* [N], null without GEMM_BIAS */
  const float* res;  /* [M][N], null without GEMM_RESIDUAL */
  int failed;
} gemm_ctx;

#if GEMM_SPLIT != 3
/* Computes the C blocks [mb0, mb1) x [nb0, nb1) over the whole K range. */
static void run_blocks(gemm_ctx* ctx, int64_t mb0, int64_t mb1, int64_t nb0, int64_t nb1) {
  float* ap = (float*)kestrel_alloc(ctx->svc, (size_t)(GEMM_PACK_A ? MC_PAD : GEMM_MR) * KC_EFF * sizeof(float));
  /* B in panels needs no buffer of B. */
  float* bp = GEMM_PANELS ? 0 : (float*)kestrel_alloc(ctx->svc, (size_t)(GEMM_PACK_B ? NC_PAD : GEMM_NR) * KC_EFF * sizeof(float));
  if (!ap || (!GEMM_PANELS && !bp)) {
    __atomic_store_n(&ctx->failed, 1, __ATOMIC_RELAXED);
  } else {
    const float* a = ctx->a;
    const float* b = ctx->b;
    float* c = ctx->c;
    const float* bias = ctx->bias;
    const float* res = ctx->res;
#define MC_OF(ic) min64(GEMM_MC, GEMM_M - (ic))
#define NC_OF(jc) min64(GEMM_NC, GEMM_N - (jc))
#define KC_OF(pc) min64(GEMM_KC, GEMM_K - (pc))
#if PACKS_B
#define PACK_B_BLOCK(pc, jc) pack_b(bp, b, pc, jc, NC_OF(jc), KC_OF(pc))
#else
#define PACK_B_BLOCK(pc, jc) ((void)0)
#endif
#if GEMM_ORDER == 0
    for (int64_t jc = nb0 * GEMM_NC; jc < nb1 * GEMM_NC && jc < GEMM_N; jc += GEMM_NC) {
      for (int64_t pc = 0; pc < GEMM_K; pc += GEMM_KC) {
        PACK_B_BLOCK(pc, jc);
        for (int64_t ic = mb0 * GEMM_MC; ic < mb1 * GEMM_MC && ic < GEMM_M; ic += GEMM_MC) {
          pack_a(ap, a, ic, pc, MC_OF(ic), KC_OF(pc));
          macro_kernel(ap, bp, a, b, c, bias, res, ic, jc, pc, MC_OF(ic), NC_OF(jc), KC_OF(pc));
        }
      }
    }
#elif GEMM_ORDER == 1
    for (int64_t ic = mb0 * GEMM_MC; ic < mb1 * GEMM_MC && ic < GEMM_M; ic += GEMM_MC) {
      for (int64_t pc = 0; pc < GEMM_K; pc += GEMM_KC) {
        pack_a(ap, a, ic, pc, MC_OF(ic), KC_OF(pc));
        for (int64_t jc = nb0 * GEMM_NC; jc < nb1 * GEMM_NC && jc < GEMM_N; jc += GEMM_NC) {
          PACK_B_BLOCK(pc, jc);
          macro_kernel(ap, bp, a, b, c, bias, res, ic, jc, pc, MC_OF(ic), NC_OF(jc), KC_OF(pc));
        }
      }
    }
#elif GEMM_ORDER == 2
    for (int64_t jc = nb0 * GEMM_NC; jc < nb1 * GEMM_NC && jc < GEMM_N; jc += GEMM_NC) {
      for (int64_t ic = mb0 * GEMM_MC; ic < mb1 * GEMM_MC && ic < GEMM_M; ic += GEMM_MC) {
        for (int64_t pc = 0; pc < GEMM_K; pc += GEMM_KC) {
          PACK_B_BLOCK(pc, jc);
          pack_a(ap, a, ic, pc, MC_OF(ic), KC_OF(pc));
          macro_kernel(ap, bp, a, b, c, bias, res, ic, jc, pc, MC_OF(ic), NC_OF(jc), KC_OF(pc));
        }
      }
    }
#else
#error "gemm.c: GEMM_ORDER must be 0, 1 or 2"
#endif
  }
  if (ap) kestrel_release(ctx->svc, ap);
  if (bp) kestrel_release(ctx->svc, bp);
}

#endif

#if GEMM_SPLIT == 3
/* Shared B: per (jc, pc) block, the threads first pack B's panels together, then take the
 * MC row blocks, each packing its own A block. */
typedef struct shared_ctx {
  gemm_ctx* g;
  float* bp; /* the packed B block, shared (PACK_B) */
  int64_t jc, pc, nc, kc;
} shared_ctx;

#if PACKS_B
static void pack_b_task(int64_t t, void* p) {
  const shared_ctx* s = (const shared_ctx*)p;
  int64_t jr = t * GEMM_NR;
  pack_b_panel(s->bp + jr * s->kc, s->g->b, s->pc, s->jc + jr, min64(GEMM_NR, s->nc - jr), s->kc);
}
#endif

static void row_block_task(int64_t t, void* p) {
  const shared_ctx* s = (const shared_ctx*)p;
  gemm_ctx* ctx = s->g;
  int64_t ic = t * GEMM_MC, mc = min64(GEMM_MC, GEMM_M - ic);
  float* ap = (float*)kestrel_alloc(ctx->svc, (size_t)(GEMM_PACK_A ? MC_PAD : GEMM_MR) * KC_EFF * sizeof(float));
  /* Without PACK_B each task needs its own NR-wide edge panel buffer; B in panels, none. */
  float* bp = GEMM_PANELS ? 0 : GEMM_PACK_B ? s->bp : (float*)kestrel_alloc(ctx->svc, (size_t)GEMM_NR * KC_EFF * sizeof(float));
  if (!ap || (!GEMM_PANELS && !bp)) {
    __atomic_store_n(&ctx->failed, 1, __ATOMIC_RELAXED);
  } else {
    pack_a(ap, ctx->a, ic, s->pc, mc, s->kc);
    macro_kernel(ap, bp, ctx->a, ctx->b, ctx->c, ctx->bias, ctx->res, ic, s->jc, s->pc, mc, s->nc, s->kc);
  }
  if (ap) kestrel_release(ctx->svc, ap);
  if (!GEMM_PACK_B && bp) kestrel_release(ctx->svc, bp);
}

static void run_shared(gemm_ctx* ctx) {
  shared_ctx s = {ctx, 0, 0, 0, 0, 0};
#if PACKS_B
  s.bp = (float*)kestrel_alloc(ctx->svc, (size_t)NC_PAD * KC_EFF * sizeof(float));
  if (!s.bp) {
    ctx->failed = 1;
    return;
  }
#endif
  for (s.jc = 0; s.jc < GEMM_N; s.jc += GEMM_NC) {
    s.nc = min64(GEMM_NC, GEMM_N - s.jc);
    for (s.pc = 0; s.pc < GEMM_K; s.pc += GEMM_KC) {
      s.kc = min64(GEMM_KC, GEMM_K - s.pc);
#if PACKS_B
      kestrel_parallel_for(ctx->svc, (s.nc + GEMM_NR - 1) / GEMM_NR, pack_b_task, &s);
#endif
      kestrel_parallel_for(ctx->svc, MB, row_block_task, &s);
    }
  }
#if PACKS_B
  kestrel_release(ctx->svc, s.bp);
#endif
}

#else
static void task(int64_t t, void* p) {
  gemm_ctx* ctx = (gemm_ctx*)p;
#if GEMM_SPLIT == 0
  run_blocks(ctx, t, t + 1, 0, NB);
#elif GEMM_SPLIT == 1
  run_blocks(ctx, 0, MB, t, t + 1);
#elif GEMM_SPLIT == 2
  run_blocks(ctx, t / NB, t / NB + 1, t % NB, t % NB + 1);
#else
#error "gemm.c: GEMM_SPLIT must be 0, 1, 2 or 3"
#endif
}
#endif

/* Arguments: A, B (or its panels), [bias], [residual], C. */
#define ARG_BIAS 2
#define ARG_RES (2 + GEMM_BIAS)
#define ARG_C (2 + GEMM_BIAS + GEMM_RESIDUAL)

KESTREL_KERNEL(svc, args, num_args) {
  if (num_args != ARG_C + 1 || !args[0].data || !args[1].data || !args[ARG_C].data ||
      args[0].i64 != (int64_t)GEMM_M * GEMM_K || args[1].i64 != B_FLOATS ||
      args[ARG_C].i64 != (int64_t)GEMM_M * GEMM_N) {
    return 2;
  }
  if (GEMM_BIAS && (!args[ARG_BIAS].data || args[ARG_BIAS].i64 != GEMM_N)) return 2;
  if (GEMM_RESIDUAL && (!args[ARG_RES].data || args[ARG_RES].i64 != (int64_t)GEMM_M * GEMM_N)) return 2;
  gemm_ctx ctx = {svc,
                  (const float*)args[0].data,
                  (const float*)args[1].data,
                  (float*)args[ARG_C].data,
                  GEMM_BIAS ? (const float*)args[ARG_BIAS].data : 0,
                  GEMM_RESIDUAL ? (const float*)args[ARG_RES].data : 0,
                  0};
#if GEMM_SPLIT == 0
  kestrel_parallel_for(svc, MB, task, &ctx);
#elif GEMM_SPLIT == 1
  kestrel_parallel_for(svc, NB, task, &ctx);
#elif GEMM_SPLIT == 2
  kestrel_parallel_for(svc, (int64_t)MB * NB, task, &ctx);
#else
  run_shared(&ctx);
#endif
  return __atomic_load_n(&ctx.failed, __ATOMIC_RELAXED) ? 1 : 0;
}
