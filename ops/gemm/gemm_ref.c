/* gemm_ref.c: the reference for gemm.c. C[M][N] = A[M][K] * B[K][N], fp32 row-major,
 * straightforward loops accumulating in double, single-threaded. Needs GEMM_M, GEMM_N,
 * GEMM_K. Same arguments as gemm.c: A, B (inputs), C (output). Returns 2 on bad
 * arguments. */
#include "kestrel/kernel/abi.h"

#if !defined(GEMM_M) || !defined(GEMM_N) || !defined(GEMM_K)
#error "gemm_ref.c needs GEMM_M, GEMM_N and GEMM_K"
#endif

KESTREL_KERNEL(svc, args, num_args) {
  (void)svc;
  if (num_args != 3 || !args[0].data || !args[1].data || !args[2].data ||
      args[0].i64 != (int64_t)GEMM_M * GEMM_K || args[1].i64 != (int64_t)GEMM_K * GEMM_N ||
      args[2].i64 != (int64_t)GEMM_M * GEMM_N) {
    return 2;
  }
  const float* a = (const float*)args[0].data;
  const float* b = (const float*)args[1].data;
  float* c = (float*)args[2].data;
  for (int64_t i = 0; i < GEMM_M; ++i) {
    for (int64_t j = 0; j < GEMM_N; ++j) {
      double sum = 0.0;
      for (int64_t k = 0; k < GEMM_K; ++k) sum += (double)a[i * GEMM_K + k] * (double)b[k * GEMM_N + j];
      c[i * GEMM_N + j] = (float)sum;
    }
  }
  return 0;
}
