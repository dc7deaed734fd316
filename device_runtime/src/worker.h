// The sandboxed worker: the child-process side of BatchRunner. Private to the runtime.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kestrel/device_runtime/measure.h"

namespace kestrel::device::worker {

// Records the worker writes to its parent, each a RecordHeader then `length` bytes.
enum class Record : std::uint32_t {
  ready = 1,    // inputs and reference output prepared
  started = 2,  // candidate `index` is starting (the parent arms its timeout)
  result = 3,   // candidate `index` finished; payload: rpc::encode_result()
  fatal = 4,    // the batch cannot run (reference failed, out of memory); payload: u32 status, message
};

struct RecordHeader {
  std::uint32_t type = 0;
  std::uint32_t index = 0;
  std::uint32_t length = 0;
};

// In a freshly forked child: prepares the inputs, runs the reference, then candidates
// [first, end) of the batch, writing records to `fd`. Never returns.
[[noreturn]] void run(int fd, const BatchSpec& spec, std::size_t first);

}  // namespace kestrel::device::worker
