/* softmax_ref.c: the reference for softmax.c: per row, the maximum, then e^(x - max) in
 * double (ref_math.h, which the op class prepends) summed in double, then each divided
 * by the sum (with SOFTMAX_NAN_ZERO a NaN result written as 0). Needs SOFTMAX_ROWS and
 * SOFTMAX_COLS. Same arguments as softmax.c: x, y.
 * Returns 2 on bad arguments, 1 when scratch memory runs out. */
#include "kestrel/kernel/abi.h"

#if !defined(SOFTMAX_ROWS) || !defined(SOFTMAX_COLS)
#error "softmax_ref.c needs SOFTMAX_ROWS and SOFTMAX_COLS"
#endif

#ifndef SOFTMAX_NAN_ZERO
#define SOFTMAX_NAN_ZERO 0
#endif

#define ROWS ((int64_t)SOFTMAX_ROWS)
#define COLS ((int64_t)SOFTMAX_COLS)

KESTREL_KERNEL(svc, args, num_args) {
  if (num_args != 2 || !args[0].data || !args[1].data || args[0].i64 != ROWS * COLS || args[1].i64 != ROWS * COLS) {
    return 2;
  }
  const float* x = (const float*)args[0].data;
  float* y = (float*)args[1].data;
  double* e = (double*)kestrel_alloc(svc, sizeof(double) * COLS);
  if (!e) return 1;
  for (int64_t r = 0; r < ROWS; ++r) {
    const float* xr = x + r * COLS;
    double mx = xr[0], sum = 0.0;
    for (int64_t c = 1; c < COLS; ++c) mx = xr[c] > mx ? xr[c] : mx;
    for (int64_t c = 0; c < COLS; ++c) {
      e[c] = ref_exp((double)xr[c] - mx);
      sum += e[c];
    }
    for (int64_t c = 0; c < COLS; ++c) {
      const double v = e[c] / sum;
      y[r * COLS + c] = SOFTMAX_NAN_ZERO && v != v ? 0.0f : (float)v;
    }
  }
  kestrel_release(svc, e);
  return 0;
}
