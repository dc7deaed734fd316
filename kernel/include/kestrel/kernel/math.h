/* Kestrel kernel math: the elementwise functions kernels need for epilogues and glue ops
 * (activations, softmax, normalisation), freestanding (no libm: kernels link nothing), for
 * float and for float vectors of 1, 2, 4, 8 and 16 lanes.
 *
 * Vectors are GCC-style vector types, `float __attribute__((vector_size(N * 4)))`; a
 * kernel's own typedef of that size is the same type, so it can pass its vectors directly.
 * The functions are overloaded on the type (clang's `overloadable`), so one spelling works
 * at any width: `acc = kestrel_activate(acc + bias, KESTREL_ACT_RELU)`.
 *
 * Accuracy against double precision, sampled every 0.0037 on [-90, 90] with and without
 * FMA (tests/ops/math_test.cpp checks these bounds through a compiled kernel):
 *   kestrel_exp      relative error < 2.5e-7 where the result is a normal float; 0 below
 *                    -87.34 (FLT_MIN), +inf above 88.72
 *   kestrel_erf      absolute error < 3.5e-7
 *   kestrel_tanh     absolute error < 1.5e-7
 *   kestrel_gelu     x * (1 + erf(x / sqrt 2)) / 2 (ONNX Gelu's default form), absolute
 *                    error < 1e-7 * (1 + |x|)
 *   kestrel_gelu_tanh  x * (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))) / 2 (ONNX Gelu with
 *                    approximate="tanh", torch's GELU(approximate="tanh")), absolute error
 *                    < 2e-7 * (1 + |x|)
 *   kestrel_sigmoid  absolute error < 1e-7
 *   kestrel_silu     x * sigmoid(x) (SiLU, "swish"), absolute error < 2e-7 * (1 + |x|)
 *   kestrel_hardsigmoid  max(0, min(1, x / 6 + 1/2)) (torch's constants; ONNX HardSigmoid
 *                    with alpha = 1/6, beta = 0.5), absolute error < 1e-7
 *   kestrel_hardswish    x * hardsigmoid(x) (ONNX HardSwish, torch's hardswish), absolute
 *                    error < 2e-7 * (1 + |x|)
 *   kestrel_sqrt     the hardware's square root; kestrel_rsqrt divides by it
 * NaN inputs give NaN (relu and max/min excepted, which follow the hardware's max/min).
 */
#ifndef KESTREL_KERNEL_MATH_H
#define KESTREL_KERNEL_MATH_H

#include <stdint.h>

/* Activations (the `act` workload parameter of ops with an epilogue). */
#define KESTREL_ACT_NONE 0
#define KESTREL_ACT_RELU 1
#define KESTREL_ACT_RELU6 2
#define KESTREL_ACT_GELU 3
#define KESTREL_ACT_SIGMOID 4
#define KESTREL_ACT_SILU 5
#define KESTREL_ACT_HARDSWISH 6
#define KESTREL_ACT_HARDSIGMOID 7
#define KESTREL_ACT_TANH 8
#define KESTREL_ACT_GELU_TANH 9
/* The largest code: ops accept act in 0..KESTREL_ACT_MAX. */
#define KESTREL_ACT_MAX 9

typedef float kestrel_f1 __attribute__((vector_size(1 * sizeof(float))));
typedef float kestrel_f2 __attribute__((vector_size(2 * sizeof(float))));
typedef float kestrel_f4 __attribute__((vector_size(4 * sizeof(float))));
typedef float kestrel_f8 __attribute__((vector_size(8 * sizeof(float))));
typedef float kestrel_f16 __attribute__((vector_size(16 * sizeof(float))));

#define KESTREL_MATH static inline __attribute__((always_inline, overloadable))

/* Every function here is inlined, so no vector crosses a real call and the calling
 * convention of wide vectors (16 floats on AVX2) does not matter: clang's warning about
 * it is off for the kernel that includes this header. */
#pragma clang diagnostic ignored "-Wpsabi"

/* The body of every function once, for a float type T (scalar or vector), the signed
 * integer type I of the same shape, and S, which makes a comparison's result a lane mask
 * of type I (all ones or zero): vector comparisons already give one, scalar ones give 0
 * or 1. kestrel_select_ picks lanes by such a mask. */

#define KESTREL_MATH_FUNCTIONS_(T, I, S)                                                                         \
  KESTREL_MATH T kestrel_select_(I mask, T a, T b) {                                                              \
    I ai, bi;                                                                                                     \
    __builtin_memcpy(&ai, &a, sizeof ai);                                                                         \
    __builtin_memcpy(&bi, &b, sizeof bi);                                                                         \
    I r = (ai & mask) | (bi & ~mask);                                                                             \
    T out;                                                                                                        \
    __builtin_memcpy(&out, &r, sizeof out);                                                                       \
    return out;                                                                                                   \
  }                                                                                                               \
  KESTREL_MATH T kestrel_max(T a, T b) { return kestrel_select_(S(a > b), a, b); }                               \
  KESTREL_MATH T kestrel_min(T a, T b) { return kestrel_select_(S(a < b), a, b); }                               \
  KESTREL_MATH T kestrel_relu(T x) { return kestrel_max(x, (T){} + 0.0f); }                                       \
  KESTREL_MATH T kestrel_relu6(T x) { return kestrel_min(kestrel_max(x, (T){} + 0.0f), (T){} + 6.0f); }           \
  KESTREL_MATH T kestrel_abs(T x) {                                                                               \
    I bits;                                                                                                       \
    __builtin_memcpy(&bits, &x, sizeof bits);                                                                     \
    bits &= (I){} + 0x7fffffff;                                                                                   \
    T out;                                                                                                        \
    __builtin_memcpy(&out, &bits, sizeof out);                                                                    \
    return out;                                                                                                   \
  }                                                                                                               \
  /* e^x: x = n ln2 + r with |r| <= ln2 / 2 (ln2 split in two for the reduction), e^r by a   \
   * degree-6 polynomial, 2^n built in the exponent bits. kestrel_exp_in_range_ takes x in   \
   * [-87.3365448, 88.7228391] (clamped by the caller) and gives a finite, normal result.   */                    \
  KESTREL_MATH T kestrel_exp_in_range_(T xc) {                                                                    \
    T n = xc * 1.44269504f;                                                                                       \
    n = kestrel_round_even_(n);                                                                                   \
    T r = xc - n * 0.693359375f;                                                                                  \
    r = r - n * -2.12194440e-4f;                                                                                  \
    T p = (T){} + 1.3981999507e-3f;                                                                               \
    p = p * r + 8.3334519073e-3f;                                                                                 \
    p = p * r + 4.1665795894e-2f;                                                                                 \
    p = p * r + 1.6666665459e-1f;                                                                                 \
    p = p * r + 5.0000001201e-1f;                                                                                 \
    p = p * r * r + r + 1.0f;                                                                                     \
    return kestrel_scale_pow2_(p, n);                                                                             \
  }                                                                                                               \
  KESTREL_MATH T kestrel_exp(T x) {                                                                               \
    const T hi = (T){} + 88.7228391f, lo = (T){} - 87.3365448f;                                                  \
    T out = kestrel_exp_in_range_(kestrel_min(kestrel_max(x, lo), hi));                                           \
    out = kestrel_select_(S(x < lo), (T){} + 0.0f, out);                                                          \
    out = kestrel_select_(S(x > hi), (T){} + __builtin_inff(), out);                                              \
    return kestrel_select_(S(x != x), x, out);                                                                    \
  }                                                                                                               \
  /* erf(x) = 1 - erfc(|x|) with the sign restored; erfc(z) = t exp(P(t) - z^2),           \
   * t = 1 / (1 + z/2), P of degree 9 (Chebyshev fit, 1.2e-7 relative in erfc). */                                \
  KESTREL_MATH T kestrel_erf(T x) {                                                                               \
    T z = kestrel_abs(x);                                                                                         \
    T t = 1.0f / (1.0f + 0.5f * z);                                                                               \
    T p = (T){} + 0.17087277f;                                                                                    \
    p = p * t - 0.82215223f;                                                                                      \
    p = p * t + 1.48851587f;                                                                                      \
    p = p * t - 1.13520398f;                                                                                      \
    p = p * t + 0.27886807f;                                                                                      \
    p = p * t - 0.18628806f;                                                                                      \
    p = p * t + 0.09678418f;                                                                                      \
    p = p * t + 0.37409196f;                                                                                      \
    p = p * t + 1.00002368f;                                                                                      \
    p = p * t - 1.26551223f;                                                                                      \
    T erfc = t * kestrel_exp(p - z * z);                                                                          \
    T y = 1.0f - erfc;                                                                                            \
    return kestrel_select_(S(x < 0.0f), -y, y);                                                                   \
  }                                                                                                               \
  /* tanh(x) = sign(x) (1 - e^{-2|x|}) / (1 + e^{-2|x|}); near 0 a series avoids the       \
   * cancellation. */                                                                                             \
  KESTREL_MATH T kestrel_tanh(T x) {                                                                              \
    T z = kestrel_abs(x);                                                                                         \
    T e = kestrel_exp(-2.0f * z);                                                                                 \
    T y = (1.0f - e) / (1.0f + e);                                                                                \
    T x2 = x * x;                                                                                                 \
    T series = z * (1.0f + x2 * (-0.333333333f + x2 * (0.133333333f + x2 * (-0.0539682540f))));                 \
    y = kestrel_select_(S(z < 0.0625f), series, y);                                                               \
    return kestrel_select_(S(x < 0.0f), -y, y);                                                                   \
  }                                                                                                               \
  KESTREL_MATH T kestrel_gelu(T x) { return 0.5f * x * (1.0f + kestrel_erf(x * 0.70710678118654752f)); }        \
  /* 1 / (1 + e^-x), which the sigmoid family shares: -x clamped to [-87.3, 80] so that the  \
   * denominator is finite and below 2^116, as kestrel_recip_ needs (past 80 the result is    \
   * below 2e-35 either way). NaN is not propagated: x * this does that. e^-x takes less     \
   * work than kestrel_exp: ln 2 as one float in the reduction (off by n * 1.9e-9, which      \
   * counts only where the logistic's slope, below 5e-5 from |n| = 15, hides it) and a        \
   * degree-5 minimax polynomial (relative error 7.5e-8; 2e-7 with float rounding), so the   \
   * logistic stays within 1e-7 (its slope is at most 1/4) at two multiply-adds fewer. */    \
  KESTREL_MATH T kestrel_logistic_(T x) {                                                                         \
    T t = kestrel_min(kestrel_max(-x, (T){} - 87.3365448f), (T){} + 80.0f);                                      \
    T n = kestrel_round_even_(t * 1.44269504f);                                                                   \
    T r = t - n * 0.693147182f;                                                                                   \
    T p = (T){} + 8.29764083e-3f;                                                                                 \
    p = p * r + 4.19154800e-2f;                                                                                   \
    p = p * r + 1.66675761e-1f;                                                                                   \
    p = p * r + 4.99988943e-1f;                                                                                   \
    p = p * r + 9.99999702e-1f;                                                                                   \
    p = p * r + 1.00000012f;                                                                                      \
    return kestrel_recip_(1.0f + kestrel_scale_pow2_(p, n));                                                      \
  }                                                                                                               \
  KESTREL_MATH T kestrel_sigmoid(T x) { return kestrel_select_(S(x != x), x, kestrel_logistic_(x)); }          \
  /* 0.5 x (1 + tanh(u)) is x sigmoid(2u): one exp and one reciprocal, no tanh. */                              \
  KESTREL_MATH T kestrel_gelu_tanh(T x) {                                                                         \
    return x * kestrel_logistic_(1.5957691216057308f * (x + 0.044715f * x * x * x));                              \
  }                                                                                                               \
  KESTREL_MATH T kestrel_silu(T x) { return x * kestrel_logistic_(x); }                                          \
  KESTREL_MATH T kestrel_hardsigmoid(T x) {                                                                       \
    return kestrel_min(kestrel_max(x * 0.166666667f + 0.5f, (T){} + 0.0f), (T){} + 1.0f);                       \
  }                                                                                                               \
  KESTREL_MATH T kestrel_hardswish(T x) { return x * kestrel_hardsigmoid(x); }                                   \
  KESTREL_MATH T kestrel_sqrt(T x) { return __builtin_elementwise_sqrt_or_scalar_(x); }                           \
  KESTREL_MATH T kestrel_rsqrt(T x) { return 1.0f / kestrel_sqrt(x); }                                            \
  /* act is one of KESTREL_ACT_*, normally a compile-time constant (the branch folds). */                        \
  KESTREL_MATH T kestrel_activate(T x, int act) {                                                                 \
    switch (act) {                                                                                                \
      case KESTREL_ACT_RELU: return kestrel_relu(x);                                                              \
      case KESTREL_ACT_RELU6: return kestrel_relu6(x);                                                            \
      case KESTREL_ACT_GELU: return kestrel_gelu(x);                                                              \
      case KESTREL_ACT_SIGMOID: return kestrel_sigmoid(x);                                                        \
      case KESTREL_ACT_SILU: return kestrel_silu(x);                                                              \
      case KESTREL_ACT_HARDSWISH: return kestrel_hardswish(x);                                                    \
      case KESTREL_ACT_HARDSIGMOID: return kestrel_hardsigmoid(x);                                                \
      case KESTREL_ACT_TANH: return kestrel_tanh(x);                                                              \
      case KESTREL_ACT_GELU_TANH: return kestrel_gelu_tanh(x);                                                    \
      default: return x;                                                                                          \
    }                                                                                                             \
  }

/* Vectors: a comparison already gives a lane mask. */
#define KESTREL_VMASK_(cond) (cond)
#define __builtin_elementwise_sqrt_or_scalar_(x) __builtin_elementwise_sqrt(x)

typedef int32_t kestrel_i1 __attribute__((vector_size(1 * sizeof(int32_t))));
typedef int32_t kestrel_i2 __attribute__((vector_size(2 * sizeof(int32_t))));
typedef int32_t kestrel_i4 __attribute__((vector_size(4 * sizeof(int32_t))));
typedef int32_t kestrel_i8 __attribute__((vector_size(8 * sizeof(int32_t))));
typedef int32_t kestrel_i16 __attribute__((vector_size(16 * sizeof(int32_t))));

/* exp's two integer steps, for a float type T and the integer type I of its shape:
 * kestrel_round_even_(v) rounds |v| < 2^22 to the nearest integer, ties to even (adding and
 * subtracting 1.5 * 2^23); kestrel_scale_pow2_(p, n) is p * 2^n for an integral n in
 * [-126, 128], 2^n built in the exponent bits as two factors that are each a normal float.
 * With AVX-512, 16 lanes take vrndscaleps and vscalefps instead: one instruction each in
 * place of two and of nine, the same results bit for bit (a 1x1 convolution with a SiLU
 * epilogue spends most of its time in exp). */
#define KESTREL_EXP_STEPS_(T, I, CONVERT)                                    \
  KESTREL_MATH T kestrel_round_even_(T v) { return (v + 12582912.0f) - 12582912.0f; } \
  KESTREL_MATH T kestrel_scale_pow2_(T p, T n) {                             \
    I n1 = CONVERT(n, I);                                                    \
    I n0 = n1 >> 1;                                                          \
    I e0 = (n0 + 127) << 23, e1 = (n1 - n0 + 127) << 23;                     \
    T s0, s1;                                                                \
    __builtin_memcpy(&s0, &e0, sizeof s0);                                   \
    __builtin_memcpy(&s1, &e1, sizeof s1);                                   \
    return p * s0 * s1;                                                      \
  }
#define KESTREL_VCONVERT_(n, I) __builtin_convertvector(n, I)
#define KESTREL_SCONVERT_(n, I) ((I)(n))
KESTREL_EXP_STEPS_(float, int32_t, KESTREL_SCONVERT_)
KESTREL_EXP_STEPS_(kestrel_f1, kestrel_i1, KESTREL_VCONVERT_)
KESTREL_EXP_STEPS_(kestrel_f2, kestrel_i2, KESTREL_VCONVERT_)
KESTREL_EXP_STEPS_(kestrel_f4, kestrel_i4, KESTREL_VCONVERT_)
KESTREL_EXP_STEPS_(kestrel_f8, kestrel_i8, KESTREL_VCONVERT_)
#if defined(__AVX512F__)
KESTREL_MATH kestrel_f16 kestrel_round_even_(kestrel_f16 v) {
  /* imm 8: round to nearest even, inexact not signalled; 4: the current rounding mode */
  return __builtin_ia32_rndscaleps_mask(v, 8, v, (unsigned short)0xffff, 4);
}
KESTREL_MATH kestrel_f16 kestrel_scale_pow2_(kestrel_f16 p, kestrel_f16 n) {
  return __builtin_ia32_scalefps512_mask(p, n, p, (unsigned short)0xffff, 4);
}
#else
KESTREL_EXP_STEPS_(kestrel_f16, kestrel_i16, KESTREL_VCONVERT_)
#endif
#undef KESTREL_EXP_STEPS_
#undef KESTREL_VCONVERT_
#undef KESTREL_SCONVERT_

/* 1 / d for finite d in [1, 2^116] (the sigmoid family's denominators). With AVX-512 the
 * 14-bit reciprocal estimate refined by one Newton step (relative error below 2^-26):
 * pipelined multiply-adds instead of the divider, whose throughput bounds a kernel with a
 * sigmoid or SiLU epilogue (with exp's edge selects gone too, a 1x1 convolution with SiLU
 * ran 8% faster). Elsewhere a division. */
#define KESTREL_RECIP_DIVIDE_(T) \
  KESTREL_MATH T kestrel_recip_(T d) { return 1.0f / d; }
KESTREL_RECIP_DIVIDE_(float)
KESTREL_RECIP_DIVIDE_(kestrel_f1)
KESTREL_RECIP_DIVIDE_(kestrel_f2)
KESTREL_RECIP_DIVIDE_(kestrel_f4)
KESTREL_RECIP_DIVIDE_(kestrel_f8)
#if defined(__AVX512F__)
KESTREL_MATH kestrel_f16 kestrel_recip_(kestrel_f16 d) {
  kestrel_f16 r = __builtin_ia32_rcp14ps512_mask(d, d, (unsigned short)0xffff);
  return r + r * (1.0f - d * r);
}
#else
KESTREL_RECIP_DIVIDE_(kestrel_f16)
#endif
#undef KESTREL_RECIP_DIVIDE_

KESTREL_MATH_FUNCTIONS_(kestrel_f1, kestrel_i1, KESTREL_VMASK_)
KESTREL_MATH_FUNCTIONS_(kestrel_f2, kestrel_i2, KESTREL_VMASK_)
KESTREL_MATH_FUNCTIONS_(kestrel_f4, kestrel_i4, KESTREL_VMASK_)
KESTREL_MATH_FUNCTIONS_(kestrel_f8, kestrel_i8, KESTREL_VMASK_)
KESTREL_MATH_FUNCTIONS_(kestrel_f16, kestrel_i16, KESTREL_VMASK_)

/* Scalars: a comparison gives 0 or 1, made a mask of all ones or zero. */
#undef __builtin_elementwise_sqrt_or_scalar_
#define KESTREL_SMASK_(cond) (-(int32_t)(cond))
#define __builtin_elementwise_sqrt_or_scalar_(x) __builtin_sqrtf(x)
KESTREL_MATH_FUNCTIONS_(float, int32_t, KESTREL_SMASK_)
#undef __builtin_elementwise_sqrt_or_scalar_

/* Horizontal sum and maximum of a vector's lanes. */
#define KESTREL_HORIZONTAL_(T, N)                                            \
  KESTREL_MATH float kestrel_hsum(T v) {                                     \
    float s = 0.0f;                                                          \
    for (int i = 0; i < N; ++i) s += v[i];                                   \
    return s;                                                                \
  }                                                                          \
  KESTREL_MATH float kestrel_hmax(T v) {                                     \
    float m = v[0];                                                          \
    for (int i = 1; i < N; ++i) m = v[i] > m ? v[i] : m;                     \
    return m;                                                                \
  }
KESTREL_HORIZONTAL_(kestrel_f1, 1)
KESTREL_HORIZONTAL_(kestrel_f2, 2)
KESTREL_HORIZONTAL_(kestrel_f4, 4)
KESTREL_HORIZONTAL_(kestrel_f8, 8)
KESTREL_HORIZONTAL_(kestrel_f16, 16)

#undef KESTREL_HORIZONTAL_
#undef KESTREL_MATH_FUNCTIONS_

#endif /* KESTREL_KERNEL_MATH_H */
