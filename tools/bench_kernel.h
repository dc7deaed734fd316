// A Kestrel kernel loaded into this process, for `kestrel bench`: the shared object the
// host compiler built, opened with dlopen from a sealed memory file, and called through
// the kernel ABI with this process's KernelServices.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kestrel/kernel/abi.h"

namespace kestrel::tools::bench {

class LoadedKernel {
 public:
  // Loads a shared object image (an ELF .so for this machine). Throws std::runtime_error
  // saying why when it cannot be loaded or is not a Kestrel kernel of this ABI version.
  LoadedKernel(std::span<const std::uint8_t> image, const std::string& name);
  ~LoadedKernel();
  LoadedKernel(const LoadedKernel&) = delete;
  LoadedKernel& operator=(const LoadedKernel&) = delete;

  // Calls the kernel; returns its status code (0: success).
  std::int32_t call(const kestrel_services* services, const std::vector<kestrel_arg>& args) const {
    return entry_(services, args.data(), static_cast<std::int32_t>(args.size()));
  }

 private:
  void* handle_ = nullptr;
  int fd_ = -1;
  kestrel_kernel_fn entry_ = nullptr;
};

}  // namespace kestrel::tools::bench
