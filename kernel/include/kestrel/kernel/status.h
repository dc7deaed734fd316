// How a measured candidate ended. One definition for the device runtime, the host, the
// records and the wire (rpc checks at compile time that session.capnp's MeasureStatus
// has the same values).
#pragma once

#include <cstdint>
#include <string_view>

namespace kestrel::kernel {

enum class Status : std::uint32_t {
  ok = 0,
  instantiation_error = 1,  // invalid configuration (host side)
  host_compile_error = 2,   // host side
  device_load_error = 3,    // module missing, wrong architecture or ABI
  runtime_error = 4,        // signal or non-zero return in the kernel
  wrong_answer = 5,         // output differs from the reference beyond the tolerance
  build_timeout = 6,        // host side
  run_timeout = 7,          // exceeded its time limit on the device
  device_lost = 8,          // host side: the device went away
  device_compile_error = 9, // the device's driver refused the kernel (OpenCL build log, CUDA JIT)
  last = device_compile_error,
};

// "ok", "instantiation error", ..., "device lost": the names records and tools use.
std::string_view to_string(Status status);
// Parses those names; false if unknown.
bool parse_status(std::string_view text, Status& out);

}  // namespace kestrel::kernel
