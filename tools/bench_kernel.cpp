// Loading a compiled kernel into this process.
#include "bench_kernel.h"

#include <dlfcn.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace kestrel::tools::bench {

LoadedKernel::LoadedKernel(std::span<const std::uint8_t> image, const std::string& name) {
  fd_ = ::memfd_create(("kestrel-bench-" + name).c_str(), MFD_CLOEXEC);
  if (fd_ < 0) throw std::runtime_error(std::string("memfd_create failed: ") + std::strerror(errno));
  std::size_t written = 0;
  while (written < image.size()) {
    ssize_t n = ::write(fd_, image.data() + written, image.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ::close(fd_);
      throw std::runtime_error(std::string("cannot write kernel ") + name + ": " + std::strerror(errno));
    }
    written += static_cast<std::size_t>(n);
  }
  std::string path = "/proc/self/fd/" + std::to_string(fd_);
  handle_ = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle_) {
    const char* why = ::dlerror();
    ::close(fd_);
    throw std::runtime_error("cannot load kernel " + name + ": " + (why ? why : "dlopen failed"));
  }
  auto* version = static_cast<const std::uint32_t*>(::dlsym(handle_, KESTREL_KERNEL_ABI_SYMBOL));
  entry_ = reinterpret_cast<kestrel_kernel_fn>(::dlsym(handle_, KESTREL_KERNEL_DEFAULT_ENTRY));
  std::string problem;
  if (!version || !entry_) problem = "kernel " + name + " does not export the Kestrel kernel ABI";
  else if (*version != KESTREL_KERNEL_ABI_VERSION) {
    problem = "kernel " + name + " was built for kernel ABI " + std::to_string(*version) + ", this program has " +
              std::to_string(KESTREL_KERNEL_ABI_VERSION);
  }
  if (!problem.empty()) {
    ::dlclose(handle_);
    ::close(fd_);
    throw std::runtime_error(problem);
  }
}

LoadedKernel::~LoadedKernel() {
  ::dlclose(handle_);
  ::close(fd_);
}

}  // namespace kestrel::tools::bench
