// The text of kernel/include/kestrel/kernel/abi.h, embedded at build time
// (gen/abi_header.cpp) so kernels compile without the header on disk.
#pragma once

#include <string_view>
#include <vector>

namespace kestrel::host::detail {

// Static storage, valid for the life of the process; text[size()] is a NUL.
std::string_view abi_header_text();

// The other headers kernels may include (kernel/include/kestrel/kernel/math.h), by their
// include path ("kestrel/kernel/math.h"), embedded at build time like abi.h.
struct KernelHeader {
  std::string_view path;
  std::string_view text;
};
std::vector<KernelHeader> kernel_headers();

}  // namespace kestrel::host::detail
