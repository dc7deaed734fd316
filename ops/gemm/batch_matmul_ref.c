/* batch_matmul_ref.c: the reference for batch_matmul.c. C[b][M][N] = op(A[b]) * op(B[b]),
 * fp32 row-major, straightforward loops accumulating in double, one row of one batch
 * matrix per parallel_for task. Needs BMM_BATCH, BMM_M, BMM_N, BMM_K; BMM_TRANS_A and
 * BMM_TRANS_B (0 when absent) say that A is stored [BATCH][K][M], B [BATCH][N][K]. Same
 * arguments as batch_matmul.c: A, B (inputs), C (output). Returns 2 on bad arguments, 1
 * when scratch memory runs out. */
#include "kestrel/kernel/abi.h"

#if !defined(BMM_BATCH) || !defined(BMM_M) || !defined(BMM_N) || !defined(BMM_K)
#error "batch_matmul_ref.c needs BMM_BATCH, BMM_M, BMM_N and BMM_K"
#endif
#ifndef BMM_TRANS_A
#define BMM_TRANS_A 0
#endif
#ifndef BMM_TRANS_B
#define BMM_TRANS_B 0
#endif

typedef struct {
  const kestrel_services* svc;
  const float* a;
  const float* b;
  float* c;
  int failed;
} ref_ctx;

/* Row i of batch matrix t (task t * M + i), accumulated in double over k in order. */
static void ref_row(int64_t task, void* p) {
  ref_ctx* ctx = (ref_ctx*)p;
  const int64_t t = task / BMM_M, i = task % BMM_M;
  const float* a = ctx->a + t * BMM_M * BMM_K;
  const float* b = ctx->b + t * BMM_K * BMM_N;
  float* c = ctx->c + t * BMM_M * BMM_N;
  double* acc = (double*)kestrel_alloc(ctx->svc, sizeof(double) * BMM_N);
  if (!acc) {
    __atomic_store_n(&ctx->failed, 1, __ATOMIC_RELAXED);
    return;
  }
  for (int64_t j = 0; j < BMM_N; ++j) acc[j] = 0.0;
  for (int64_t k = 0; k < BMM_K; ++k) {
    const double aik = (double)(BMM_TRANS_A ? a[k * BMM_M + i] : a[i * BMM_K + k]);
    for (int64_t j = 0; j < BMM_N; ++j) {
      acc[j] += aik * (double)(BMM_TRANS_B ? b[j * BMM_K + k] : b[k * BMM_N + j]);
    }
  }
  for (int64_t j = 0; j < BMM_N; ++j) c[i * BMM_N + j] = (float)acc[j];
  kestrel_release(ctx->svc, acc);
}

KESTREL_KERNEL(svc, args, num_args) {
  if (num_args != 3 || !args[0].data || !args[1].data || !args[2].data ||
      args[0].i64 != (int64_t)BMM_BATCH * BMM_M * BMM_K || args[1].i64 != (int64_t)BMM_BATCH * BMM_K * BMM_N ||
      args[2].i64 != (int64_t)BMM_BATCH * BMM_M * BMM_N) {
    return 2;
  }
  ref_ctx ctx = {svc, (const float*)args[0].data, (const float*)args[1].data, (float*)args[2].data, 0};
  kestrel_parallel_for(svc, (int64_t)BMM_BATCH * BMM_M, ref_row, &ctx);
  return __atomic_load_n(&ctx.failed, __ATOMIC_RELAXED) ? 1 : 0;
}
