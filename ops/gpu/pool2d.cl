// pool2d for OpenCL C 1.2: max or average pooling in the blocked-channel layout NCHWc
// (block 1: NCHW); padding never counts (a max ignores it, a mean divides by the
// positions inside the image); global pooling takes the whole plane. Lanes past C are 0.
//
// One work-item per output element out[n][cb][p][q][lane], in memory order, so that
// neighbouring work-items write neighbouring floats; POOL_THREADS work-items per group.
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
#define TOTAL ((long)POOL_N * CB * P * Q * B)

__kernel __attribute__((reqd_work_group_size(POOL_THREADS, 1, 1)))
void pool2d(__global const float* restrict in, __global float* restrict out) {
  const long i = get_global_id(0);
  if (i >= TOTAL) return;
  const int lane = i % B, q = (i / B) % Q, p = (i / ((long)B * Q)) % P;
  const long plane = i / ((long)B * Q * P);  // n * CB + cb
  if ((plane % CB) * B + lane >= POOL_C) {
    out[i] = 0.0f;
    return;
  }
  const int h0 = p * STRIDE - PAD, x0 = q * STRIDE - PAD;
  const int hs = max(h0, 0), he = min(h0 + R, POOL_H), xs = max(x0, 0), xe = min(x0 + S, POOL_W);
  __global const float* src = in + plane * POOL_H * POOL_W * B + lane;
  float acc = POOL_KIND == 0 ? -FLT_MAX : 0.0f;
  for (int h = hs; h < he; ++h) {
    for (int x = xs; x < xe; ++x) {
      const float v = src[((long)h * POOL_W + x) * B];
      acc = POOL_KIND == 0 ? fmax(acc, v) : acc + v;
    }
  }
  out[i] = POOL_KIND == 0 ? acc : acc / (float)((he - hs) * (xe - xs));
}
