/* elementwise.c: one elementwise operation over n fp32 elements, for the CPU backend:
 *   binary  out[i] = a[i] op b[i]     kind 0 add, 1 sub, 2 mul
 *   unary   out[i] = f(a[i])          kind 3 relu, 4 relu6, 5 gelu (erf form), 6 sigmoid, 7 tanh
 * The transcendental kinds use kestrel/kernel/math.h.
 *
 * Freestanding C specialised by #defines (see ops/src/elementwise.cpp):
 *   workload  ELEMENTWISE_N ELEMENTWISE_KIND
 *   ELEMENTWISE_VEC     floats per vector (1 = scalar)
 *   ELEMENTWISE_UNROLL  vectors per loop step
 *   ELEMENTWISE_GRAIN   elements per parallel_for task (a multiple of VEC * UNROLL)
 * Arguments: a, b (binary kinds only), out. Returns 0, or 2 on bad arguments. */
#include "kestrel/kernel/abi.h"
#include "kestrel/kernel/math.h"

#if !defined(ELEMENTWISE_N) || !defined(ELEMENTWISE_KIND) || !defined(ELEMENTWISE_VEC) || \
    !defined(ELEMENTWISE_UNROLL) || !defined(ELEMENTWISE_GRAIN)
#error "elementwise.c needs ELEMENTWISE_{N,KIND,VEC,UNROLL,GRAIN}"
#endif
#if ELEMENTWISE_KIND < 0 || ELEMENTWISE_KIND > 7
#error "elementwise.c: ELEMENTWISE_KIND must be 0..7"
#endif

#define N ((int64_t)ELEMENTWISE_N)
#define VEC ELEMENTWISE_VEC
#define STEP (ELEMENTWISE_VEC * ELEMENTWISE_UNROLL)
#define BINARY (ELEMENTWISE_KIND <= 2)
#define TASKS ((N + ELEMENTWISE_GRAIN - 1) / ELEMENTWISE_GRAIN)
#define KESTREL_PRAGMA(x) _Pragma(#x)
#define UNROLL_FULL KESTREL_PRAGMA(clang loop unroll(full))

typedef float vf __attribute__((vector_size(VEC * sizeof(float))));

#define VLOAD(v, p) __builtin_memcpy(&(v), (p), sizeof(vf))
#define VSTORE(p, v) __builtin_memcpy((p), &(v), sizeof(vf))

/* The operation on one vector, in place in *x (y: the second operand of binary kinds). */
static inline __attribute__((always_inline)) void apply(vf* x, const vf* y) {
  (void)y;
#if ELEMENTWISE_KIND == 0
  *x = *x + *y;
#elif ELEMENTWISE_KIND == 1
  *x = *x - *y;
#elif ELEMENTWISE_KIND == 2
  *x = *x * *y;
#elif ELEMENTWISE_KIND == 3
  *x = kestrel_relu(*x);
#elif ELEMENTWISE_KIND == 4
  *x = kestrel_relu6(*x);
#elif ELEMENTWISE_KIND == 5
  *x = kestrel_gelu(*x);
#elif ELEMENTWISE_KIND == 6
  *x = kestrel_sigmoid(*x);
#else
  *x = kestrel_tanh(*x);
#endif
}

typedef struct elementwise_ctx {
  const float* a;
  const float* b;
  float* out;
} elementwise_ctx;

static void task(int64_t t, void* p) {
  const elementwise_ctx* ctx = (const elementwise_ctx*)p;
  const float* a = ctx->a;
  const float* b = ctx->b;
  float* out = ctx->out;
  int64_t i = t * ELEMENTWISE_GRAIN;
  const int64_t end = i + ELEMENTWISE_GRAIN < N ? i + ELEMENTWISE_GRAIN : N;
  for (; i + STEP <= end; i += STEP) {
    vf x[ELEMENTWISE_UNROLL], y[ELEMENTWISE_UNROLL];
    UNROLL_FULL for (int u = 0; u < ELEMENTWISE_UNROLL; ++u) {
      VLOAD(x[u], a + i + u * VEC);
      if (BINARY) VLOAD(y[u], b + i + u * VEC);
    }
    UNROLL_FULL for (int u = 0; u < ELEMENTWISE_UNROLL; ++u) apply(&x[u], &y[u]);
    UNROLL_FULL for (int u = 0; u < ELEMENTWISE_UNROLL; ++u) VSTORE(out + i + u * VEC, x[u]);
  }
  for (; i + VEC <= end; i += VEC) {
    vf x, y;
    VLOAD(x, a + i);
    if (BINARY) VLOAD(y, b + i);
    apply(&x, &y);
    VSTORE(out + i, x);
  }
  if (i < end) { /* the last partial vector, through a zero-padded copy */
    float xs[VEC], ys[VEC];
    for (int l = 0; l < VEC; ++l) {
      xs[l] = i + l < end ? a[i + l] : 0.0f;
      ys[l] = BINARY && i + l < end ? b[i + l] : 0.0f;
    }
    vf x, y;
    VLOAD(x, xs);
    VLOAD(y, ys);
    apply(&x, &y);
    VSTORE(xs, x);
    for (int l = 0; i + l < end; ++l) out[i + l] = xs[l];
  }
}

KESTREL_KERNEL(svc, args, num_args) {
  const int64_t inputs = BINARY ? 2 : 1;
  if (num_args != inputs + 1) return 2;
  for (int64_t i = 0; i <= inputs; ++i) {
    if (!args[i].data || args[i].i64 != N) return 2;
  }
  elementwise_ctx ctx = {(const float*)args[0].data, BINARY ? (const float*)args[1].data : 0,
                         (float*)args[inputs].data};
  kestrel_parallel_for(svc, TASKS, task, &ctx);
  return 0;
}
