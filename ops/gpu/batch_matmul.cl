// batch_matmul for OpenCL C 1.2: C[b][M][N] = op(A[b]) * op(B[b]) for b < BATCH, fp32
// row-major; A is [BATCH][M][K] ([BATCH][K][M] with BMM_TRANS_A), B [BATCH][K][N]
// ([BATCH][N][K] with BMM_TRANS_B).
//
// Work-group (x, y, z) computes the BMM_BM x BMM_BN block (y, x) of batch matrix z with
// (BN/TN) x (BM/TM) work-items; each accumulates a TM x TN thread tile in registers, rows
// ty + i*(BM/TM) and columns tx + j*(BN/TN), so neighbouring work-items store
// neighbouring floats. Per step the work-group stages BK-deep tiles of A and B in local
// memory, reading along whichever dimension is contiguous in global memory (k, or m / n
// for a transposed operand). Bounds-checked edges: any shape works.
//
// Defines: BMM_BATCH, BMM_M, BMM_N, BMM_K, BMM_TRANS_A, BMM_TRANS_B (0 when absent),
// BMM_BM, BMM_BN, BMM_BK, BMM_TM, BMM_TN, BMM_UNROLL.

#ifndef BMM_TRANS_A
#define BMM_TRANS_A 0
#endif
#ifndef BMM_TRANS_B
#define BMM_TRANS_B 0
#endif
#define M BMM_M
#define N BMM_N
#define K BMM_K
#define BM BMM_BM
#define BN BMM_BN
#define BK BMM_BK
#define TM BMM_TM
#define TN BMM_TN
#define THREADS_X (BN / TN)
#define THREADS_Y (BM / TM)
#define THREADS (THREADS_X * THREADS_Y)

#if BMM_TRANS_A
#define A_AT(i, k) A[(size_t)(k) * M + (i)]
#else
#define A_AT(i, k) A[(size_t)(i) * K + (k)]
#endif
#if BMM_TRANS_B
#define B_AT(k, j) B[(size_t)(j) * K + (k)]
#else
#define B_AT(k, j) B[(size_t)(k) * N + (j)]
#endif

#define KS_PRAGMA(x) _Pragma(#x)
#define KS_UNROLL(n) KS_PRAGMA(unroll n)

__kernel __attribute__((reqd_work_group_size(THREADS_X, THREADS_Y, 1)))
void batch_matmul(__global const float* restrict A, __global const float* restrict B, __global float* restrict C) {
  const int tx = get_local_id(0), ty = get_local_id(1), lid = ty * THREADS_X + tx;
  const int block_row = get_group_id(1) * BM, block_col = get_group_id(0) * BN;
  const size_t batch = get_group_id(2);
  A += batch * M * K;
  B += batch * K * N;
  C += batch * M * N;
  float acc[TM][TN];
  for (int i = 0; i < TM; ++i)
    for (int j = 0; j < TN; ++j) acc[i][j] = 0.0f;

  __local float As[BK][BM];
  __local float Bs[BK][BN];
  for (int k0 = 0; k0 < K; k0 += BK) {
    for (int idx = lid; idx < BM * BK; idx += THREADS) {
#if BMM_TRANS_A
      const int r = idx % BM, kk = idx / BM;
#else
      const int r = idx / BK, kk = idx % BK;
#endif
      const int gr = block_row + r, gk = k0 + kk;
      As[kk][r] = gr < M && gk < K ? A_AT(gr, gk) : 0.0f;
    }
    for (int idx = lid; idx < BK * BN; idx += THREADS) {
#if BMM_TRANS_B
      const int c = idx / BK, kk = idx % BK;
#else
      const int c = idx % BN, kk = idx / BN;
#endif
      const int gc = block_col + c, gk = k0 + kk;
      Bs[kk][c] = gc < N && gk < K ? B_AT(gk, gc) : 0.0f;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    KS_UNROLL(BMM_UNROLL)
    for (int kk = 0; kk < BK; ++kk) {
      float a[TM], b[TN];
      for (int i = 0; i < TM; ++i) a[i] = As[kk][ty + i * THREADS_Y];
      for (int j = 0; j < TN; ++j) b[j] = Bs[kk][tx + j * THREADS_X];
      for (int i = 0; i < TM; ++i)
        for (int j = 0; j < TN; ++j) acc[i][j] = mad(a[i], b[j], acc[i][j]);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }

  for (int i = 0; i < TM; ++i) {
    const int gr = block_row + ty + i * THREADS_Y;
    if (gr >= M) continue;
    for (int j = 0; j < TN; ++j) {
      const int gc = block_col + tx + j * THREADS_X;
      if (gc < N) C[(size_t)gr * N + gc] = acc[i][j];
    }
  }
}
