/* softmax.c: the softmax of each row of an fp32 matrix, for the CPU backend:
 *   y[r][c] = e^(x[r][c] - m_r) / sum_j e^(x[r][j] - m_r),   m_r = max_j x[r][j]
 * with kestrel_exp of kestrel/kernel/math.h.
 *
 * Freestanding C specialised by #defines (see ops/src/softmax.cpp):
 *   workload  SOFTMAX_ROWS SOFTMAX_COLS, optional SOFTMAX_NAN_ZERO (0/1: a NaN output is
 *             written as 0, ONNX's Where(IsNaN(y), 0, y) that torch's attention exports
 *             put after the softmax for rows masked whole)
 *   SOFTMAX_VEC     floats per vector (1 = scalar)
 *   SOFTMAX_UNROLL  vectors per loop step (independent max / sum accumulators)
 *   SOFTMAX_GRAIN   rows per parallel_for task
 *   SOFTMAX_ONLINE  0: three passes over the row (max; exponentials stored in y and
 *                   summed; scale), 1: two (a running max with its rescaled sum, then
 *                   the exponentials scaled as they are written)
 * Arguments: x (input), y (output), both [ROWS][COLS]. Returns 0, or 2 on bad arguments. */
#include "kestrel/kernel/abi.h"
#include "kestrel/kernel/math.h"

#if !defined(SOFTMAX_ROWS) || !defined(SOFTMAX_COLS) || !defined(SOFTMAX_VEC) || !defined(SOFTMAX_UNROLL) || \
    !defined(SOFTMAX_GRAIN) || !defined(SOFTMAX_ONLINE)
#error "softmax.c needs SOFTMAX_{ROWS,COLS,VEC,UNROLL,GRAIN,ONLINE}"
#endif

#ifndef SOFTMAX_NAN_ZERO
#define SOFTMAX_NAN_ZERO 0
#endif

#define ROWS ((int64_t)SOFTMAX_ROWS)
#define COLS ((int64_t)SOFTMAX_COLS)
#define VEC SOFTMAX_VEC
#define UNROLL SOFTMAX_UNROLL
#define STEP (VEC * UNROLL)
#define KESTREL_PRAGMA(x) _Pragma(#x)
#define UNROLL_FULL KESTREL_PRAGMA(clang loop unroll(full))
#define INLINE static inline __attribute__((always_inline))

typedef float vf __attribute__((vector_size(VEC * sizeof(float))));

#define VLOAD(v, p) __builtin_memcpy(&(v), (p), sizeof(vf))
#define VSTORE(p, v) __builtin_memcpy((p), &(v), sizeof(vf))
/* The lowest finite float: a running maximum that has seen nothing yet (e^(it - x) is 0
 * for any row value x, where -infinity would give NaN for -infinity - -infinity). */
#define LOWEST (-3.40282347e38f)

/* An output as it is stored: with SOFTMAX_NAN_ZERO a NaN lane becomes 0. */
INLINE vf finish_v(vf v) {
#if SOFTMAX_NAN_ZERO
  return kestrel_select_(v != v, (vf){0}, v);
#else
  return v;
#endif
}
INLINE float finish_1(float v) { return SOFTMAX_NAN_ZERO && v != v ? 0.0f : v; }

#if !SOFTMAX_ONLINE
INLINE void scale_row(float* restrict y, float s) {
  int64_t c = 0;
  for (; c + VEC <= COLS; c += VEC) {
    vf v;
    VLOAD(v, y + c);
    v = finish_v(v * s);
    VSTORE(y + c, v);
  }
  for (; c < COLS; ++c) y[c] = finish_1(y[c] * s);
}

INLINE void row(const float* restrict x, float* restrict y) {
  /* Pass 1: the maximum. */
  vf m[UNROLL];
  UNROLL_FULL for (int u = 0; u < UNROLL; ++u) m[u] = (vf){0} + LOWEST;
  int64_t c = 0;
  for (; c + STEP <= COLS; c += STEP) {
    UNROLL_FULL for (int u = 0; u < UNROLL; ++u) {
      vf v;
      VLOAD(v, x + c + u * VEC);
      m[u] = kestrel_max(m[u], v);
    }
  }
  for (; c + VEC <= COLS; c += VEC) {
    vf v;
    VLOAD(v, x + c);
    m[0] = kestrel_max(m[0], v);
  }
  UNROLL_FULL for (int u = 1; u < UNROLL; ++u) m[0] = kestrel_max(m[0], m[u]);
  float mx = kestrel_hmax(m[0]);
  for (; c < COLS; ++c) mx = x[c] > mx ? x[c] : mx;
  /* Pass 2: the exponentials, stored in y, and their sum. */
  vf s[UNROLL];
  UNROLL_FULL for (int u = 0; u < UNROLL; ++u) s[u] = (vf){0};
  c = 0;
  for (; c + STEP <= COLS; c += STEP) {
    UNROLL_FULL for (int u = 0; u < UNROLL; ++u) {
      vf v;
      VLOAD(v, x + c + u * VEC);
      v = kestrel_exp(v - mx);
      s[u] += v;
      VSTORE(y + c + u * VEC, v);
    }
  }
  for (; c + VEC <= COLS; c += VEC) {
    vf v;
    VLOAD(v, x + c);
    v = kestrel_exp(v - mx);
    s[0] += v;
    VSTORE(y + c, v);
  }
  UNROLL_FULL for (int u = 1; u < UNROLL; ++u) s[0] += s[u];
  float sum = kestrel_hsum(s[0]);
  for (; c < COLS; ++c) {
    y[c] = kestrel_exp(x[c] - mx);
    sum += y[c];
  }
  /* Pass 3: normalise. */
  scale_row(y, 1.0f / sum);
}
#else
/* Folds v into a running maximum m and the sum s of e^(x - m) over what m has seen. */
INLINE void fold(vf* m, vf* s, vf v) {
  vf next = kestrel_max(*m, v);
  *s = *s * kestrel_exp(*m - next) + kestrel_exp(v - next);
  *m = next;
}

INLINE void row(const float* restrict x, float* restrict y) {
  /* Pass 1: running maxima and sums per lane, then combined. */
  vf m[UNROLL], s[UNROLL];
  UNROLL_FULL for (int u = 0; u < UNROLL; ++u) {
    m[u] = (vf){0} + LOWEST;
    s[u] = (vf){0};
  }
  int64_t c = 0;
  for (; c + STEP <= COLS; c += STEP) {
    UNROLL_FULL for (int u = 0; u < UNROLL; ++u) {
      vf v;
      VLOAD(v, x + c + u * VEC);
      fold(&m[u], &s[u], v);
    }
  }
  for (; c + VEC <= COLS; c += VEC) {
    vf v;
    VLOAD(v, x + c);
    fold(&m[0], &s[0], v);
  }
  UNROLL_FULL for (int u = 1; u < UNROLL; ++u) {
    vf next = kestrel_max(m[0], m[u]);
    s[0] = s[0] * kestrel_exp(m[0] - next) + s[u] * kestrel_exp(m[u] - next);
    m[0] = next;
  }
  float mx = kestrel_hmax(m[0]);
  for (int64_t t = c; t < COLS; ++t) mx = x[t] > mx ? x[t] : mx;
  float sum = kestrel_hsum(s[0] * kestrel_exp(m[0] - mx));
  for (int64_t t = c; t < COLS; ++t) sum += kestrel_exp(x[t] - mx);
  /* Pass 2: the exponentials, scaled as they are written. */
  const float inv = 1.0f / sum;
  c = 0;
  for (; c + VEC <= COLS; c += VEC) {
    vf v;
    VLOAD(v, x + c);
    v = finish_v(kestrel_exp(v - mx) * inv);
    VSTORE(y + c, v);
  }
  for (; c < COLS; ++c) y[c] = finish_1(kestrel_exp(x[c] - mx) * inv);
}
#endif

typedef struct softmax_ctx {
  const float* x;
  float* y;
} softmax_ctx;

static void task(int64_t t, void* p) {
  const softmax_ctx* ctx = (const softmax_ctx*)p;
  const int64_t end = (t + 1) * SOFTMAX_GRAIN < ROWS ? (t + 1) * SOFTMAX_GRAIN : ROWS;
  for (int64_t r = t * SOFTMAX_GRAIN; r < end; ++r) row(ctx->x + r * COLS, ctx->y + r * COLS);
}

KESTREL_KERNEL(svc, args, num_args) {
  if (num_args != 2 || !args[0].data || !args[1].data || args[0].i64 != ROWS * COLS || args[1].i64 != ROWS * COLS) {
    return 2;
  }
  softmax_ctx ctx = {(const float*)args[0].data, (float*)args[1].data};
  kestrel_parallel_for(svc, (ROWS + SOFTMAX_GRAIN - 1) / SOFTMAX_GRAIN, task, &ctx);
  return 0;
}
