// Force-included into every C++ file of the fuzz build (-DKESTREL_FUZZ=ON, clang), so
// that Debian's Cap'n Proto 0.9 headers read under clang 19 as they do under GCC, which
// the rest of the tree is built with:
// - capnp::word is copyable under GCC and not under clang (common.h); the code keeps
//   words in std::vector, which needs it copyable. Here it is declared as under GCC (the
//   libraries were compiled with that definition).
// - kj leaves out `const char* == StringPtr` under C++20, relying on rewritten
//   comparisons; clang 19 finds none for capnp's `const char* == Text::Builder`. These
//   are the operators kj declares before C++20.
#pragma once

#include <kj/common.h>
#include <kj/memory.h>
#include <kj/string.h>
#include <kj/units.h>

#pragma push_macro("KJ_DISALLOW_COPY")
#undef KJ_DISALLOW_COPY
#define KJ_DISALLOW_COPY(classname) static_assert(true, "")
#include <capnp/common.h>
#pragma pop_macro("KJ_DISALLOW_COPY")

#if __cpp_impl_three_way_comparison
namespace kj {
inline bool operator==(const char* a, const StringPtr& b) { return b == StringPtr(a); }
inline bool operator!=(const char* a, const StringPtr& b) { return b != StringPtr(a); }
}  // namespace kj
#endif
