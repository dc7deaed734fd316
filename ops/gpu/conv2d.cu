// conv2d for CUDA (NVRTC): direct convolution, fp32 NCHW, with stride, zero padding
// and dilation, optionally grouped. out[N][K][P][Q] = input[N][C][H][W] * weight[K][C/G][R][S]:
// output channel k of group g = k / (K/G) sums over the input channels g*C/G .. (g+1)*C/G.
//
// A block computes CONV_BK output channels x CONV_BQ output columns of one output
// row (n, p), with (BQ/TQ) x (BK/TK) threads; each thread accumulates TK channels
// x TQ columns in registers (channels ty + i*(BK/TK), columns tx + j*(BQ/TQ), so that
// neighbouring threads read neighbouring inputs). With CONV_STAGE the weights of the
// block's channels for CONV_CC input channels at a time are first copied into local
// memory; without it they are read from global memory. CONV_UNROLL unrolls the filter
// column loop. Blocks: x = column blocks of every (n, p) row, y = channel blocks of every
// group (a block's channels lie within one group).
// Same scheme as conv2d.cl.
//
// Defines: CONV_{N,C,H,W,K,R,S,STRIDE,PAD,DILATION}, optional CONV_GROUPS (default 1),
// CONV_{BQ,BK,TQ,TK,CC,STAGE,UNROLL}.

#ifndef CONV_GROUPS
#define CONV_GROUPS 1
#endif

#define P ((CONV_H + 2 * CONV_PAD - CONV_DILATION * (CONV_R - 1) - 1) / CONV_STRIDE + 1)
#define Q ((CONV_W + 2 * CONV_PAD - CONV_DILATION * (CONV_S - 1) - 1) / CONV_STRIDE + 1)
#define BQ CONV_BQ
#define BK CONV_BK
#define TQ CONV_TQ
#define TK CONV_TK
#define CC CONV_CC
#define TX (BQ / TQ)
#define TY (BK / TK)
#define THREADS (TX * TY)
#define RS (CONV_R * CONV_S)
#define Q_BLOCKS ((Q + BQ - 1) / BQ)
#define CG (CONV_C / CONV_GROUPS)          // input channels of a group
#define KG (CONV_K / CONV_GROUPS)          // output channels of a group
#define K_BLOCKS ((KG + BK - 1) / BK)      // channel blocks of a group

#define KS_PRAGMA(x) _Pragma(#x)
#define KS_UNROLL(n) KS_PRAGMA(unroll n)

extern "C" __global__ void __launch_bounds__(THREADS)
conv2d(const float* __restrict__ in, const float* __restrict__ w, float* __restrict__ out) {
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int row = blockIdx.x / Q_BLOCKS;  // n * P + p
  const int q0 = (blockIdx.x % Q_BLOCKS) * BQ;
  const int group = blockIdx.y / K_BLOCKS;
  const int k0 = blockIdx.y % K_BLOCKS * BK;  // within the group
  const int n = row / P, p = row % P;
  float acc[TK][TQ];
  for (int i = 0; i < TK; ++i)
    for (int j = 0; j < TQ; ++j) acc[i][j] = 0.0f;
  int x0[TQ];  // input column of filter column 0 for each of the thread's output columns
  bool valid_q[TQ];
  for (int j = 0; j < TQ; ++j) {
    const int q = q0 + tx + j * TX;
    valid_q[j] = q < Q;
    x0[j] = q * CONV_STRIDE - CONV_PAD;
  }

#if CONV_STAGE
  __shared__ float ws[BK][CC * RS];
  const int lid = ty * TX + tx;
  for (int c0 = 0; c0 < CG; c0 += CC) {
    for (int idx = lid; idx < BK * CC * RS; idx += THREADS) {
      const int kk = idx / (CC * RS), rest = idx % (CC * RS);
      const int gk = k0 + kk, gc = c0 + rest / RS;
      ws[kk][rest] = gk < KG && gc < CG ? w[((size_t)(group * KG + gk) * CG + gc) * RS + rest % RS] : 0.0f;
    }
    __syncthreads();
    for (int cc = 0; cc < CC && c0 + cc < CG; ++cc) {
      const float* plane = in + ((size_t)n * CONV_C + group * CG + c0 + cc) * CONV_H * CONV_W;
      for (int r = 0; r < CONV_R; ++r) {
        const int h = p * CONV_STRIDE - CONV_PAD + r * CONV_DILATION;
        if (h < 0 || h >= CONV_H) continue;
        KS_UNROLL(CONV_UNROLL)
        for (int s = 0; s < CONV_S; ++s) {
          float a[TQ];
          for (int j = 0; j < TQ; ++j) {
            const int x = x0[j] + s * CONV_DILATION;
            a[j] = valid_q[j] && x >= 0 && x < CONV_W ? plane[h * CONV_W + x] : 0.0f;
          }
          for (int i = 0; i < TK; ++i) {
            const float wv = ws[ty + i * TY][(cc * CONV_R + r) * CONV_S + s];
            for (int j = 0; j < TQ; ++j) acc[i][j] = fmaf(wv, a[j], acc[i][j]);
          }
        }
      }
    }
    __syncthreads();
  }
#else
  for (int c = 0; c < CG; ++c) {
    const float* plane = in + ((size_t)n * CONV_C + group * CG + c) * CONV_H * CONV_W;
    for (int r = 0; r < CONV_R; ++r) {
      const int h = p * CONV_STRIDE - CONV_PAD + r * CONV_DILATION;
      if (h < 0 || h >= CONV_H) continue;
      KS_UNROLL(CONV_UNROLL)
      for (int s = 0; s < CONV_S; ++s) {
        float a[TQ];
        for (int j = 0; j < TQ; ++j) {
          const int x = x0[j] + s * CONV_DILATION;
          a[j] = valid_q[j] && x >= 0 && x < CONV_W ? plane[h * CONV_W + x] : 0.0f;
        }
        for (int i = 0; i < TK; ++i) {
          const int k = k0 + ty + i * TY;
          const float wv = k < KG ? w[(((size_t)(group * KG + k) * CG + c) * CONV_R + r) * CONV_S + s] : 0.0f;
          for (int j = 0; j < TQ; ++j) acc[i][j] = fmaf(wv, a[j], acc[i][j]);
        }
      }
    }
  }
#endif

  for (int i = 0; i < TK; ++i) {
    const int k = k0 + ty + i * TY;
    if (k >= KG) continue;
    for (int j = 0; j < TQ; ++j) {
      if (valid_q[j]) out[(((size_t)n * CONV_K + group * KG + k) * P + p) * Q + q0 + tx + j * TX] = acc[i][j];
    }
  }
}
