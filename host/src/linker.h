// LLD, in process: one relocatable object -> a shared object, via a private temporary
// directory (LLD reads and writes files).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace kestrel::host::detail {

struct SharedObject {
  bool ok = false;
  std::vector<std::uint8_t> bytes;  // the ELF .so when ok
  std::string diagnostics;          // LLD's messages ("ld.lld: error: ...")
  bool deterministic = true;        // false: failed for a reason outside the input (I/O)
};

// Links `object` with no libc and no default libraries; undefined references (memcpy,
// memset) stay for the dynamic loader to resolve from the device's libc. Thread-safe:
// LLD keeps its state in globals, so links run one at a time (1-2 ms each). Never throws
// for bad input or a full disk: failures are results.
SharedObject link_shared_object(std::span<const char> object, const std::string& soname);
// The same for several objects (name: for diagnostics).
SharedObject link_objects(const std::vector<std::pair<std::string, std::span<const char>>>& objects,
                          const std::string& soname);

// The version of the linked LLD, e.g. "LLD 19.1.7".
std::string lld_version();

}  // namespace kestrel::host::detail
