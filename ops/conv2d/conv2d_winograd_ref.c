/* conv2d_winograd_ref.c: the reference for conv2d_winograd.c, in double, single-threaded,
 * one output tile and one output channel at a time:
 *   Y = A^T [ sum_c U[.][k][c] . (B^T d(c) B) ] A + bias + residual, then the activation,
 * with d(c) the (M+2)x(M+2) input patch of channel c under the MxM output tile (zero outside the
 * input), the matrices written out in full (no factored forms) and U as given: what the
 * kernel computes for any U. That the result is the 3x3 convolution of the weights U was
 * made from is the layout's business (deploy's winograd_weight transform), tested against
 * conv2d_nchwc's reference there. Needs CONV_{N,C,H,W,K,PAD,BLOCK}, optional
 * CONV_{M,BIAS,RESIDUAL,ACT}; prepended with ref_math.h. Same arguments as the kernel. */
#include "kestrel/kernel/abi.h"

#if !defined(CONV_N) || !defined(CONV_C) || !defined(CONV_H) || !defined(CONV_W) || !defined(CONV_K) || \
    !defined(CONV_PAD) || !defined(CONV_BLOCK)
#error "conv2d_winograd_ref.c needs CONV_{N,C,H,W,K,PAD,BLOCK}"
#endif
#ifndef CONV_M
#define CONV_M 4
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

#define B CONV_BLOCK
#define P (CONV_H + 2 * CONV_PAD - 2)
#define Q (CONV_W + 2 * CONV_PAD - 2)
#define CB ((CONV_C + B - 1) / B)
#define KB ((CONV_K + B - 1) / B)

#define M CONV_M
#define ALPHA (M + 2)
#if M == 4
static const double kBT[6][6] = {{4, 0, -5, 0, 1, 0}, {0, -4, -4, 1, 1, 0}, {0, 4, -4, -1, 1, 0},
                                 {0, -2, -1, 2, 1, 0}, {0, 2, -1, -2, 1, 0}, {0, 4, 0, -5, 0, 1}};
static const double kAT[4][6] = {{1, 1, 1, 1, 1, 0}, {0, 1, -1, 2, -2, 0}, {0, 1, 1, 4, 4, 0}, {0, 1, -1, 8, -8, 1}};
#elif M == 2
static const double kBT[4][4] = {{1, 0, -1, 0}, {0, 1, 1, 0}, {0, -1, 1, 0}, {0, 1, 0, -1}};
static const double kAT[2][4] = {{1, 1, 1, 0}, {0, 1, -1, -1}};
#else
#error "conv2d_winograd_ref.c: CONV_M must be 4 or 2"
#endif

/* The activation of the epilogue, from ref_math.h. */
static double ref_activate(double x) { return ref_activation(CONV_ACT, x); }

KESTREL_KERNEL(svc, args, num_args) {
  (void)svc;
  enum { kBiasArg = 2, kResidualArg = 2 + CONV_BIAS, kOutArg = 2 + CONV_BIAS + CONV_RESIDUAL };
  if (num_args != kOutArg + 1) return 2;
  for (int i = 0; i < num_args; ++i) {
    if (!args[i].data) return 2;
  }
  if (args[0].i64 != (int64_t)CONV_N * CB * B * CONV_H * CONV_W || args[1].i64 != (int64_t)ALPHA * ALPHA * KB * CB * B * B ||
      args[kOutArg].i64 != (int64_t)CONV_N * KB * P * Q * B || (CONV_BIAS && args[kBiasArg].i64 != (int64_t)KB * B) ||
      (CONV_RESIDUAL && args[kResidualArg].i64 != args[kOutArg].i64)) {
    return 2;
  }
  const float* in = (const float*)args[0].data;
  const float* u = (const float*)args[1].data;
  const float* bias = CONV_BIAS ? (const float*)args[kBiasArg].data : 0;
  const float* residual = CONV_RESIDUAL ? (const float*)args[kResidualArg].data : 0;
  float* out = (float*)args[kOutArg].data;
  for (int64_t n = 0; n < CONV_N; ++n) {
    for (int64_t k = 0; k < KB * B; ++k) {
      for (int64_t p0 = 0; p0 < P; p0 += M) {
        for (int64_t q0 = 0; q0 < Q; q0 += M) {
          double m[ALPHA][ALPHA] = {{0}};
          for (int64_t c = 0; c < CONV_C && k < CONV_K; ++c) {
            double d[ALPHA][ALPHA], t[ALPHA][ALPHA];
            for (int r = 0; r < ALPHA; ++r) {
              for (int s = 0; s < ALPHA; ++s) {
                const int64_t h = p0 - CONV_PAD + r, x = q0 - CONV_PAD + s;
                d[r][s] = h < 0 || h >= CONV_H || x < 0 || x >= CONV_W
                              ? 0.0
                              : (double)in[(((n * CB + c / B) * CONV_H + h) * CONV_W + x) * B + c % B];
              }
            }
            for (int i = 0; i < ALPHA; ++i) {
              for (int j = 0; j < ALPHA; ++j) {
                t[i][j] = 0.0;
                for (int e = 0; e < ALPHA; ++e) t[i][j] += kBT[i][e] * d[e][j];
              }
            }
            for (int i = 0; i < ALPHA; ++i) {
              for (int j = 0; j < ALPHA; ++j) {
                double v = 0.0;
                for (int e = 0; e < ALPHA; ++e) v += t[i][e] * kBT[j][e];
                m[i][j] += v * (double)u[((((int64_t)(i * ALPHA + j) * KB + k / B) * CB + c / B) * B + c % B) * B + k % B];
              }
            }
          }
          for (int r = 0; r < M && p0 + r < P; ++r) {
            for (int s = 0; s < M && q0 + s < Q; ++s) {
              const int64_t at = (((n * KB + k / B) * P + p0 + r) * Q + q0 + s) * B + k % B;
              if (k >= CONV_K) {
                out[at] = 0.0f;
                continue;
              }
              double y = 0.0;
              for (int i = 0; i < ALPHA; ++i) {
                for (int j = 0; j < ALPHA; ++j) y += kAT[r][i] * m[i][j] * kAT[s][j];
              }
              if (CONV_BIAS) y += (double)bias[k];
              if (CONV_RESIDUAL) y += (double)residual[at];
              out[at] = (float)ref_activate(y);
            }
          }
        }
      }
    }
  }
  return 0;
}
