// The services a CPU kernel receives through the kernel ABI (kestrel_services): a pool of
// threads behind parallel_for, 64-byte-aligned scratch memory, and functions of vendor
// libraries on this machine (dlopen; none in a fully static runtime). Used by the device
// worker and by host tools that run kernels in their own process (`kestrel bench`).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "kestrel/kernel/abi.h"

namespace kestrel::device {

class KernelServices {
 public:
  // Starts threads - 1 pool threads (the calling thread is the last one). The table's
  // context is this object, so several may live in one process.
  explicit KernelServices(unsigned threads);
  // Stops and joins the pool threads and frees unreleased scratch. Must not run while
  // a kernel is running.
  ~KernelServices();
  KernelServices(const KernelServices&) = delete;
  KernelServices& operator=(const KernelServices&) = delete;

  // The table to pass to a kernel; valid while this object lives.
  const kestrel_services* table() const { return &table_; }
  unsigned threads() const { return table_.num_threads; }
  // Takes back the scratch memory kernels allocated and did not release (kept, up to
  // 256 MiB with the released blocks, for the next request of the same size; freed with
  // this object). Call it between
  // kernel calls, never during one.
  void reclaim_scratch();
  // What a kernel's non-zero return code means, for the candidate's message: for
  // KESTREL_KERNEL_VENDOR_MISSING the last failed vendor lookup ("the vendor library
  // libdnnl.so.2 is not on this device (...)"), for KESTREL_KERNEL_VENDOR_FAILED + n a
  // failed library call, else "kernel returned error code N".
  std::string describe_error(std::int32_t code) const;

  struct Pool;  // implementation: the threads and the scratch bookkeeping

 private:
  std::unique_ptr<Pool> pool_;
  kestrel_services table_{};
};

}  // namespace kestrel::device
