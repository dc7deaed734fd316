// gemm for OpenCL C 1.2: C[M][N] = A[M][K] * B[K][N], fp32 row-major.
//
// One work-group computes a GEMM_BM x GEMM_BN block of C with (BN/TN) x (BM/TM)
// work-items; each work-item accumulates a TM x TN thread tile in registers. Its rows
// are ty + i*(BM/TM) and its columns come in chunks of GEMM_VEC consecutive floats,
// tx*VEC + j*(BN/TN)*VEC, so neighbouring work-items touch neighbouring memory.
// With GEMM_STAGE the A and B tiles of depth GEMM_BK are first copied into local memory
// by the whole work-group (GEMM_VEC-wide vector loads); without it every work-item
// reads global memory directly. GEMM_UNROLL unrolls the inner k loop. Edges are
// handled with bounds checks, so any M, N, K works.
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

#define KS_CAT_(a, b) a##b
#define KS_CAT(a, b) KS_CAT_(a, b)
#define KS_PRAGMA(x) _Pragma(#x)
#define KS_UNROLL(n) KS_PRAGMA(unroll n)

// Copies VEC floats from global memory to `dst`, zero from the `available`th on.
void load_chunk(__global const float* src, int available, float* dst) {
#if VEC > 1
  if (available >= VEC) {
    KS_CAT(vstore, VEC)(KS_CAT(vload, VEC)(0, src), 0, dst);
    return;
  }
#endif
  for (int v = 0; v < VEC; ++v) dst[v] = v < available ? src[v] : 0.0f;
}

__kernel __attribute__((reqd_work_group_size(THREADS_X, THREADS_Y, 1)))
void gemm(__global const float* restrict A, __global const float* restrict B, __global float* restrict C) {
  const int tx = get_local_id(0), ty = get_local_id(1);
  const int block_row = get_group_id(1) * BM, block_col = get_group_id(0) * BN;
  float acc[TM][TN];
  for (int i = 0; i < TM; ++i)
    for (int j = 0; j < TN; ++j) acc[i][j] = 0.0f;

#if GEMM_STAGE
  __local float As[BK][BM];  // transposed: a column of the tile is contiguous
  __local float Bs[BK][BN];
  const int lid = ty * THREADS_X + tx;
  for (int k0 = 0; k0 < K; k0 += BK) {
    for (int idx = lid; idx < BM * (BK / VEC); idx += THREADS) {
      const int r = idx / (BK / VEC), kk = (idx % (BK / VEC)) * VEC;
      const int gr = block_row + r, gk = k0 + kk;
      float chunk[VEC];
      load_chunk(A + (size_t)gr * K + gk, gr < M ? K - gk : 0, chunk);
      for (int v = 0; v < VEC; ++v) As[kk + v][r] = chunk[v];
    }
    for (int idx = lid; idx < BK * (BN / VEC); idx += THREADS) {
      const int kk = idx / (BN / VEC), c = (idx % (BN / VEC)) * VEC;
      const int gk = k0 + kk, gc = block_col + c;
      float chunk[VEC];
      load_chunk(B + (size_t)gk * N + gc, gk < K ? N - gc : 0, chunk);
      for (int v = 0; v < VEC; ++v) Bs[kk][c + v] = chunk[v];
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    KS_UNROLL(GEMM_UNROLL)
    for (int kk = 0; kk < BK; ++kk) {
      float a[TM], b[TN];
      for (int i = 0; i < TM; ++i) a[i] = As[kk][ty + i * THREADS_Y];
      for (int j = 0; j < TN / VEC; ++j)
        for (int v = 0; v < VEC; ++v) b[j * VEC + v] = Bs[kk][tx * VEC + j * THREADS_X * VEC + v];
      for (int i = 0; i < TM; ++i)
        for (int j = 0; j < TN; ++j) acc[i][j] = mad(a[i], b[j], acc[i][j]);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }
#else
  KS_UNROLL(GEMM_UNROLL)
  for (int k = 0; k < K; ++k) {
    float a[TM], b[TN];
    for (int i = 0; i < TM; ++i) {
      const int gr = block_row + ty + i * THREADS_Y;
      a[i] = gr < M ? A[(size_t)gr * K + k] : 0.0f;
    }
    for (int j = 0; j < TN / VEC; ++j) {
      const int gc = block_col + tx * VEC + j * THREADS_X * VEC;
      load_chunk(B + (size_t)k * N + gc, N - gc, b + j * VEC);
    }
    for (int i = 0; i < TM; ++i)
      for (int j = 0; j < TN; ++j) acc[i][j] = mad(a[i], b[j], acc[i][j]);
  }
#endif

  for (int i = 0; i < TM; ++i) {
    const int gr = block_row + ty + i * THREADS_Y;
    if (gr >= M) continue;
    for (int j = 0; j < TN / VEC; ++j) {
      const int gc = block_col + tx * VEC + j * THREADS_X * VEC;
      for (int v = 0; v < VEC; ++v) {
        if (gc + v < N) C[(size_t)gr * N + gc + v] = acc[i][j * VEC + v];
      }
    }
  }
}
