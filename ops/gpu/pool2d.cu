// pool2d for CUDA (NVRTC): max or average pooling in the blocked-channel layout NCHWc
// (block 1: NCHW); padding never counts (a max ignores it, a mean divides by the
// positions inside the image); global pooling takes the whole plane. Lanes past C are 0.
//
// Same scheme as pool2d.cl: one thread per output element out[n][cb][p][q][lane], in
// memory order; POOL_THREADS threads per block.
//
// Defines: POOL_N, POOL_C, POOL_H, POOL_W, POOL_R, POOL_S, POOL_STRIDE, POOL_PAD,
// POOL_KIND (0 max, 1 average), POOL_GLOBAL, POOL_BLOCK, POOL_THREADS.

#define B POOL_BLOCK
#define CB ((POOL_C + B - 1) / B)
#if POOL_GLOBAL
#define R POOL_H
#define S POOL_W
#define STRIDE 1
#define PAD 0
#else
#define R POOL_R
#define S POOL_S
#define STRIDE POOL_STRIDE
#define PAD POOL_PAD
#endif
#define P ((POOL_H + 2 * PAD - R) / STRIDE + 1)
#define Q ((POOL_W + 2 * PAD - S) / STRIDE + 1)
#define TOTAL ((long long)POOL_N * CB * P * Q * B)

extern "C" __global__ void __launch_bounds__(POOL_THREADS)
pool2d(const float* __restrict__ in, float* __restrict__ out) {
  const long long i = (long long)blockIdx.x * POOL_THREADS + threadIdx.x;
  if (i >= TOTAL) return;
  const int lane = i % B, q = (i / B) % Q, p = (i / ((long long)B * Q)) % P;
  const long long plane = i / ((long long)B * Q * P);  // n * CB + cb
  if ((plane % CB) * B + lane >= POOL_C) {
    out[i] = 0.0f;
    return;
  }
  const int h0 = p * STRIDE - PAD, x0 = q * STRIDE - PAD;
  const int hs = max(h0, 0), he = min(h0 + R, POOL_H), xs = max(x0, 0), xe = min(x0 + S, POOL_W);
  const float* src = in + plane * POOL_H * POOL_W * B + lane;
  float acc = POOL_KIND == 0 ? -3.402823466e38f : 0.0f;
  for (int h = hs; h < he; ++h) {
    for (int x = xs; x < xe; ++x) {
      const float v = src[((long long)h * POOL_W + x) * B];
      acc = POOL_KIND == 0 ? fmaxf(acc, v) : acc + v;
    }
  }
  out[i] = POOL_KIND == 0 ? acc : acc / (float)((he - hs) * (xe - xs));
}
