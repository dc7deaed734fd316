// The fully static board runtime only (scripts/build-device.sh aarch64-linux-gnu --static;
// the glibc builds take libstdc++.so.6, demangler included, from the board): a
// __cxa_demangle that demangles nothing, in place of libstdc++'s demangler (cp-demangle.o:
// 47 KB of the aarch64 runtime; docs/device-size.md). Its only callers
// there are diagnostics: kj's name for a non-kj exception type and libstdc++'s verbose
// terminate handler. Both fall back to the mangled name when demangling fails, so a
// board prints "terminate called after throwing an instance of 'N7kestrel3rpc8RpcErrorE'"
// where the host prints "kestrel::rpc::RpcError". Linked in by rpc/CMakeLists.txt
// (--undefined=__cxa_demangle, so this object is taken before libstdc++'s).
#include <cxxabi.h>

#include <cstddef>

namespace __cxxabiv1 {

// The ABI's contract: status -2 is "not a valid name under the C++ ABI mangling rules";
// nothing is allocated, the output buffer is left alone.
extern "C" char* __cxa_demangle(const char* /*mangled*/, char* /*buffer*/, std::size_t* /*length*/, int* status) {
  if (status != nullptr) *status = -2;
  return nullptr;
}

}  // namespace __cxxabiv1
