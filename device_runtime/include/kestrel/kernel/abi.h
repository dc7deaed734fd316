/* The Kestrel CPU kernel ABI: what a kernel module compiled on the host and loaded by
 * kestrel-device agree on. Plain C, freestanding (only <stdint.h> and <stddef.h>, which
 * every compiler provides without a libc), so the host can cross-compile kernels for any
 * triple without a sysroot.
 *
 * A kernel module is a shared object exporting one function named KESTREL_KERNEL_ENTRY
 * with the type kestrel_kernel_fn, and a constant kestrel_kernel_abi_version equal to
 * KESTREL_KERNEL_ABI_VERSION. The runtime refuses modules of another ABI version.
 *
 * Bump KESTREL_KERNEL_ABI_VERSION on any change to the structs or the entry signature.
 */
#ifndef KESTREL_KERNEL_ABI_H
#define KESTREL_KERNEL_ABI_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KESTREL_KERNEL_ABI_VERSION 1
#define KESTREL_KERNEL_ENTRY "kestrel_kernel"
#define KESTREL_KERNEL_ABI_SYMBOL "kestrel_kernel_abi_version"

/* Services the runtime offers a kernel. Valid for the duration of one call. */
typedef struct kestrel_services {
  uint32_t abi_version;  /* KESTREL_KERNEL_ABI_VERSION of the runtime */
  uint32_t num_threads;  /* threads parallel_for spreads work over (>= 1) */
  /* Calls fn(i, ctx) once for every i in [0, n), spread over num_threads threads (the
   * calling thread included), and returns when all calls have returned. Calls may run
   * concurrently and in any order. n <= 0 returns at once. Not reentrant: fn must not
   * call parallel_for. */
  void (*parallel_for)(int64_t n, void (*fn)(int64_t i, void* ctx), void* ctx);
  /* Scratch memory (packing buffers): 64-byte aligned, NULL when exhausted. Thread-safe;
   * may be called inside parallel_for bodies. Memory not released by the kernel is
   * reclaimed by the runtime after the call. */
  void* (*alloc)(size_t bytes);
  void (*release)(void* ptr);
} kestrel_services;

/* One kernel argument. Buffers are 64-byte aligned and never alias each other. */
typedef struct kestrel_arg {
  void* data;      /* buffer argument; NULL for scalars */
  int64_t i64;     /* integer scalar, or the element count of a buffer */
  double f64;      /* floating-point scalar */
} kestrel_arg;

/* The entry point. Returns 0 on success; any other value is reported as a runtime error
 * carrying that code. */
typedef int32_t (*kestrel_kernel_fn)(const kestrel_services* services, const kestrel_arg* args,
                                     int32_t num_args);

/* Declares the entry point and the ABI version constant in a kernel source:
 *   KESTREL_KERNEL(args, num_args, svc) { ...; return 0; } */
#define KESTREL_KERNEL(svc, args, num_args)                                                    \
  __attribute__((visibility("default"))) const uint32_t kestrel_kernel_abi_version =          \
      KESTREL_KERNEL_ABI_VERSION;                                                             \
  __attribute__((visibility("default"))) int32_t kestrel_kernel(                              \
      const kestrel_services* svc, const kestrel_arg* args, int32_t num_args)

#ifdef __cplusplus
}
#endif

#endif /* KESTREL_KERNEL_ABI_H */
