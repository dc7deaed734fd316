/* gemm_ref.c: the reference for gemm.c. C[M][N] = A[M][K] * B[K][N], fp32 row-major,
 * straightforward loops accumulating in double, one row of C per parallel_for task. Needs
 * GEMM_M, GEMM_N, GEMM_K. Same arguments as gemm.c: A, B (inputs), C (output). Returns 2
 * on bad arguments, 1 when scratch memory runs out. */
#include "kestrel/kernel/abi.h"

#if !defined(GEMM_M) || !defined(GEMM_N) || !defined(GEMM_K)
#error "gemm_ref.c needs GEMM_M, GEMM_N and GEMM_K"
#endif

typedef struct {
  const kestrel_services* svc;
  const float* a;
  const float* b;
  float* c;
  int failed;
} ref_ctx;

/* Row i of C, accumulated in double over k in order (i-k-j: B and C are read along rows,
 * so large workloads take seconds rather than minutes). */
static void ref_row(int64_t i, void* p) {
  ref_ctx* ctx = (ref_ctx*)p;
  double* acc = (double*)kestrel_alloc(ctx->svc, sizeof(double) * GEMM_N);
  if (!acc) {
    ctx->failed = 1;
    return;
  }
  for (int64_t j = 0; j < GEMM_N; ++j) acc[j] = 0.0;
  for (int64_t k = 0; k < GEMM_K; ++k) {
    const double aik = (double)ctx->a[i * GEMM_K + k];
    const float* brow = ctx->b + k * GEMM_N;
    for (int64_t j = 0; j < GEMM_N; ++j) acc[j] += aik * (double)brow[j];
  }
  for (int64_t j = 0; j < GEMM_N; ++j) ctx->c[i * GEMM_N + j] = (float)acc[j];
  kestrel_release(ctx->svc, acc);
}

KESTREL_KERNEL(svc, args, num_args) {
  if (num_args != 3 || !args[0].data || !args[1].data || !args[2].data ||
      args[0].i64 != (int64_t)GEMM_M * GEMM_K || args[1].i64 != (int64_t)GEMM_K * GEMM_N ||
      args[2].i64 != (int64_t)GEMM_M * GEMM_N) {
    return 2;
  }
  ref_ctx ctx = {svc, (const float*)args[0].data, (const float*)args[1].data, (float*)args[2].data, 0};
  kestrel_parallel_for(svc, GEMM_M, ref_row, &ctx);
  return ctx.failed ? 1 : 0;
}
