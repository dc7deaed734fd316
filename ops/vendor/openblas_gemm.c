/* openblas_gemm.c: OpenBLAS as a contender for gemm and batch_matmul. A shim kernel with
 * the op's own arguments that finds cblas_sgemm on the device through the kernel ABI's
 * vendor_symbol service and calls it once per matrix of the batch, on the caller's
 * number of threads. Needs GEMM_M, GEMM_N, GEMM_K and VENDOR_LIBRARY (the library's file
 * name, unquoted: libopenblas.so.0); optional GEMM_BATCH (1), GEMM_TRANS_A and
 * GEMM_TRANS_B (0: A [M][K], B [K][N]; 1: A [K][M], B [N][K]), GEMM_BIAS (a bias
 * argument [N] after B), GEMM_RESIDUAL (a residual argument shaped as C) and GEMM_ACT
 * (KESTREL_ACT_*), applied after the multiply in one pass over C. Arguments: A, B,
 * [bias], [residual], C. Returns 2 on bad arguments, KESTREL_KERNEL_VENDOR_MISSING when
 * the library or cblas_sgemm is not on the device. */
#include "kestrel/kernel/abi.h"

#if !defined(GEMM_M) || !defined(GEMM_N) || !defined(GEMM_K) || !defined(VENDOR_LIBRARY)
#error "openblas_gemm.c needs GEMM_M, GEMM_N, GEMM_K and VENDOR_LIBRARY"
#endif
#ifndef GEMM_BATCH
#define GEMM_BATCH 1
#endif
#ifndef GEMM_TRANS_A
#define GEMM_TRANS_A 0
#endif
#ifndef GEMM_TRANS_B
#define GEMM_TRANS_B 0
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
#if GEMM_ACT != 0
#include "kestrel/kernel/math.h"
#endif

#define VENDOR_STRING2(x) #x
#define VENDOR_STRING(x) VENDOR_STRING2(x)

/* The CBLAS interface of OpenBLAS (cblas.h): enumerations as int, 32-bit blasint. */
enum { CBLAS_ROW_MAJOR = 101, CBLAS_NO_TRANS = 111, CBLAS_TRANS = 112 };
typedef void (*sgemm_fn)(int order, int trans_a, int trans_b, int m, int n, int k, float alpha, const float* a,
                         int lda, const float* b, int ldb, float beta, float* c, int ldc);
typedef void (*set_threads_fn)(int threads);

/* Found on the first call, kept: the runtime never unloads a vendor library. */
static sgemm_fn g_sgemm;
static set_threads_fn g_set_threads;
static uint32_t g_threads;

KESTREL_KERNEL(svc, args, num_args) {
  const int64_t a_elems = (int64_t)GEMM_BATCH * GEMM_M * GEMM_K, b_elems = (int64_t)GEMM_BATCH * GEMM_K * GEMM_N,
                c_elems = (int64_t)GEMM_BATCH * GEMM_M * GEMM_N;
  const int c_arg = 2 + GEMM_BIAS + GEMM_RESIDUAL;
  if (num_args != c_arg + 1 || args[0].i64 != a_elems || args[1].i64 != b_elems || args[c_arg].i64 != c_elems) return 2;
  for (int i = 0; i < num_args; ++i) {
    if (!args[i].data) return 2;
  }
#if GEMM_BIAS
  if (args[2].i64 != GEMM_N) return 2;
#endif
#if GEMM_RESIDUAL
  if (args[2 + GEMM_BIAS].i64 != c_elems) return 2;
#endif
  if (!g_sgemm) {
    g_sgemm = (sgemm_fn)kestrel_vendor_symbol(svc, VENDOR_STRING(VENDOR_LIBRARY), "cblas_sgemm");
    if (!g_sgemm) return KESTREL_KERNEL_VENDOR_MISSING;
    g_set_threads = (set_threads_fn)kestrel_vendor_symbol(svc, VENDOR_STRING(VENDOR_LIBRARY), "openblas_set_num_threads");
  }
  if (g_set_threads && g_threads != svc->num_threads) {
    g_set_threads((int)svc->num_threads);
    g_threads = svc->num_threads;
  }
  const float* a = (const float*)args[0].data;
  const float* b = (const float*)args[1].data;
  float* c = (float*)args[c_arg].data;
  for (int64_t i = 0; i < GEMM_BATCH; ++i) {
    g_sgemm(CBLAS_ROW_MAJOR, GEMM_TRANS_A ? CBLAS_TRANS : CBLAS_NO_TRANS, GEMM_TRANS_B ? CBLAS_TRANS : CBLAS_NO_TRANS,
            GEMM_M, GEMM_N, GEMM_K, 1.0f, a + i * GEMM_M * GEMM_K, GEMM_TRANS_A ? GEMM_M : GEMM_K,
            b + i * GEMM_K * GEMM_N, GEMM_TRANS_B ? GEMM_K : GEMM_N, 0.0f, c + i * GEMM_M * GEMM_N, GEMM_N);
  }
#if GEMM_BIAS || GEMM_RESIDUAL || GEMM_ACT
#if GEMM_BIAS
  const float* bias = (const float*)args[2].data;
#endif
#if GEMM_RESIDUAL
  const float* residual = (const float*)args[2 + GEMM_BIAS].data;
#endif
  for (int64_t row = 0; row < (int64_t)GEMM_BATCH * GEMM_M; ++row) {
    float* out = c + row * GEMM_N;
    for (int64_t j = 0; j < GEMM_N; ++j) {
      float v = out[j];
#if GEMM_BIAS
      v += bias[j];
#endif
#if GEMM_RESIDUAL
      v += residual[row * GEMM_N + j];
#endif
#if GEMM_ACT
      v = kestrel_activate(v, GEMM_ACT);
#endif
      out[j] = v;
    }
  }
#endif
  return 0;
}
