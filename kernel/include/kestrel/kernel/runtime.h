/* The Kestrel kernel runtime: the services a kernel needs (a thread pool behind
 * parallel_for, scratch memory), as a small C library (libkestrel_rt.a / .so) built with
 * the device runtime for every target, shipped beside an exported kernel library so that
 * a program on a board runs tuned kernels with no Kestrel installation.
 *
 *   kestrel_services* svc = kestrel_runtime_create(4);
 *   kestrel_conv2d_nchwc(svc, &shape, args, 5);   (an exported kernel library's entry)
 *   kestrel_runtime_destroy(svc);
 */
#ifndef KESTREL_KERNEL_RUNTIME_H
#define KESTREL_KERNEL_RUNTIME_H

#include "kestrel/kernel/abi.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A services table with a pool of `num_threads` threads (the calling thread included;
 * 0: one per online core). NULL when the threads cannot be started. The table stays
 * valid until kestrel_runtime_destroy. One kernel call at a time per table. */
kestrel_services* kestrel_runtime_create(uint32_t num_threads);

/* Stops the threads and frees the table and any scratch kernels did not release. Must
 * not be called while a kernel runs on it. NULL is ignored. */
void kestrel_runtime_destroy(kestrel_services* services);

/* Frees scratch memory kernels left allocated (kernels release their own; a kernel that
 * failed may not have). Between kernel calls only. */
void kestrel_runtime_reclaim(kestrel_services* services);

/* What a kernel's non-zero return code means ("kernel returned error code 2", or a
 * vendor library's message). The text stays valid until the next call on this table. */
const char* kestrel_runtime_describe(kestrel_services* services, int32_t code);

#ifdef __cplusplus
}
#endif

#endif /* KESTREL_KERNEL_RUNTIME_H */
