// Loading and running CPU kernel modules in this process (see kernel_runner.h).
#include "kestrel/device_runtime/kernel_runner.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <utility>

namespace kestrel::device {
namespace {

// The ELF machine of this process and of a module, for a useful message when dlopen
// refuses a module built for another architecture (glibc then says only "No such file").
std::string elf_machine_name(std::uint16_t machine) {
  switch (machine) {
    case 62: return "x86_64";
    case 183: return "aarch64";
    case 40: return "arm";
    case 243: return "riscv";
    case 3: return "i386";
    default: return "machine " + std::to_string(machine);
  }
}

std::string architecture_mismatch(int fd) {
  unsigned char header[20] = {};
  if (::pread(fd, header, sizeof header, 0) != static_cast<ssize_t>(sizeof header)) return {};
  if (header[0] != 0x7f || header[1] != 'E' || header[2] != 'L' || header[3] != 'F') return "it is not an ELF file";
  std::uint16_t module_machine = static_cast<std::uint16_t>(header[18] | (header[19] << 8));
  unsigned char self[20] = {};
  int self_fd = ::open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
  if (self_fd < 0) return {};
  ssize_t got = ::pread(self_fd, self, sizeof self, 0);
  ::close(self_fd);
  if (got != static_cast<ssize_t>(sizeof self)) return {};
  std::uint16_t own = static_cast<std::uint16_t>(self[18] | (self[19] << 8));
  if (own == module_machine && self[4] == header[4]) return {};
  return "it was built for " + elf_machine_name(module_machine) + (header[4] == 1 ? " (32-bit)" : "") +
         " but this device is " + elf_machine_name(own) + (self[4] == 1 ? " (32-bit)" : "") +
         "; compile for the device's target (--target auto)";
}

}  // namespace

// ---- CpuKernelModule ------------------------------------------------------------------

std::optional<CpuKernelModule> CpuKernelModule::load(int fd, const std::string& name, const std::string& entry,
                                                     std::string& error) {
  CpuKernelModule module;
  std::string path = "/proc/self/fd/" + std::to_string(fd);
  module.handle_ = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!module.handle_) {
    const char* why = ::dlerror();
    std::string mismatch = architecture_mismatch(fd);
    if (!mismatch.empty()) {
      error = "cannot load module " + name + ": " + mismatch;
      return std::nullopt;
    }
    error = "cannot load module " + name + ": " + (why ? why : "dlopen failed");
    // dlerror names the memfd path; the module's name is the useful one.
    if (auto pos = error.find(path + ": "); pos != std::string::npos) error.erase(pos, path.size() + 2);
    return std::nullopt;
  }
  auto* version = static_cast<const std::uint32_t*>(::dlsym(module.handle_, KESTREL_KERNEL_ABI_SYMBOL));
  if (!version) {
    error = "module " + name + " does not export " KESTREL_KERNEL_ABI_SYMBOL " (not a Kestrel kernel)";
    return std::nullopt;
  }
  if (*version < KESTREL_KERNEL_ABI_OLDEST || *version > KESTREL_KERNEL_ABI_VERSION) {
    error = "module " + name + " was built for kernel ABI v" + std::to_string(*version) +
            " but this runtime implements v" + std::to_string(KESTREL_KERNEL_ABI_VERSION) +
            " (rebuild it with this version of Kestrel)";
    return std::nullopt;
  }
  const std::string symbol = entry.empty() ? std::string(KESTREL_KERNEL_DEFAULT_ENTRY) : entry;
  module.entry_ = reinterpret_cast<kestrel_kernel_fn>(::dlsym(module.handle_, symbol.c_str()));
  if (!module.entry_) {
    error = "module " + name + " does not export the kernel '" + symbol + "'";
    return std::nullopt;
  }
  return module;
}

std::optional<CpuKernelModule> CpuKernelModule::load(std::span<const std::uint8_t> image, const std::string& name,
                                                     const std::string& entry, std::string& error) {
  int fd = ::memfd_create(("kestrel-kernel-" + name).c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) {
    error = "cannot load module " + name + ": memfd_create failed: " + std::strerror(errno);
    return std::nullopt;
  }
  std::size_t written = 0;
  while (written < image.size()) {
    ssize_t n = ::write(fd, image.data() + written, image.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      error = "cannot load module " + name + ": writing its memory file failed: " +
              (n < 0 ? std::strerror(errno) : "no progress");
      ::close(fd);
      return std::nullopt;
    }
    written += static_cast<std::size_t>(n);
  }
  ::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL);
  auto module = load(fd, name, entry, error);
  if (!module) {
    ::close(fd);
    return std::nullopt;
  }
  module->fd_ = fd;
  return module;
}

CpuKernelModule::CpuKernelModule(CpuKernelModule&& other) noexcept
    : handle_(std::exchange(other.handle_, nullptr)),
      fd_(std::exchange(other.fd_, -1)),
      entry_(std::exchange(other.entry_, nullptr)) {}

CpuKernelModule& CpuKernelModule::operator=(CpuKernelModule&& other) noexcept {
  if (this != &other) {
    CpuKernelModule old(std::move(*this));
    handle_ = std::exchange(other.handle_, nullptr);
    fd_ = std::exchange(other.fd_, -1);
    entry_ = std::exchange(other.entry_, nullptr);
  }
  return *this;
}

CpuKernelModule::~CpuKernelModule() {
  if (handle_) ::dlclose(handle_);
  if (fd_ >= 0) ::close(fd_);
}

// ---- data -------------------------------------------------------------------------------

std::size_t FloatBuffer::bytes_for(std::int64_t elements) {
  return (static_cast<std::size_t>(std::max<std::int64_t>(elements, 1)) * sizeof(float) + 63) / 64 * 64;
}

FloatBuffer::FloatBuffer(std::int64_t elements) : size_(elements) {
  data_ = static_cast<float*>(std::aligned_alloc(64, bytes_for(elements)));
  if (!data_) throw std::bad_alloc();
}

FloatBuffer::FloatBuffer(FloatBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

FloatBuffer& FloatBuffer::operator=(FloatBuffer&& other) noexcept {
  if (this != &other) {
    std::free(data_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

FloatBuffer::~FloatBuffer() { std::free(data_); }

void fill_uniform(std::span<float> values, std::uint64_t seed) {
  std::uint64_t state = seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull;
  for (float& value : values) {
    // splitmix64
    std::uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    value = static_cast<float>(static_cast<double>(z >> 40) * (2.0 / 16777216.0) - 1.0);
  }
}

void fill_nan(std::span<float> values) { std::fill(values.begin(), values.end(), std::nanf("")); }

// ---- checking -----------------------------------------------------------------------------

void OutputCheck::add(std::size_t argument, std::span<const float> got, std::span<const float> want) {
  if (got.size() != want.size()) {
    max_error_ = INFINITY;
    if (first_bad_.empty()) {
      first_bad_ = "argument " + std::to_string(argument) + " has " + std::to_string(got.size()) +
                   " elements, expected " + std::to_string(want.size());
    }
    return;
  }
  for (std::size_t j = 0; j < want.size(); ++j) {
    double e = want[j];
    double g = got[j];
    double err = std::fabs(g - e);
    if (!(err <= tolerance_ * (1.0 + std::fabs(e)))) {
      if (std::isnan(err)) err = INFINITY;
      if (first_bad_.empty()) {
        char text[160];
        std::snprintf(text, sizeof text, "element %lld of argument %zu is %.6g, expected %.6g",
                      static_cast<long long>(j), argument, g, e);
        first_bad_ = text;
      }
    }
    if (err > max_error_ || std::isnan(err)) max_error_ = std::isnan(err) ? INFINITY : err;
  }
}

std::string OutputCheck::message() const {
  if (first_bad_.empty()) return {};
  char text[96];
  std::snprintf(text, sizeof text, "max error %.3g exceeds tolerance %.3g; first: ", max_error_, tolerance_);
  return text + first_bad_;
}

// ---- timing -------------------------------------------------------------------------------

std::uint32_t calibrate_number(double min_round_s, const std::function<double(std::uint32_t)>& round) {
  double single = std::max(round(1), 1e-9);
  auto number = static_cast<std::uint32_t>(std::clamp(std::ceil(min_round_s / single), 1.0, 1e7));
  // The estimate comes from one call; grow it until a whole round really lasts
  // min_round_s (a few untimed calibration rounds at most).
  for (int attempt = 0; attempt < 4 && min_round_s > 0; ++attempt) {
    double seconds = round(number);
    if (seconds >= min_round_s || number >= 10'000'000) break;
    double grow = min_round_s / std::max(seconds, 1e-9) * 1.1;
    number = static_cast<std::uint32_t>(std::clamp(std::ceil(number * grow), number + 1.0, 1e7));
  }
  return number;
}

}  // namespace kestrel::device
