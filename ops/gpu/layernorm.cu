// layernorm for CUDA (NVRTC): v = x (+ residual), y = (v - mean) / sqrt(var + eps) * gamma
// + beta per row (biased variance).
//
// Same scheme as layernorm.cl: one block of LAYERNORM_THREADS threads per row, columns
// strided by THREADS, the sum and then the sum of squared deviations combined by tree
// reductions in shared memory.
//
// Defines: LAYERNORM_ROWS, LAYERNORM_COLS, LAYERNORM_EPSILON (a float literal),
// LAYERNORM_RESIDUAL (0/1), LAYERNORM_THREADS (a power of two).

#define COLS LAYERNORM_COLS
#define THREADS LAYERNORM_THREADS

__device__ __forceinline__ float reduce_sum(float* scratch, float value) {
  const int lid = threadIdx.x;
  scratch[lid] = value;
  __syncthreads();
  for (int span = THREADS / 2; span > 0; span /= 2) {
    if (lid < span) scratch[lid] += scratch[lid + span];
    __syncthreads();
  }
  const float out = scratch[0];
  __syncthreads();  // scratch is reused by the next reduction
  return out;
}

extern "C" __global__ void __launch_bounds__(THREADS)
layernorm(const float* __restrict__ x, const float* __restrict__ gamma, const float* __restrict__ beta,
#if LAYERNORM_RESIDUAL
          const float* __restrict__ residual,
#endif
          float* __restrict__ y) {
  __shared__ float scratch[THREADS];
  const int lid = threadIdx.x;
  const size_t base = (size_t)blockIdx.x * COLS;
#if LAYERNORM_RESIDUAL
#define V(c) (x[base + (c)] + residual[base + (c)])
#else
#define V(c) x[base + (c)]
#endif
  float s = 0.0f;
  for (int c = lid; c < COLS; c += THREADS) s += V(c);
  const float mean = reduce_sum(scratch, s) / (float)COLS;
  float q = 0.0f;
  for (int c = lid; c < COLS; c += THREADS) {
    const float d = V(c) - mean;
    q += d * d;
  }
  const float inv_std = 1.0f / sqrtf(reduce_sum(scratch, q) / (float)COLS + LAYERNORM_EPSILON);
  for (int c = lid; c < COLS; c += THREADS) y[base + c] = (V(c) - mean) * inv_std * gamma[c] + beta[c];
#undef V
}
