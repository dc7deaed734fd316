/* ref_math.h: double-precision exp, erf, tanh, sqrt and the epilogue activations for the
 * reference kernels of the glue ops (softmax, layernorm, elementwise), gemm and
 * conv2d_winograd, written out so that the references need no libm and share nothing with
 * the kernels' own kestrel/kernel/math.h.
 * The op classes prepend this text to each reference source. Accurate to about 1e-14
 * relative, far below the fp32 tolerances the kernels are held to. */
#include <stdint.h>

/* Prepended to a source, so a function it does not call is no warning. */
#define REF_MATH static inline __attribute__((unused))

/* x * 2^e for e in [-2044, 2046]. */
REF_MATH double ref_scale2(double x, int64_t e) {
  union {
    double d;
    uint64_t u;
  } s;
  while (e > 1023) {
    x *= 0x1p1023;
    e -= 1023;
  }
  while (e < -1022) {
    x *= 0x1p-1022;
    e += 1022;
  }
  s.u = (uint64_t)(e + 1023) << 52;
  return x * s.d;
}

/* e^x: x = k ln2 + r with |r| <= ln2/2, e^r by its Taylor series (22 terms). */
REF_MATH double ref_exp(double x) {
  if (x != x) return x;
  if (x > 709.8) return __builtin_inf();
  if (x < -745.2) return 0.0;
  const double ln2_hi = 6.93147180369123816490e-01, ln2_lo = 1.90821492927058770002e-10;
  double t = x * 1.44269504088896338700;
  int64_t k = (int64_t)(t + (t >= 0 ? 0.5 : -0.5));
  double r = (x - (double)k * ln2_hi) - (double)k * ln2_lo;
  double term = 1.0, sum = 1.0;
  for (int i = 1; i < 22; ++i) {
    term *= r / i;
    sum += term;
  }
  return ref_scale2(sum, k);
}

/* e^x - 1 without cancellation near 0. */
REF_MATH double ref_expm1(double x) {
  if (x > 0.5 || x < -0.5) return ref_exp(x) - 1.0;
  double term = x, sum = x;
  for (int i = 2; i < 30; ++i) {
    term *= x / i;
    sum += term;
  }
  return sum;
}

/* erf: its Maclaurin series below 2.5, the continued fraction of erfc up to 6, then +-1. */
REF_MATH double ref_erf(double x) {
  double a = x < 0 ? -x : x, r;
  if (a < 2.5) {
    double term = a, sum = a; /* term = (-1)^n a^(2n+1) / n! */
    for (int n = 1; n < 90; ++n) {
      term *= -a * a / n;
      sum += term / (2 * n + 1);
    }
    r = sum * 1.12837916709551257390; /* 2 / sqrt(pi) */
  } else if (a < 6.0) {
    /* erfc(a) = e^(-a^2) / sqrt(pi) / (a + (1/2) / (a + (2/2) / (a + (3/2) / ...))) */
    double f = a;
    for (int n = 200; n >= 1; --n) f = a + (n * 0.5) / f;
    r = 1.0 - ref_exp(-a * a) / (f * 1.77245385090551602730);
  } else {
    r = 1.0;
  }
  return x < 0 ? -r : r;
}

/* tanh(x) = -expm1(-2|x|) / (2 + expm1(-2|x|)), signed. */
REF_MATH double ref_tanh(double x) {
  double a = x < 0 ? -x : x;
  double r = 1.0;
  if (a < 20.0) {
    double em1 = ref_expm1(-2.0 * a);
    r = -em1 / (2.0 + em1);
  }
  return x < 0 ? -r : r;
}

/* sqrt by Newton's iteration from a halved exponent; 0 for x <= 0. */
REF_MATH double ref_sqrt(double x) {
  if (!(x > 0)) return 0.0;
  union {
    double d;
    uint64_t u;
  } v;
  v.d = x;
  v.u = (v.u >> 1) + (UINT64_C(1023) << 51);
  double y = v.d;
  for (int i = 0; i < 8; ++i) y = 0.5 * (y + x / y);
  return y;
}

/* The activation `act` (KESTREL_ACT_* of kestrel/kernel/math.h) of x: 0 none, 1 relu, 2
 * relu6, 3 gelu (erf form), 4 sigmoid, 5 silu, 6 hardswish, 7 hardsigmoid, 8 tanh, 9 gelu
 * (tanh form). */
REF_MATH double ref_activation(int act, double x) {
  const double hardsigmoid = x / 6.0 + 0.5 < 0 ? 0 : x / 6.0 + 0.5 > 1 ? 1 : x / 6.0 + 0.5;
  switch (act) {
    case 1: return x > 0 ? x : 0;
    case 2: return x < 0 ? 0 : x > 6 ? 6 : x;
    case 3: return 0.5 * x * (1.0 + ref_erf(x * 0.70710678118654752440));
    case 4: return 1.0 / (1.0 + ref_exp(-x));
    case 5: return x / (1.0 + ref_exp(-x));
    case 6: return x * hardsigmoid;
    case 7: return hardsigmoid;
    case 8: return ref_tanh(x);
    case 9: {
      const double u = 0.79788456080286535588 * (x + 0.044715 * x * x * x);
      return 0.5 * x * (1.0 + ref_tanh(u));
    }
    default: return x;
  }
}
