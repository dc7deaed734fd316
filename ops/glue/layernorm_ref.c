/* layernorm_ref.c: the reference for layernorm.c: per row, v = x (+ residual), its mean
 * and biased variance in double, then (v - mean) / sqrt(var + eps) * gamma + beta, with
 * ref_sqrt of ref_math.h (prepended by the op class). Needs LAYERNORM_ROWS, LAYERNORM_COLS,
 * LAYERNORM_EPSILON and LAYERNORM_RESIDUAL. Same arguments as layernorm.c. Returns 2 on bad
 * arguments, 1 when scratch memory runs out. */
#include "kestrel/kernel/abi.h"

#if !defined(LAYERNORM_ROWS) || !defined(LAYERNORM_COLS) || !defined(LAYERNORM_EPSILON) || \
    !defined(LAYERNORM_RESIDUAL)
#error "layernorm_ref.c needs LAYERNORM_{ROWS,COLS,EPSILON,RESIDUAL}"
#endif

#define ROWS ((int64_t)LAYERNORM_ROWS)
#define COLS ((int64_t)LAYERNORM_COLS)

KESTREL_KERNEL(svc, args, num_args) {
  const int64_t out = 3 + LAYERNORM_RESIDUAL;
  if (num_args != out + 1) return 2;
  for (int64_t i = 0; i <= out; ++i) {
    int64_t want = i == 1 || i == 2 ? COLS : ROWS * COLS;
    if (!args[i].data || args[i].i64 != want) return 2;
  }
  const float* x = (const float*)args[0].data;
  const float* gamma = (const float*)args[1].data;
  const float* beta = (const float*)args[2].data;
  const float* res = LAYERNORM_RESIDUAL ? (const float*)args[3].data : 0;
  float* y = (float*)args[out].data;
  double* v = (double*)kestrel_alloc(svc, sizeof(double) * COLS);
  if (!v) return 1;
  for (int64_t r = 0; r < ROWS; ++r) {
    double mean = 0.0, var = 0.0;
    for (int64_t c = 0; c < COLS; ++c) {
      v[c] = (double)x[r * COLS + c] + (res ? (double)res[r * COLS + c] : 0.0);
      mean += v[c];
    }
    mean /= (double)COLS;
    for (int64_t c = 0; c < COLS; ++c) var += (v[c] - mean) * (v[c] - mean);
    var /= (double)COLS;
    const double inv_std = 1.0 / ref_sqrt(var + (double)LAYERNORM_EPSILON);
    for (int64_t c = 0; c < COLS; ++c) y[r * COLS + c] = (float)((v[c] - mean) * inv_std * gamma[c] + beta[c]);
  }
  kestrel_release(svc, v);
  return 0;
}
