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

/* Compilers emit calls to memcpy, memmove and memset even in freestanding code (struct
 * copies, zeroing loops, large __builtin_memcpy). A kernel module carries its own copies,
 * hidden, so that it needs no symbol from the process that loads it: it runs in a runtime
 * linked fully statically (no C library to bind to, as on Android) as in a dynamic one.
 * Only freestanding C kernels get them (never the runtime, which includes this header
 * too); weak, so a kernel may bring better ones. */
#if !defined(__cplusplus) && defined(__STDC_HOSTED__) && __STDC_HOSTED__ == 0 && !defined(KESTREL_KERNEL_NO_MEM_FUNCTIONS)
__attribute__((weak, visibility("hidden"))) void* memcpy(void* restrict dst, const void* restrict src, size_t n) {
  unsigned char* d = (unsigned char*)dst;
  const unsigned char* s = (const unsigned char*)src;
  for (size_t i = 0; i < n; ++i) d[i] = s[i];
  return dst;
}
__attribute__((weak, visibility("hidden"))) void* memmove(void* dst, const void* src, size_t n) {
  unsigned char* d = (unsigned char*)dst;
  const unsigned char* s = (const unsigned char*)src;
  if (d < s) {
    for (size_t i = 0; i < n; ++i) d[i] = s[i];
  } else {
    for (size_t i = n; i > 0; --i) d[i - 1] = s[i - 1];
  }
  return dst;
}
__attribute__((weak, visibility("hidden"))) void* memset(void* dst, int value, size_t n) {
  unsigned char* d = (unsigned char*)dst;
  for (size_t i = 0; i < n; ++i) d[i] = (unsigned char)value;
  return dst;
}
#endif

#ifdef __cplusplus
}
#endif

#endif /* KESTREL_KERNEL_ABI_H */
