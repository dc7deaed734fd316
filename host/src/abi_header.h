// The text of kernel/include/kestrel/kernel/abi.h, embedded at build time
// (gen/abi_header.cpp) so kernels compile without the header on disk.
#pragma once

#include <string_view>

namespace kestrel::host::detail {

// Static storage, valid for the life of the process; text[size()] is a NUL.
std::string_view abi_header_text();

}  // namespace kestrel::host::detail
