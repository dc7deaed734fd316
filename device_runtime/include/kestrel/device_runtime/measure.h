// Measuring a batch of candidate kernels on this device, each inside a sandboxed
// worker process: a crash or hang kills the worker, never the runtime; the candidate
// gets its status and the batch goes on in a fresh worker.
//
// Method per candidate: inputs filled with deterministic random data (uniform in
// [-1, 1] from the batch seed), outputs pre-filled with NaN, one untimed warm-up call
// whose outputs are checked against the reference module's (by the runtime, in its own
// memory: the worker only hands both over), then `repeat` rounds of
// `number` calls (number grows until a round lasts min_repeat_ms), optional cache flush
// before and cooldown between rounds, timed with CLOCK_MONOTONIC. Every round's
// per-call time is returned.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kestrel/rpc/asio.h"
#include "kestrel/kernel/status.h"
#include "kestrel/rpc/measure.h"

namespace kestrel::device {

using Status = kernel::Status;
using kernel::to_string;

// A batch as the runtime runs it: the request as it arrived and the memfds of the
// modules it names, which the runtime's ModuleStore owns.
struct BatchSpec {
  rpc::BatchRequest request;
  int reference_fd = -1;         // -1: no correctness check
  std::vector<int> module_fds;   // parallel to request.candidates; -1: not on this device

  void add(rpc::CandidateRequest candidate, int module_fd) {
    request.candidates.push_back(std::move(candidate));
    module_fds.push_back(module_fd);
  }
};

// Runs one batch asynchronously on the caller's executor, forking workers as needed.
// `on_result` is called once per candidate, in order, with the machine's state at that
// moment (kernel::MachineState); then `on_done` once, with an empty message or the reason
// the rest of the batch could not run. `on_progress` (optional) is called when a worker
// starts preparing the batch (no candidate) and when a candidate starts, with the limit
// the runtime enforces on that step: the next callback comes within it. The module fds
// must stay open until on_done. module_fds must have one entry per candidate.
class BatchRunner : public std::enable_shared_from_this<BatchRunner> {
 public:
  using ResultFn = std::function<void(const rpc::CandidateResult&)>;
  using DoneFn = std::function<void(const std::string& message)>;
  // candidate: the id of the candidate that started, or none while a worker prepares.
  using ProgressFn = std::function<void(std::optional<std::uint64_t> candidate, std::chrono::milliseconds limit)>;

  static std::shared_ptr<BatchRunner> start(asio::any_io_executor executor, BatchSpec spec, ResultFn on_result,
                                            DoneFn on_done, ProgressFn on_progress = {});
  // Kills the worker and ends the batch without further callbacks.
  void cancel();
  ~BatchRunner();

 private:
  BatchRunner(asio::any_io_executor executor, BatchSpec spec, ResultFn on_result, DoneFn on_done,
              ProgressFn on_progress);
  rpc::awaitable<void> run();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// ---- the worker image ------------------------------------------------------------------
// A worker forked from the runtime would carry the runtime's memory (the device token,
// TLS keys) to the kernels it runs. A program that registers a worker image has each
// worker exec it instead, with an empty environment (but for the loader's and GPU
// drivers' variables: LD_LIBRARY_PATH, CUDA_VISIBLE_DEVICES, OCL_ICD_*, POCL_*, HOME,
// XDG_CACHE_HOME, TMPDIR), as `<image> --kestrel-worker <result fd> <spec fd>`; the image's
// main must hand that to run_worker_image before doing anything else. Without a
// registered image, or when the exec fails (qemu-user without binfmt_misc), workers stay
// forks and the runtime logs that once ("worker sandbox: the worker is a fork ...").
// Process-wide; call it from main, before any batch runs. An empty path unregisters.
void set_worker_image(const std::string& path);

// This program's own file (/proc/self/exe: under qemu-user, the emulated program's),
// empty when it cannot be read.
std::string own_executable();

inline constexpr const char* kWorkerFlag = "--kestrel-worker";

// Whether argv is a worker's invocation (argv[1] is kWorkerFlag).
bool is_worker_invocation(int argc, char** argv);

// The worker mode: reads the batch from the spec fd and runs it as the forked worker
// did. Never returns; a malformed invocation fails the batch (or, without a result fd,
// exits with status 2).
[[noreturn]] void run_worker_image(int argc, char** argv);

// The name of a signal with a hint, e.g. "SIGSEGV (segmentation fault)".
std::string describe_signal(int signo);

}  // namespace kestrel::device
