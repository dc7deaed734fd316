/* gemm_ref.c: the reference for gemm.c. C[M][N] = act(A[M][K] * B[K][N] + bias[N] +
 * residual[M][N]), fp32 row-major, straightforward loops accumulating in double, one row
 * of C per parallel_for task. Needs GEMM_M, GEMM_N, GEMM_K; the epilogue GEMM_BIAS,
 * GEMM_RESIDUAL, GEMM_ACT is optional (0 when absent). Same arguments as gemm.c: A, B,
 * [bias], [residual] (inputs), C (output). Returns 2 on bad arguments, 1 when scratch
 * memory runs out. With GEMM_PANELS (P) B arrives as P-wide column panels,
 * B[ceil(N/P)][K][P], as gemm.c takes it. The activation is computed in double with the
 * functions of ops/glue/ref_math.h, which gemm.cpp prepends to this text. */
#include "kestrel/kernel/abi.h"

#if !defined(GEMM_M) || !defined(GEMM_N) || !defined(GEMM_K)
#error "gemm_ref.c needs GEMM_M, GEMM_N and GEMM_K"
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
#if GEMM_PANELS
#define B_FLOATS ((int64_t)(GEMM_N + GEMM_PANELS - 1) / GEMM_PANELS * GEMM_PANELS * GEMM_K)
/* B[k][j] in the panels. */
#define B_AT(b, k, j) ((b)[((j) / GEMM_PANELS * GEMM_K + (k)) * GEMM_PANELS + (j) % GEMM_PANELS])
#else
#define B_FLOATS ((int64_t)GEMM_K * GEMM_N)
#define B_AT(b, k, j) ((b)[(k) * GEMM_N + (j)])
#endif

typedef struct {
  const kestrel_services* svc;
  const float* a;
  const float* b;
  const float* bias;
  const float* residual;
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
    for (int64_t j = 0; j < GEMM_N; ++j) acc[j] += aik * (double)B_AT(ctx->b, k, j);
  }
  for (int64_t j = 0; j < GEMM_N; ++j) {
    double v = acc[j];
    if (GEMM_BIAS) v += (double)ctx->bias[j];
    if (GEMM_RESIDUAL) v += (double)ctx->residual[i * GEMM_N + j];
    ctx->c[i * GEMM_N + j] = (float)ref_activation(GEMM_ACT, v);
  }
  kestrel_release(ctx->svc, acc);
}

KESTREL_KERNEL(svc, args, num_args) {
  const int c_arg = 2 + GEMM_BIAS + GEMM_RESIDUAL;
  if (num_args != c_arg + 1) return 2;
  for (int i = 0; i < num_args; ++i) {
    if (!args[i].data) return 2;
  }
  if (args[0].i64 != (int64_t)GEMM_M * GEMM_K || args[1].i64 != B_FLOATS ||
      args[c_arg].i64 != (int64_t)GEMM_M * GEMM_N || (GEMM_BIAS && args[2].i64 != GEMM_N) ||
      (GEMM_RESIDUAL && args[2 + GEMM_BIAS].i64 != (int64_t)GEMM_M * GEMM_N)) {
    return 2;
  }
  ref_ctx ctx = {svc,
                 (const float*)args[0].data,
                 (const float*)args[1].data,
                 GEMM_BIAS ? (const float*)args[2].data : 0,
                 GEMM_RESIDUAL ? (const float*)args[2 + GEMM_BIAS].data : 0,
                 (float*)args[c_arg].data,
                 0};
  kestrel_parallel_for(svc, GEMM_M, ref_row, &ctx);
  return ctx.failed ? 1 : 0;
}
