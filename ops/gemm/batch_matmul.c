/* batch_matmul.c: C[b][M][N] = op(A[b]) * op(B[b]) for b < BATCH, fp32, row-major, for
 * the CPU backend (attention: QK^T is trans_b=1, PV no transposes).
 *
 * Freestanding C specialised entirely by #defines (see batch_matmul.cpp):
 *   workload  BMM_BATCH BMM_M BMM_N BMM_K, optional BMM_TRANS_A BMM_TRANS_B (0 when absent)
 *             A is [BATCH][M][K] ([BATCH][K][M] with TRANS_A), B [BATCH][K][N]
 *             ([BATCH][N][K] with TRANS_B), C [BATCH][M][N]
 *   register  BMM_MR BMM_NR BMM_VEC  (micro-tile MR x NR, NR/VEC vectors per row)
 *   BMM_MB      micro-panels of MR rows per row block (MB * MR rows)
 *   BMM_KC      reduction length per k block
 *   BMM_UNROLL  unroll count of the micro-kernel's k loop
 *   BMM_PACK_B  1: pack each batch's B into NR-wide panels (k-major); 0: read B in place
 *               (only the edge panel narrower than NR is packed). TRANS_B needs 1.
 *   BMM_SPLIT   parallel_for tasks: 0 = one per batch matrix (it packs its own B);
 *               1 = the B of every batch matrix is packed first (one task each), then one
 *               task per (batch, row block)
 *
 * A is never packed: the micro-kernel broadcasts A(i, k) from A in place, whose element
 * (i, k) lies at i * K + k, or at k * M + i with TRANS_A (already the k-major panel
 * layout); only a row panel shorter than MR is copied, zero-padded, so that every tile
 * computes MR full rows. The MR x NR tile of C stays in vector registers
 * (vector-extension variables) over one k block; edge tiles are computed in full and
 * stored through a separate path. Every element of C is written (the first k block
 * stores, later ones accumulate). Returns 0, 1 when scratch memory runs out, 2 on bad
 * arguments.
 */
#include "kestrel/kernel/abi.h"

#if !defined(BMM_BATCH) || !defined(BMM_M) || !defined(BMM_N) || !defined(BMM_K) || !defined(BMM_MR) || \
    !defined(BMM_NR) || !defined(BMM_VEC) || !defined(BMM_MB) || !defined(BMM_KC) || !defined(BMM_UNROLL) || \
    !defined(BMM_PACK_B) || !defined(BMM_SPLIT)
#error "batch_matmul.c needs BMM_{BATCH,M,N,K,MR,NR,VEC,MB,KC,UNROLL,PACK_B,SPLIT}"
#endif
#ifndef BMM_TRANS_A
#define BMM_TRANS_A 0
#endif
#ifndef BMM_TRANS_B
#define BMM_TRANS_B 0
#endif
#if BMM_NR % BMM_VEC != 0
#error "batch_matmul.c: NR must be a multiple of VEC"
#endif
#if BMM_TRANS_B && !BMM_PACK_B
#error "batch_matmul.c: a transposed B is read through packed panels only (PACK_B=1)"
#endif

#define M BMM_M
#define N BMM_N
#define K BMM_K
#define MR BMM_MR
#define NR BMM_NR
#define NV (NR / BMM_VEC) /* vectors per micro-tile row */
#define MC (BMM_MB * MR)  /* rows per row block */
#define MB ((M + MC - 1) / MC)
#define KC_EFF (BMM_KC < K ? BMM_KC : K)
#define N_PAD ((N + NR - 1) / NR * NR)

/* The target's vector register file from the compiler's predefined macros, as in gemm.c:
 * when VEC is the register width, a micro-tile that does not fit is refused here too
 * (the op's check refuses it first from the target's traits). */
#if defined(__AVX512F__)
#define REG_FLOATS 16
#define REG_COUNT 32
#elif defined(__AVX__)
#define REG_FLOATS 8
#define REG_COUNT 16
#elif defined(__x86_64__) || (defined(__ARM_NEON) && !defined(__aarch64__))
#define REG_FLOATS 4
#define REG_COUNT 16
#elif defined(__aarch64__)
#define REG_FLOATS 4
#define REG_COUNT 32
#else
#define REG_FLOATS 1
#define REG_COUNT 32
#endif
#if BMM_VEC == REG_FLOATS && MR * NV + NV + 1 > REG_COUNT
#error "batch_matmul.c: the micro-tile MR x NR needs more vector registers than this target has (MR*NR/VEC accumulators + NR/VEC vectors of B + 1 broadcast)"
#endif

/* Element (i, k) of one batch matrix of A: at i * A_RS + k * A_KS. */
#if BMM_TRANS_A
#define A_RS 1
#define A_KS M
#else
#define A_RS K
#define A_KS 1
#endif

#define KESTREL_PRAGMA(x) _Pragma(#x)
#define UNROLL_COUNT(n) KESTREL_PRAGMA(clang loop unroll_count(n))
#define UNROLL_FULL KESTREL_PRAGMA(clang loop unroll(full))
#define INLINE static inline __attribute__((always_inline))

typedef float vf __attribute__((vector_size(BMM_VEC * sizeof(float))));

#define VLOAD(v, p) __builtin_memcpy(&(v), (p), sizeof(vf))
#define VSTORE(p, v) __builtin_memcpy((p), &(v), sizeof(vf))
INLINE int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* Copies rows [row, row + rows) (rows < MR) x k [pc, pc + kc) of A into one MR-row panel
 * panel[k][i], zero rows past `rows`. */
static void pack_a_edge(float* restrict panel, const float* restrict a, int64_t row, int64_t rows, int64_t pc,
                        int64_t kc) {
  for (int64_t k = 0; k < kc; ++k) {
    for (int64_t i = 0; i < MR; ++i) panel[k * MR + i] = i < rows ? a[(row + i) * A_RS + (pc + k) * A_KS] : 0.0f;
  }
}

/* Packs columns [col, col + width) (width <= NR) of B over the whole K into one NR-wide
 * panel bp[k][j], zero columns past width. */
static void pack_b_panel(float* restrict bp, const float* restrict b, int64_t col, int64_t width) {
#if BMM_TRANS_B
  /* B(k, j) = b[j * K + k]: read each row of the stored [N][K] matrix once. */
  for (int64_t j = 0; j < NR; ++j) {
    if (j < width) {
      const float* src = b + (col + j) * K;
      for (int64_t k = 0; k < K; ++k) bp[k * NR + j] = src[k];
    } else {
      for (int64_t k = 0; k < K; ++k) bp[k * NR + j] = 0.0f;
    }
  }
#else
  for (int64_t k = 0; k < K; ++k) {
    const float* src = b + k * N + col;
    for (int64_t j = 0; j < NR; ++j) bp[k * NR + j] = j < width ? src[j] : 0.0f;
  }
#endif
}

/* The panels of one batch matrix of B that the kernel reads from scratch: all of them
 * (PACK_B, N_PAD * K floats), or only the edge panel (NR * K floats, none when N is a
 * multiple of NR). */
#define PACKED_B_FLOATS (BMM_PACK_B ? (int64_t)N_PAD * K : (N % NR ? (int64_t)NR * K : 0))

static void pack_b(float* restrict bp, const float* restrict b) {
#if BMM_PACK_B
  for (int64_t jr = 0; jr < N; jr += NR) pack_b_panel(bp + jr * K, b, jr, min64(NR, N - jr));
#else
  if (N % NR) pack_b_panel(bp, b, N / NR * NR, N % NR);
#endif
}

/* c[0..mr)[0..nr) (+)= sum over k < kc of a[i * ars + k * aks] * b[k * ldb + j]. */
INLINE void micro_kernel(int64_t kc, const float* restrict a, int64_t ars, int64_t aks, const float* restrict b,
                         int64_t ldb, float* restrict c, int64_t mr, int64_t nr, int accumulate) {
  vf acc[MR][NV];
  UNROLL_FULL for (int i = 0; i < MR; ++i) {
    UNROLL_FULL for (int j = 0; j < NV; ++j) acc[i][j] = (vf){0};
  }
  UNROLL_COUNT(BMM_UNROLL) for (int64_t k = 0; k < kc; ++k) {
    vf bv[NV];
    UNROLL_FULL for (int j = 0; j < NV; ++j) VLOAD(bv[j], b + k * ldb + j * BMM_VEC);
    UNROLL_FULL for (int i = 0; i < MR; ++i) {
      float av = a[i * ars + k * aks];
      UNROLL_FULL for (int j = 0; j < NV; ++j) acc[i][j] += av * bv[j];
    }
  }
  if (mr == MR && nr == NR) {
    UNROLL_FULL for (int i = 0; i < MR; ++i) {
      UNROLL_FULL for (int j = 0; j < NV; ++j) {
        float* p = c + i * N + j * BMM_VEC;
        if (accumulate) {
          vf old;
          VLOAD(old, p);
          acc[i][j] += old;
        }
        VSTORE(p, acc[i][j]);
      }
    }
  } else {
    for (int64_t i = 0; i < mr; ++i) {
      float tile[NR];
      UNROLL_FULL for (int j = 0; j < NV; ++j) VSTORE(tile + j * BMM_VEC, acc[i][j]);
      float* p = c + i * N;
      if (accumulate) {
        for (int64_t j = 0; j < nr; ++j) p[j] += tile[j];
      } else {
        for (int64_t j = 0; j < nr; ++j) p[j] = tile[j];
      }
    }
  }
}

/* Rows [ic, ic + mc) of one batch matrix: a, c are that matrix's A and C, bp its packed
 * panels (see PACKED_B_FLOATS), b its B in place, ap an MR x KC_EFF edge panel buffer. */
static void row_block(const float* restrict a, const float* restrict b, const float* restrict bp, float* restrict c,
                      float* restrict ap, int64_t ic, int64_t mc) {
#if BMM_PACK_B
  (void)b;
#endif
  const int64_t full = mc / MR * MR;
  for (int64_t pc = 0; pc < K; pc += BMM_KC) {
    const int64_t kc = min64(BMM_KC, K - pc);
    if (full < mc) pack_a_edge(ap, a, ic + full, mc - full, pc, kc);
    for (int64_t jr = 0; jr < N; jr += NR) {
      const int64_t nr = min64(NR, N - jr);
      const float* panel;
      int64_t ldb;
#if BMM_PACK_B
      panel = bp + jr * K + pc * NR;
      ldb = NR;
#else
      if (nr == NR) {
        panel = b + pc * N + jr;
        ldb = N;
      } else {
        panel = bp + pc * NR;
        ldb = NR;
      }
#endif
      float* crow = c + ic * N + jr;
      for (int64_t ir = 0; ir < full; ir += MR) {
        micro_kernel(kc, a + (ic + ir) * A_RS + pc * A_KS, A_RS, A_KS, panel, ldb, crow + ir * N, MR, nr, pc > 0);
      }
      if (full < mc) micro_kernel(kc, ap, 1, MR, panel, ldb, crow + full * N, mc - full, nr, pc > 0);
    }
  }
}

typedef struct bmm_ctx {
  const kestrel_services* svc;
  const float* a;
  const float* b;
  float* c;
  float* packed; /* SPLIT 1: every batch matrix's packed B, PACKED_B_FLOATS each */
  int failed;
} bmm_ctx;

#define A_OF(ctx, t) ((ctx)->a + (int64_t)(t) * M * K)
#define B_OF(ctx, t) ((ctx)->b + (int64_t)(t) * K * N)
#define C_OF(ctx, t) ((ctx)->c + (int64_t)(t) * M * N)

#if BMM_SPLIT == 0
/* One batch matrix: pack its B, then every row block. */
static void batch_task(int64_t t, void* p) {
  bmm_ctx* ctx = (bmm_ctx*)p;
  float* ap = (float*)kestrel_alloc(ctx->svc, (size_t)MR * KC_EFF * sizeof(float));
  float* bp = PACKED_B_FLOATS ? (float*)kestrel_alloc(ctx->svc, (size_t)PACKED_B_FLOATS * sizeof(float)) : 0;
  if (!ap || (PACKED_B_FLOATS && !bp)) {
    __atomic_store_n(&ctx->failed, 1, __ATOMIC_RELAXED);
  } else {
    pack_b(bp, B_OF(ctx, t));
    for (int64_t ic = 0; ic < M; ic += MC) {
      row_block(A_OF(ctx, t), B_OF(ctx, t), bp, C_OF(ctx, t), ap, ic, min64(MC, M - ic));
    }
  }
  if (ap) kestrel_release(ctx->svc, ap);
  if (bp) kestrel_release(ctx->svc, bp);
}
#elif BMM_SPLIT == 1
static void pack_task(int64_t t, void* p) {
  bmm_ctx* ctx = (bmm_ctx*)p;
  pack_b(ctx->packed + t * PACKED_B_FLOATS, B_OF(ctx, t));
}

/* Row block t % MB of batch matrix t / MB, with that matrix's B already packed. */
static void block_task(int64_t t, void* p) {
  bmm_ctx* ctx = (bmm_ctx*)p;
  const int64_t batch = t / MB, ic = t % MB * MC;
  float* ap = (float*)kestrel_alloc(ctx->svc, (size_t)MR * KC_EFF * sizeof(float));
  if (!ap) {
    __atomic_store_n(&ctx->failed, 1, __ATOMIC_RELAXED);
    return;
  }
  const float* bp = PACKED_B_FLOATS ? ctx->packed + batch * PACKED_B_FLOATS : 0;
  row_block(A_OF(ctx, batch), B_OF(ctx, batch), bp, C_OF(ctx, batch), ap, ic, min64(MC, M - ic));
  kestrel_release(ctx->svc, ap);
}
#else
#error "batch_matmul.c: BMM_SPLIT must be 0 or 1"
#endif

KESTREL_KERNEL(svc, args, num_args) {
  if (num_args != 3 || !args[0].data || !args[1].data || !args[2].data ||
      args[0].i64 != (int64_t)BMM_BATCH * M * K || args[1].i64 != (int64_t)BMM_BATCH * K * N ||
      args[2].i64 != (int64_t)BMM_BATCH * M * N) {
    return 2;
  }
  bmm_ctx ctx = {svc, (const float*)args[0].data, (const float*)args[1].data, (float*)args[2].data, 0, 0};
#if BMM_SPLIT == 0
  kestrel_parallel_for(svc, BMM_BATCH, batch_task, &ctx);
#else
  if (PACKED_B_FLOATS) {
    ctx.packed = (float*)kestrel_alloc(svc, (size_t)BMM_BATCH * PACKED_B_FLOATS * sizeof(float));
    if (!ctx.packed) return 1;
    kestrel_parallel_for(svc, BMM_BATCH, pack_task, &ctx);
  }
  kestrel_parallel_for(svc, (int64_t)BMM_BATCH * MB, block_task, &ctx);
  if (ctx.packed) kestrel_release(svc, ctx.packed);
#endif
  return __atomic_load_n(&ctx.failed, __ATOMIC_RELAXED) ? 1 : 0;
}
