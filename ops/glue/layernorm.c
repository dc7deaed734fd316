/* layernorm.c: layer normalisation of each row of an fp32 matrix, for the CPU backend:
 *   v = x[r] (+ residual[r]),  y[r][c] = (v[c] - mean(v)) / sqrt(var(v) + eps) * gamma[c] + beta[c]
 * (var: the biased variance, mean of (v - mean)^2, as ONNX LayerNormalization and BERT).
 *
 * Freestanding C specialised by #defines (see ops/src/layernorm.cpp):
 *   workload  LAYERNORM_ROWS LAYERNORM_COLS LAYERNORM_EPSILON (a float literal)
 *             LAYERNORM_RESIDUAL (1: a second input is added before normalising)
 *   LAYERNORM_VEC     floats per vector (1 = scalar)
 *   LAYERNORM_UNROLL  vectors per loop step (independent partial sums)
 *   LAYERNORM_GRAIN   rows per parallel_for task
 * Three passes per row: the sum (writing v into y when there is a residual), the sum of
 * squared deviations (two passes, not sum and sum of squares: no cancellation when the
 * mean is large), then the normalised, scaled and shifted output.
 * Arguments: x, gamma, beta, residual (with LAYERNORM_RESIDUAL), y. Returns 0, or 2 on bad
 * arguments. */
#include "kestrel/kernel/abi.h"
#include "kestrel/kernel/math.h"

#if !defined(LAYERNORM_ROWS) || !defined(LAYERNORM_COLS) || !defined(LAYERNORM_EPSILON) || \
    !defined(LAYERNORM_RESIDUAL) || !defined(LAYERNORM_VEC) || !defined(LAYERNORM_UNROLL) || !defined(LAYERNORM_GRAIN)
#error "layernorm.c needs LAYERNORM_{ROWS,COLS,EPSILON,RESIDUAL,VEC,UNROLL,GRAIN}"
#endif

#define ROWS ((int64_t)LAYERNORM_ROWS)
#define COLS ((int64_t)LAYERNORM_COLS)
#define VEC LAYERNORM_VEC
#define UNROLL LAYERNORM_UNROLL
#define STEP (VEC * UNROLL)
#define KESTREL_PRAGMA(x) _Pragma(#x)
#define UNROLL_FULL KESTREL_PRAGMA(clang loop unroll(full))
#define INLINE static inline __attribute__((always_inline))

typedef float vf __attribute__((vector_size(VEC * sizeof(float))));

#define VLOAD(v, p) __builtin_memcpy(&(v), (p), sizeof(vf))
#define VSTORE(p, v) __builtin_memcpy((p), &(v), sizeof(vf))

typedef struct layernorm_ctx {
  const float* x;
  const float* gamma;
  const float* beta;
  const float* residual;
  float* y;
} layernorm_ctx;

/* The row's values: x, or x + residual (then also stored into y, which later passes read). */
INLINE void load_row(vf* v, const float* restrict x, const float* restrict res, float* y, int64_t c) {
  VLOAD(*v, x + c);
#if LAYERNORM_RESIDUAL
  vf w;
  VLOAD(w, res + c);
  *v += w;
  VSTORE(y + c, *v);
#else
  (void)res;
  (void)y;
#endif
}

INLINE void row(const layernorm_ctx* ctx, int64_t r) {
  const float* restrict x = ctx->x + r * COLS;
  const float* restrict res = LAYERNORM_RESIDUAL ? ctx->residual + r * COLS : 0;
  float* y = ctx->y + r * COLS; /* not restrict: with a residual, v_row below is y */
  /* Pass 1: the mean. */
  vf s[UNROLL];
  UNROLL_FULL for (int u = 0; u < UNROLL; ++u) s[u] = (vf){0};
  int64_t c = 0;
  for (; c + STEP <= COLS; c += STEP) {
    UNROLL_FULL for (int u = 0; u < UNROLL; ++u) {
      vf v;
      load_row(&v, x, res, y, c + u * VEC);
      s[u] += v;
    }
  }
  for (; c + VEC <= COLS; c += VEC) {
    vf v;
    load_row(&v, x, res, y, c);
    s[0] += v;
  }
  UNROLL_FULL for (int u = 1; u < UNROLL; ++u) s[0] += s[u];
  float sum = kestrel_hsum(s[0]);
  for (; c < COLS; ++c) {
    float v = x[c];
#if LAYERNORM_RESIDUAL
    v += res[c];
    y[c] = v;
#endif
    sum += v;
  }
  const float mean = sum / (float)COLS;
  /* From here on the row's values are in v_row: y (with a residual) or x. */
  const float* v_row = LAYERNORM_RESIDUAL ? y : x;
  /* Pass 2: the variance. */
  UNROLL_FULL for (int u = 0; u < UNROLL; ++u) s[u] = (vf){0};
  c = 0;
  for (; c + STEP <= COLS; c += STEP) {
    UNROLL_FULL for (int u = 0; u < UNROLL; ++u) {
      vf v;
      VLOAD(v, v_row + c + u * VEC);
      v -= mean;
      s[u] += v * v;
    }
  }
  for (; c + VEC <= COLS; c += VEC) {
    vf v;
    VLOAD(v, v_row + c);
    v -= mean;
    s[0] += v * v;
  }
  UNROLL_FULL for (int u = 1; u < UNROLL; ++u) s[0] += s[u];
  float squares = kestrel_hsum(s[0]);
  for (; c < COLS; ++c) squares += (v_row[c] - mean) * (v_row[c] - mean);
  const float inv_std = 1.0f / kestrel_sqrt(squares / (float)COLS + LAYERNORM_EPSILON);
  /* Pass 3: normalise, scale, shift. */
  c = 0;
  for (; c + VEC <= COLS; c += VEC) {
    vf v, g, b;
    VLOAD(v, v_row + c);
    VLOAD(g, ctx->gamma + c);
    VLOAD(b, ctx->beta + c);
    v = (v - mean) * inv_std * g + b;
    VSTORE(y + c, v);
  }
  for (; c < COLS; ++c) y[c] = (v_row[c] - mean) * inv_std * ctx->gamma[c] + ctx->beta[c];
}

static void task(int64_t t, void* p) {
  const int64_t end = (t + 1) * LAYERNORM_GRAIN < ROWS ? (t + 1) * LAYERNORM_GRAIN : ROWS;
  for (int64_t r = t * LAYERNORM_GRAIN; r < end; ++r) row((const layernorm_ctx*)p, r);
}

KESTREL_KERNEL(svc, args, num_args) {
  const int64_t out = 3 + LAYERNORM_RESIDUAL;
  if (num_args != out + 1 || !args[0].data || !args[1].data || !args[2].data || !args[out].data ||
      args[0].i64 != ROWS * COLS || args[1].i64 != COLS || args[2].i64 != COLS || args[out].i64 != ROWS * COLS) {
    return 2;
  }
  if (LAYERNORM_RESIDUAL && (!args[3].data || args[3].i64 != ROWS * COLS)) return 2;
  layernorm_ctx ctx = {(const float*)args[0].data, (const float*)args[1].data, (const float*)args[2].data,
                       LAYERNORM_RESIDUAL ? (const float*)args[3].data : 0, (float*)args[out].data};
  kestrel_parallel_for(svc, (ROWS + LAYERNORM_GRAIN - 1) / LAYERNORM_GRAIN, task, &ctx);
  return 0;
}
