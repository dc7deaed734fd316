// softmax for OpenCL C 1.2: y[r][c] = e^(x[r][c] - max_r) / sum_c e^(x[r][c] - max_r).
//
// One work-group of SOFTMAX_THREADS work-items per row: each takes the columns
// lid, lid + THREADS, ... (neighbouring work-items read neighbouring floats); the row's
// maximum and sum are combined by tree reductions in local memory; the exponentials are
// recomputed when y is written.
//
// Defines: SOFTMAX_ROWS, SOFTMAX_COLS, SOFTMAX_THREADS (a power of two).

#define COLS SOFTMAX_COLS
#define THREADS SOFTMAX_THREADS

// The maximum (is_max) or the sum of every work-item's `value`, returned to all of them.
float reduce(__local float* scratch, float value, int is_max) {
  const int lid = get_local_id(0);
  scratch[lid] = value;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int span = THREADS / 2; span > 0; span /= 2) {
    if (lid < span) {
      scratch[lid] = is_max ? fmax(scratch[lid], scratch[lid + span]) : scratch[lid] + scratch[lid + span];
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  const float out = scratch[0];
  barrier(CLK_LOCAL_MEM_FENCE);  // scratch is reused by the next reduction
  return out;
}

__kernel __attribute__((reqd_work_group_size(THREADS, 1, 1)))
void softmax(__global const float* restrict x, __global float* restrict y) {
  __local float scratch[THREADS];
  const int lid = get_local_id(0);
  __global const float* xr = x + (size_t)get_group_id(0) * COLS;
  __global float* yr = y + (size_t)get_group_id(0) * COLS;
  float m = -FLT_MAX;
  for (int c = lid; c < COLS; c += THREADS) m = fmax(m, xr[c]);
  m = reduce(scratch, m, 1);
  float s = 0.0f;
  for (int c = lid; c < COLS; c += THREADS) s += exp(xr[c] - m);
  const float inv = 1.0f / reduce(scratch, s, 0);
  for (int c = lid; c < COLS; c += THREADS) yr[c] = exp(xr[c] - m) * inv;
}
