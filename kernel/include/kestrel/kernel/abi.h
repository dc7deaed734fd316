/* The Kestrel CPU kernel ABI: what a kernel module compiled on the host and the code that
 * calls it (kestrel-device's worker, `kestrel bench`, an exported kernel library) agree on.
 * Plain C, freestanding (only <stdint.h> and <stddef.h>, which every compiler provides
 * without a libc), so the host can cross-compile kernels for any triple without a sysroot.
 *
 * Version 3 appends one service, vendor_symbol: a function of a shared library present on
 * the device (OpenBLAS, oneDNN), so a small shim kernel can time a vendor library on the
 * workload like any candidate. The struct only grew: loaders run version-2 modules too
 * (they never read the new field), and kestrel_vendor_symbol() checks the caller's
 * version before reading it.
 *
 * Version 2. A kernel is a function of type kestrel_kernel_fn exported under its own
 * entry name (KESTREL_KERNEL_NAME, "kestrel_kernel" unless the build defines another), so
 * several kernels link into one library. A module also exports the constant
 * kestrel_kernel_abi_version (weak: every kernel of a library defines it, the linker keeps
 * one). The services table carries a context pointer that the caller owns and every
 * service receives, so services need no global state and several callers (thread pools)
 * can live in one process.
 *
 * Version 1 (no context, one fixed entry) is refused by loaders with a message saying so.
 * Bump KESTREL_KERNEL_ABI_VERSION on any change to the structs or the entry signature.
 */
#ifndef KESTREL_KERNEL_ABI_H
#define KESTREL_KERNEL_ABI_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KESTREL_KERNEL_ABI_VERSION 3
/* The oldest module version loaders still run (a v2 module reads a prefix of v3's table). */
#define KESTREL_KERNEL_ABI_OLDEST 2
#define KESTREL_KERNEL_ABI_SYMBOL "kestrel_kernel_abi_version"
/* The entry name a module's kernel gets when its build names none. */
#define KESTREL_KERNEL_DEFAULT_ENTRY "kestrel_kernel"
#ifndef KESTREL_KERNEL_NAME
#define KESTREL_KERNEL_NAME kestrel_kernel
#endif

/* Services the caller offers a kernel. Valid for the duration of one call. */
typedef struct kestrel_services {
  uint32_t abi_version;  /* KESTREL_KERNEL_ABI_VERSION of the caller */
  uint32_t num_threads;  /* threads parallel_for spreads work over (>= 1) */
  void* context;         /* the caller's state; passed to every service below */
  /* Calls fn(i, arg) once for every i in [0, n), spread over num_threads threads (the
   * calling thread included), and returns when all calls have returned. Calls may run
   * concurrently and in any order. n <= 0 returns at once. Not reentrant: fn must not
   * call parallel_for. */
  void (*parallel_for)(void* context, int64_t n, void (*fn)(int64_t i, void* arg), void* arg);
  /* Scratch memory (packing buffers): 64-byte aligned, NULL when exhausted. Thread-safe;
   * may be called inside parallel_for bodies. Memory not released by the kernel is
   * reclaimed by the caller after the call. */
  void* (*alloc)(void* context, size_t bytes);
  void (*release)(void* context, void* ptr);
  /* Version 3. The function `symbol` of the shared library `library` (a file name the
   * device's dynamic loader finds, e.g. "libopenblas.so.0"), loaded on first use and kept
   * loaded; NULL when the library or the symbol is not there, or when the caller cannot
   * load libraries (a fully static runtime). The caller remembers the last failed lookup,
   * so a kernel that then returns KESTREL_KERNEL_VENDOR_MISSING gets a message naming it.
   * Thread-safe. */
  void* (*vendor_symbol)(void* context, const char* library, const char* symbol);
} kestrel_services;

/* Return codes of vendor shim kernels, which callers turn into messages: a library or one
 * of its symbols is not on the device (the last failed vendor_symbol lookup says which),
 * or a library call failed (the kernel's own code in the low byte). */
#define KESTREL_KERNEL_VENDOR_MISSING 0x4b5600
#define KESTREL_KERNEL_VENDOR_FAILED 0x4b5700

/* What kernels call: the services with their context. */
static inline void kestrel_parallel_for(const kestrel_services* svc, int64_t n, void (*fn)(int64_t i, void* arg),
                                        void* arg) {
  svc->parallel_for(svc->context, n, fn, arg);
}
static inline void* kestrel_alloc(const kestrel_services* svc, size_t bytes) { return svc->alloc(svc->context, bytes); }
static inline void kestrel_release(const kestrel_services* svc, void* ptr) { svc->release(svc->context, ptr); }
/* NULL also when the caller implements an older ABI (no vendor_symbol in its table). */
static inline void* kestrel_vendor_symbol(const kestrel_services* svc, const char* library, const char* symbol) {
  if (svc->abi_version < 3 || !svc->vendor_symbol) return NULL;
  return svc->vendor_symbol(svc->context, library, symbol);
}

/* One kernel argument. Buffers are 64-byte aligned and never alias each other. */
typedef struct kestrel_arg {
  void* data;      /* buffer argument; NULL for scalars */
  int64_t i64;     /* integer scalar, or the element count of a buffer */
  double f64;      /* floating-point scalar */
} kestrel_arg;

/* A kernel. Returns 0 on success; any other value is reported as a runtime error
 * carrying that code. */
typedef int32_t (*kestrel_kernel_fn)(const kestrel_services* services, const kestrel_arg* args,
                                     int32_t num_args);

/* The module's ABI version constant (weak: each kernel of a library may define it). */
#define KESTREL_KERNEL_ABI_TAG                                                                 \
  __attribute__((weak, visibility("default"))) const uint32_t kestrel_kernel_abi_version =    \
      KESTREL_KERNEL_ABI_VERSION;

/* A kernel under an explicit entry name, without the version constant (for a second
 * kernel in the same source file):
 *   KESTREL_KERNEL_NAMED(my_kernel, svc, args, num_args) { ...; return 0; } */
#define KESTREL_KERNEL_NAMED(name, svc, args, num_args)                                        \
  __attribute__((visibility("default"))) int32_t name(const kestrel_services* svc,            \
                                                      const kestrel_arg* args, int32_t num_args)

/* Defines the module's ABI version constant and a kernel named KESTREL_KERNEL_NAME:
 *   KESTREL_KERNEL(svc, args, num_args) { ...; return 0; } */
#define KESTREL_KERNEL(svc, args, num_args) \
  KESTREL_KERNEL_ABI_TAG KESTREL_KERNEL_NAMED(KESTREL_KERNEL_NAME, svc, args, num_args)

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
