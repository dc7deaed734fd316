// The sandboxed worker: the child-process side of BatchRunner. Private to the runtime.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kestrel/device_runtime/measure.h"

namespace kestrel::device::worker {

// Records the worker writes to its parent, each a RecordHeader then `length` bytes.
// The worker's word is never the verdict: the reference's outputs and every candidate's
// warm-up outputs go to the parent, which compares them in its own memory and answers
// `outputs` with one byte (1: they match) before the worker times the candidate.
enum class Record : std::uint32_t {
  ready = 1,    // inputs prepared; payload: the reference's outputs (output args in order, f32), if any
  started = 2,  // candidate `index` is starting (the parent arms its timeout)
  result = 3,   // candidate `index` finished; payload: rpc::encode_result()
  fatal = 4,    // the batch cannot run (reference failed, out of memory); payload: u32 status, message
  outputs = 5,  // candidate `index`'s warm-up outputs, as in `ready`; the parent answers one byte
  notice = 6,   // a sandbox step that could not be applied (before `ready` only); payload: the reason
};

struct RecordHeader {
  std::uint32_t type = 0;
  std::uint32_t index = 0;
  std::uint32_t length = 0;
};

// In a freshly forked child, or the exec'd worker image: confines itself (sandbox.h),
// prepares the inputs, runs the reference, then candidates [first, end) of the batch,
// writing records to `fd` (a socket: verdicts come back on it). `notices` are sent with
// the sandbox's own (e.g. why the worker image could not be exec'd). Never returns.
[[noreturn]] void run(int fd, const BatchSpec& spec, std::size_t first, std::span<const std::string> notices = {});

}  // namespace kestrel::device::worker
