// elementwise for OpenCL C 1.2: out[i] = a[i] op b[i] (kind 0 add, 1 sub, 2 mul) or f(a[i])
// (3 relu, 4 relu6, 5 gelu (erf form), 6 sigmoid, 7 tanh).
//
// Each work-group covers THREADS * ITEMS consecutive elements; work-item lid takes
// lid, lid + THREADS, ... so that neighbouring work-items touch neighbouring floats.
//
// Defines: ELEMENTWISE_N, ELEMENTWISE_KIND, ELEMENTWISE_THREADS, ELEMENTWISE_ITEMS.

#define N ELEMENTWISE_N
#define KIND ELEMENTWISE_KIND
#define THREADS ELEMENTWISE_THREADS
#define ITEMS ELEMENTWISE_ITEMS
#define BINARY (KIND <= 2)

float apply(float x, float y) {
#if KIND == 0
  return x + y;
#elif KIND == 1
  return x - y;
#elif KIND == 2
  return x * y;
#elif KIND == 3
  return fmax(x, 0.0f);
#elif KIND == 4
  return fmin(fmax(x, 0.0f), 6.0f);
#elif KIND == 5
  return 0.5f * x * (1.0f + erf(x * 0.70710678118654752f));
#elif KIND == 6
  return 1.0f / (1.0f + exp(-x));
#else
  return tanh(x);
#endif
}

__kernel __attribute__((reqd_work_group_size(THREADS, 1, 1)))
void elementwise(__global const float* restrict a,
#if BINARY
                 __global const float* restrict b,
#endif
                 __global float* restrict out) {
  const size_t base = (size_t)get_group_id(0) * THREADS * ITEMS + get_local_id(0);
  for (int j = 0; j < ITEMS; ++j) {
    const size_t i = base + (size_t)j * THREADS;
    if (i < N) {
#if BINARY
      out[i] = apply(a[i], b[i]);
#else
      out[i] = apply(a[i], 0.0f);
#endif
    }
  }
}
