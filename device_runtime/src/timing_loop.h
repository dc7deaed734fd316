// The timing loop of a measurement, after a candidate's warm-up and correctness check:
// how many calls make a round (the settings' `number`, or grown until a round lasts
// min_repeat_ms), then `repeat` rounds with a cooldown between them and the caches
// flushed before each, each round's time per call. On the CPU it calls the kernel and
// reads the monotonic clock; on a GPU the session launches and times with device events.
// Private to the runtime; the worker (worker.cpp) runs it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "gpu_session.h"
#include "kestrel/device_runtime/kernel_runner.h"
#include "kestrel/device_runtime/kernel_services.h"
#include "kestrel/kernel/abi.h"
#include "kestrel/rpc/measure.h"

namespace kestrel::device::worker {

// Seconds on the monotonic clock.
double now_seconds();

// A buffer twice the size of cpu0's largest cache (at least 8 MiB), written through before
// each timed CPU round so that the round starts with the kernel's data out of the caches.
class CacheFlush {
 public:
  // The buffer's size (the worker counts it in its address-space limit).
  static std::size_t bytes();
  // Without `enabled`, holds nothing and flush() does nothing.
  explicit CacheFlush(bool enabled);
  void flush();

 private:
  std::vector<std::uint8_t> buffer_;
};

// Times a CPU kernel already run once: sets result.number (settings.number, or
// calibrate_number's to fill min_repeat_ms) and appends one seconds-per-call value per
// round to result.round_seconds. The kernel is called with `table` and `args`; `services`
// reclaims its scratch memory after each series of calls. A kernel that returns non-zero
// in a timed round ends the loop with Status::runtime_error (rounds already timed stay).
void time_cpu(const rpc::MeasureSettings& settings, const CpuKernelModule& module, const kestrel_services* table,
              std::span<const kestrel_arg> args, KernelServices& services, CacheFlush& cache,
              rpc::CandidateResult& result);

// Times a GPU kernel already loaded and run once in `session`: as time_cpu, with the
// session's rounds (device events, its own cache flush). A failing round ends the loop
// with the session's status and message and no round times.
void time_gpu(const rpc::MeasureSettings& settings, gpu::Session& session, rpc::CandidateResult& result);

}  // namespace kestrel::device::worker
