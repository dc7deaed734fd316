/* elementwise_ref.c: the reference for elementwise.c: each element computed in double by
 * the formula of its kind (gelu(x) = x/2 (1 + erf(x / sqrt 2)), sigmoid(x) = 1 / (1 +
 * e^-x)) with ref_math.h, which the op class prepends. Needs ELEMENTWISE_N and
 * ELEMENTWISE_KIND. Same arguments as elementwise.c. Returns 2 on bad arguments. */
#include "kestrel/kernel/abi.h"

#if !defined(ELEMENTWISE_N) || !defined(ELEMENTWISE_KIND)
#error "elementwise_ref.c needs ELEMENTWISE_N and ELEMENTWISE_KIND"
#endif

#define BINARY (ELEMENTWISE_KIND <= 2)

static double reference(double x, double y) {
  switch (ELEMENTWISE_KIND) {
    case 0: return x + y;
    case 1: return x - y;
    case 2: return x * y;
    case 3: return x > 0 ? x : 0.0;
    case 4: return x > 0 ? (x < 6 ? x : 6.0) : 0.0;
    case 5: return 0.5 * x * (1.0 + ref_erf(x * 0.70710678118654752440));
    case 6: return 1.0 / (1.0 + ref_exp(-x));
    default: return ref_tanh(x);
  }
}

KESTREL_KERNEL(svc, args, num_args) {
  (void)svc;
  const int64_t inputs = BINARY ? 2 : 1;
  if (num_args != inputs + 1) return 2;
  for (int64_t i = 0; i <= inputs; ++i) {
    if (!args[i].data || args[i].i64 != (int64_t)ELEMENTWISE_N) return 2;
  }
  const float* a = (const float*)args[0].data;
  const float* b = BINARY ? (const float*)args[1].data : 0;
  float* out = (float*)args[inputs].data;
  for (int64_t i = 0; i < (int64_t)ELEMENTWISE_N; ++i) {
    out[i] = (float)reference((double)a[i], BINARY ? (double)b[i] : 0.0);
  }
  return 0;
}
