// softmax for CUDA (NVRTC): y[r][c] = e^(x[r][c] - max_r) / sum_c e^(x[r][c] - max_r).
//
// Same scheme as softmax.cl: one block of SOFTMAX_THREADS threads per row, columns
// strided by THREADS, the maximum and the sum combined by tree reductions in shared
// memory, the exponentials recomputed when y is written.
//
// Defines: SOFTMAX_ROWS, SOFTMAX_COLS, SOFTMAX_THREADS (a power of two).

#define COLS SOFTMAX_COLS
#define THREADS SOFTMAX_THREADS

// The maximum (is_max) or the sum of every thread's `value`, returned to all of them.
__device__ __forceinline__ float reduce(float* scratch, float value, bool is_max) {
  const int lid = threadIdx.x;
  scratch[lid] = value;
  __syncthreads();
  for (int span = THREADS / 2; span > 0; span /= 2) {
    if (lid < span) {
      scratch[lid] = is_max ? fmaxf(scratch[lid], scratch[lid + span]) : scratch[lid] + scratch[lid + span];
    }
    __syncthreads();
  }
  const float out = scratch[0];
  __syncthreads();  // scratch is reused by the next reduction
  return out;
}

extern "C" __global__ void __launch_bounds__(THREADS)
softmax(const float* __restrict__ x, float* __restrict__ y) {
  __shared__ float scratch[THREADS];
  const int lid = threadIdx.x;
  const float* xr = x + (size_t)blockIdx.x * COLS;
  float* yr = y + (size_t)blockIdx.x * COLS;
  float m = -3.402823466e38f;
  for (int c = lid; c < COLS; c += THREADS) m = fmaxf(m, xr[c]);
  m = reduce(scratch, m, true);
  float s = 0.0f;
  for (int c = lid; c < COLS; c += THREADS) s += expf(xr[c] - m);
  const float inv = 1.0f / reduce(scratch, s, false);
  for (int c = lid; c < COLS; c += THREADS) yr[c] = expf(xr[c] - m) * inv;
}
