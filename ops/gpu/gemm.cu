// gemm for CUDA (NVRTC): C[M][N] = A[M][K] * B[K][N], fp32 row-major.
//
// Same scheme as gemm.cl: one block computes a GEMM_BM x GEMM_BN block of C with
// (BN/TN) x (BM/TM) threads, each accumulating a TM x TN thread tile in registers, rows
// ty + i*(BM/TM), columns in GEMM_VEC-wide chunks tx*VEC + j*(BN/TN)*VEC. GEMM_STAGE
// copies the A and B tiles of depth GEMM_BK into shared memory first (float2/float4
// loads where aligned); GEMM_UNROLL unrolls the inner k loop. Bounds-checked edges.
//
// Defines: GEMM_M, GEMM_N, GEMM_K, GEMM_BM, GEMM_BN, GEMM_BK, GEMM_TM, GEMM_TN,
// GEMM_STAGE, GEMM_VEC (1, 2, 4), GEMM_UNROLL.

#define M GEMM_M
#define N GEMM_N
#define K GEMM_K
#define BM GEMM_BM
#define BN GEMM_BN
#define BK GEMM_BK
#define TM GEMM_TM
#define TN GEMM_TN
#define VEC GEMM_VEC
#define THREADS_X (BN / TN)
#define THREADS_Y (BM / TM)
#define THREADS (THREADS_X * THREADS_Y)

#define KS_PRAGMA(x) _Pragma(#x)
#define KS_UNROLL(n) KS_PRAGMA(unroll n)

// Copies VEC floats to `dst`, zero beyond `available`; one vector load when aligned.
__device__ __forceinline__ void load_chunk(const float* __restrict__ src, int available, float* dst) {
#if VEC == 4
  if (available >= 4 && (reinterpret_cast<unsigned long long>(src) & 15) == 0) {
    const float4 v = *reinterpret_cast<const float4*>(src);
    dst[0] = v.x; dst[1] = v.y; dst[2] = v.z; dst[3] = v.w;
    return;
  }
#elif VEC == 2
  if (available >= 2 && (reinterpret_cast<unsigned long long>(src) & 7) == 0) {
    const float2 v = *reinterpret_cast<const float2*>(src);
    dst[0] = v.x; dst[1] = v.y;
    return;
  }
#endif
#pragma unroll
  for (int v = 0; v < VEC; ++v) dst[v] = v < available ? src[v] : 0.0f;
}

extern "C" __global__ void __launch_bounds__(THREADS)
gemm(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C) {
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int block_row = blockIdx.y * BM, block_col = blockIdx.x * BN;
  float acc[TM][TN];
#pragma unroll
  for (int i = 0; i < TM; ++i)
#pragma unroll
    for (int j = 0; j < TN; ++j) acc[i][j] = 0.0f;

#if GEMM_STAGE
  __shared__ float As[BK][BM];
  __shared__ float Bs[BK][BN];
  const int lid = ty * THREADS_X + tx;
  for (int k0 = 0; k0 < K; k0 += BK) {
    for (int idx = lid; idx < BM * (BK / VEC); idx += THREADS) {
      const int r = idx / (BK / VEC), kk = (idx % (BK / VEC)) * VEC;
      const int gr = block_row + r, gk = k0 + kk;
      float chunk[VEC];
      load_chunk(A + (size_t)gr * K + gk, gr < M ? K - gk : 0, chunk);
#pragma unroll
      for (int v = 0; v < VEC; ++v) As[kk + v][r] = chunk[v];
    }
    for (int idx = lid; idx < BK * (BN / VEC); idx += THREADS) {
      const int kk = idx / (BN / VEC), c = (idx % (BN / VEC)) * VEC;
      const int gk = k0 + kk, gc = block_col + c;
      float chunk[VEC];
      load_chunk(B + (size_t)gk * N + gc, gk < K ? N - gc : 0, chunk);
#pragma unroll
      for (int v = 0; v < VEC; ++v) Bs[kk][c + v] = chunk[v];
    }
    __syncthreads();
    KS_UNROLL(GEMM_UNROLL)
    for (int kk = 0; kk < BK; ++kk) {
      float a[TM], b[TN];
#pragma unroll
      for (int i = 0; i < TM; ++i) a[i] = As[kk][ty + i * THREADS_Y];
#pragma unroll
      for (int j = 0; j < TN / VEC; ++j)
#pragma unroll
        for (int v = 0; v < VEC; ++v) b[j * VEC + v] = Bs[kk][tx * VEC + j * THREADS_X * VEC + v];
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
    }
    __syncthreads();
  }
#else
  KS_UNROLL(GEMM_UNROLL)
  for (int k = 0; k < K; ++k) {
    float a[TM], b[TN];
#pragma unroll
    for (int i = 0; i < TM; ++i) {
      const int gr = block_row + ty + i * THREADS_Y;
      a[i] = gr < M ? A[(size_t)gr * K + k] : 0.0f;
    }
#pragma unroll
    for (int j = 0; j < TN / VEC; ++j) {
      const int gc = block_col + tx * VEC + j * THREADS_X * VEC;
      load_chunk(B + (size_t)k * N + gc, N - gc, b + j * VEC);
    }
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
      for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
  }
#endif

#pragma unroll
  for (int i = 0; i < TM; ++i) {
    const int gr = block_row + ty + i * THREADS_Y;
    if (gr >= M) continue;
#pragma unroll
    for (int j = 0; j < TN / VEC; ++j) {
      const int gc = block_col + tx * VEC + j * THREADS_X * VEC;
#pragma unroll
      for (int v = 0; v < VEC; ++v) {
        if (gc + v < N) C[(size_t)gr * N + gc + v] = acc[i][j * VEC + v];
      }
    }
  }
}
