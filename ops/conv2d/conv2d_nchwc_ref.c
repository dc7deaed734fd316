/* conv2d_nchwc_ref.c: the reference for conv2d_nchwc.c. Direct convolution, fp32, in the
 * blocked-channel layout, with stride, zero padding, dilation, groups and the optional
 * epilogue act(acc + bias + residual); straightforward loops in double, single-threaded,
 * reading only lanes of real channels. Needs CONV_{N,C,H,W,K,R,S,STRIDE,PAD,DILATION,BLOCK},
 * optional CONV_{GROUPS,BIAS,RESIDUAL,ACT}. Same arguments as conv2d_nchwc.c: input
 * [N][C/B][H][W][B], weight [K/B][C/GROUPS/B][R][S][B(c)][B(k)], [bias [K/B*B]],
 * [residual (the output's shape)], output [N][K/B][P][Q][B] (lanes past K written as 0);
 * with CONV_PLAIN_IN the input is plain NCHW [N][C][H][W]. Returns 2 on bad arguments. */
#include "kestrel/kernel/abi.h"

#if !defined(CONV_N) || !defined(CONV_C) || !defined(CONV_H) || !defined(CONV_W) || !defined(CONV_K) ||  \
    !defined(CONV_R) || !defined(CONV_S) || !defined(CONV_STRIDE) || !defined(CONV_PAD) ||               \
    !defined(CONV_DILATION) || !defined(CONV_BLOCK)
#error "conv2d_nchwc_ref.c needs CONV_{N,C,H,W,K,R,S,STRIDE,PAD,DILATION,BLOCK}"
#endif
#ifndef CONV_GROUPS
#define CONV_GROUPS 1
#endif
#ifndef CONV_BIAS
#define CONV_BIAS 0
#endif
#ifndef CONV_RESIDUAL
#define CONV_RESIDUAL 0
#endif
#ifndef CONV_ACT
#define CONV_ACT 0
#endif
#ifndef CONV_PLAIN_IN
#define CONV_PLAIN_IN 0
#endif

#define B CONV_BLOCK
#define P ((CONV_H + 2 * CONV_PAD - CONV_DILATION * (CONV_R - 1) - 1) / CONV_STRIDE + 1)
#define Q ((CONV_W + 2 * CONV_PAD - CONV_DILATION * (CONV_S - 1) - 1) / CONV_STRIDE + 1)
#define CB ((CONV_C + B - 1) / B)
#define KB ((CONV_K + B - 1) / B)
#define CG (CONV_C / CONV_GROUPS)    /* input channels of a group */
#define KG (CONV_K / CONV_GROUPS)    /* output channels of a group */
#define CBG ((CG + B - 1) / B)       /* input-channel blocks of a group's weights */

/* exp in double without a libm: x = k*ln2 + r, |r| <= ln2/2, Taylor series of exp(r). */
static double ref_exp(double x) {
  if (x < -700.0) return 0.0;
  const double ln2 = 0.69314718055994530942;
  double kf = x / ln2;
  int64_t k = (int64_t)(kf < 0 ? kf - 0.5 : kf + 0.5);
  double r = x - (double)k * ln2, term = 1.0, sum = 1.0;
  for (int i = 1; i < 30; ++i) {
    term *= r / i;
    sum += term;
  }
  for (; k > 0; --k) sum *= 2.0;
  for (; k < 0; ++k) sum *= 0.5;
  return sum;
}

/* erf(z) = 2/sqrt(pi) exp(-z^2) sum_n 2^n z^(2n+1) / (1*3*...*(2n+1)): positive terms, no
 * cancellation; |erf| = 1 in double beyond |z| = 6. */
static double ref_erf(double z) {
  double a = z < 0 ? -z : z;
  if (a > 6.0) return z < 0 ? -1.0 : 1.0;
  double term = a, sum = a;
  for (int n = 1; n < 200 && term > 1e-17 * sum; ++n) {
    term *= 2.0 * a * a / (2 * n + 1);
    sum += term;
  }
  double e = 1.1283791670955125739 * ref_exp(-a * a) * sum;
  return z < 0 ? -e : e;
}

static double ref_sigmoid(double x) { return 1.0 / (1.0 + ref_exp(-x)); }
static double ref_hardsigmoid(double x) {
  double y = x / 6.0 + 0.5;
  return y < 0 ? 0 : y > 1 ? 1 : y;
}

/* The activation of the epilogue (KESTREL_ACT_* of kestrel/kernel/math.h): 0 none, 1 relu,
 * 2 relu6, 3 gelu (erf form), 4 sigmoid, 5 silu, 6 hardswish, 7 hardsigmoid, 8 tanh, 9 gelu (tanh form). */
static double ref_activate(double x) {
  switch (CONV_ACT) {
    case 1: return x > 0 ? x : 0;
    case 2: return x < 0 ? 0 : x > 6 ? 6 : x;
    case 3: return 0.5 * x * (1.0 + ref_erf(x * 0.70710678118654752440));
    case 4: return ref_sigmoid(x);
    case 5: return x * ref_sigmoid(x);
    case 6: return x * ref_hardsigmoid(x);
    case 7: return ref_hardsigmoid(x);
    case 8: return 1.0 - 2.0 / (ref_exp(2.0 * x) + 1.0);
    case 9: {
      const double u = 0.79788456080286535588 * (x + 0.044715 * x * x * x);
      return x * (1.0 - 1.0 / (ref_exp(2.0 * u) + 1.0)); /* 0.5 x (1 + tanh u) */
    }
    default: return x;
  }
}

KESTREL_KERNEL(svc, args, num_args) {
  (void)svc;
  enum { kBiasArg = 2, kResidualArg = 2 + CONV_BIAS, kOutArg = 2 + CONV_BIAS + CONV_RESIDUAL };
  if (num_args != kOutArg + 1) return 2;
  for (int i = 0; i < num_args; ++i) {
    if (!args[i].data) return 2;
  }
  if (args[0].i64 != (int64_t)CONV_N * (CONV_PLAIN_IN ? CONV_C : CB * B) * CONV_H * CONV_W ||
      args[1].i64 != (int64_t)KB * CBG * CONV_R * CONV_S * B * B || args[kOutArg].i64 != (int64_t)CONV_N * KB * P * Q * B ||
      (CONV_BIAS && args[kBiasArg].i64 != (int64_t)KB * B) ||
      (CONV_RESIDUAL && args[kResidualArg].i64 != args[kOutArg].i64)) {
    return 2;
  }
  const float* in = (const float*)args[0].data;
  const float* w = (const float*)args[1].data;
  const float* bias = CONV_BIAS ? (const float*)args[kBiasArg].data : 0;
  const float* residual = CONV_RESIDUAL ? (const float*)args[kResidualArg].data : 0;
  float* out = (float*)args[kOutArg].data;
  for (int64_t n = 0; n < CONV_N; ++n) {
    for (int64_t k = 0; k < KB * B; ++k) {
      for (int64_t p = 0; p < P; ++p) {
        for (int64_t q = 0; q < Q; ++q) {
          const int64_t at = (((n * KB + k / B) * P + p) * Q + q) * B + k % B;
          if (k >= CONV_K) {
            out[at] = 0.0f;
            continue;
          }
          const int64_t c0 = k / KG * CG; /* the group's first input channel */
          double sum = 0.0;
          for (int64_t c = c0; c < c0 + CG; ++c) {
            for (int64_t r = 0; r < CONV_R; ++r) {
              int64_t h = p * CONV_STRIDE - CONV_PAD + r * CONV_DILATION;
              if (h < 0 || h >= CONV_H) continue;
              for (int64_t s = 0; s < CONV_S; ++s) {
                int64_t x = q * CONV_STRIDE - CONV_PAD + s * CONV_DILATION;
                if (x < 0 || x >= CONV_W) continue;
                sum += (double)in[CONV_PLAIN_IN ? ((n * CONV_C + c) * CONV_H + h) * CONV_W + x
                                                : (((n * CB + c / B) * CONV_H + h) * CONV_W + x) * B + c % B] *
                       (double)w[((((k / B * CBG + (c - c0) / B) * CONV_R + r) * CONV_S + s) * B + (c - c0) % B) * B +
                                 k % B];
              }
            }
          }
          if (CONV_BIAS) sum += (double)bias[k];
          if (CONV_RESIDUAL) sum += (double)residual[at];
          out[at] = (float)ref_activate(sum);
        }
      }
    }
  }
  return 0;
}
