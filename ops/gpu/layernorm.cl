// layernorm for OpenCL C 1.2: v = x (+ residual), y = (v - mean) / sqrt(var + eps) * gamma
// + beta per row (biased variance).
//
// One work-group of LAYERNORM_THREADS work-items per row, columns strided by THREADS;
// the sum and then the sum of squared deviations are combined by tree reductions in
// local memory (two passes: no cancellation when the mean is large).
//
// Defines: LAYERNORM_ROWS, LAYERNORM_COLS, LAYERNORM_EPSILON (a float literal),
// LAYERNORM_RESIDUAL (0/1), LAYERNORM_THREADS (a power of two).

#define COLS LAYERNORM_COLS
#define THREADS LAYERNORM_THREADS

float reduce_sum(__local float* scratch, float value) {
  const int lid = get_local_id(0);
  scratch[lid] = value;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int span = THREADS / 2; span > 0; span /= 2) {
    if (lid < span) scratch[lid] += scratch[lid + span];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  const float out = scratch[0];
  barrier(CLK_LOCAL_MEM_FENCE);  // scratch is reused by the next reduction
  return out;
}

__kernel __attribute__((reqd_work_group_size(THREADS, 1, 1)))
void layernorm(__global const float* restrict x, __global const float* restrict gamma,
               __global const float* restrict beta,
#if LAYERNORM_RESIDUAL
               __global const float* restrict residual,
#endif
               __global float* restrict y) {
  __local float scratch[THREADS];
  const int lid = get_local_id(0);
  const size_t base = (size_t)get_group_id(0) * COLS;
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
  const float inv_std = 1.0f / sqrt(reduce_sum(scratch, q) / (float)COLS + LAYERNORM_EPSILON);
  for (int c = lid; c < COLS; c += THREADS) y[base + c] = (V(c) - mean) * inv_std * gamma[c] + beta[c];
#undef V
}
