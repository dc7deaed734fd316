// elementwise for CUDA (NVRTC): out[i] = a[i] op b[i] (kind 0 add, 1 sub, 2 mul) or f(a[i])
// (3 relu, 4 relu6, 5 gelu (erf form), 6 sigmoid, 7 tanh).
//
// Same scheme as elementwise.cl: each block covers THREADS * ITEMS consecutive elements,
// thread lid takes lid, lid + THREADS, ... (coalesced).
//
// Defines: ELEMENTWISE_N, ELEMENTWISE_KIND, ELEMENTWISE_THREADS, ELEMENTWISE_ITEMS.

#define N ELEMENTWISE_N
#define KIND ELEMENTWISE_KIND
#define THREADS ELEMENTWISE_THREADS
#define ITEMS ELEMENTWISE_ITEMS
#define BINARY (KIND <= 2)

__device__ __forceinline__ float apply(float x, float y) {
#if KIND == 0
  return x + y;
#elif KIND == 1
  return x - y;
#elif KIND == 2
  return x * y;
#elif KIND == 3
  return fmaxf(x, 0.0f);
#elif KIND == 4
  return fminf(fmaxf(x, 0.0f), 6.0f);
#elif KIND == 5
  return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
#elif KIND == 6
  return 1.0f / (1.0f + expf(-x));
#else
  return tanhf(x);
#endif
}

extern "C" __global__ void __launch_bounds__(THREADS)
elementwise(const float* __restrict__ a,
#if BINARY
            const float* __restrict__ b,
#endif
            float* __restrict__ out) {
  const size_t base = (size_t)blockIdx.x * THREADS * ITEMS + threadIdx.x;
#pragma unroll
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
