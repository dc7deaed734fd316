// Running CPU kernel modules in this process: loading a module (ABI check, entry by
// name), the deterministic input data, the output check against a reference, and the
// calibration of calls per timed round. The device worker measures candidates with it;
// `kestrel bench` (kestrel::compare) times kernels against libraries with it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>

#include "kestrel/kernel/abi.h"

namespace kestrel::device {

// A CPU kernel module (a shared object built against the kernel ABI) opened in this
// process, and one of its kernels. Move-only; closes the module when destroyed.
class CpuKernelModule {
 public:
  // Opens the module behind `fd` (kept open by the caller while loading) and finds the
  // kernel `entry` (empty: KESTREL_KERNEL_DEFAULT_ENTRY). `name` names the module in
  // messages (e.g. the first 12 hex digits of its hash). On failure returns nothing and
  // sets `error`, e.g. "module 0123456789ab was built for kernel ABI v1 but this runtime
  // implements v2 (rebuild it with this version of Kestrel)".
  static std::optional<CpuKernelModule> load(int fd, const std::string& name, const std::string& entry,
                                             std::string& error);
  // The same from an in-memory image, written to a sealed memory file first.
  static std::optional<CpuKernelModule> load(std::span<const std::uint8_t> image, const std::string& name,
                                             const std::string& entry, std::string& error);

  CpuKernelModule(CpuKernelModule&& other) noexcept;
  CpuKernelModule& operator=(CpuKernelModule&& other) noexcept;
  CpuKernelModule(const CpuKernelModule&) = delete;
  CpuKernelModule& operator=(const CpuKernelModule&) = delete;
  ~CpuKernelModule();

  kestrel_kernel_fn entry() const { return entry_; }
  // Calls the kernel; returns its status code (0: success).
  std::int32_t call(const kestrel_services* services, std::span<const kestrel_arg> args) const {
    return entry_(services, args.data(), static_cast<std::int32_t>(args.size()));
  }
 private:
  CpuKernelModule() = default;
  void* handle_ = nullptr;
  int fd_ = -1;  // the memory file of an in-memory image; -1 otherwise
  kestrel_kernel_fn entry_ = nullptr;
};

// 64-byte-aligned fp32 storage (what the kernel ABI promises kernels). Throws
// std::bad_alloc when the memory is not there.
class FloatBuffer {
 public:
  FloatBuffer() = default;
  explicit FloatBuffer(std::int64_t elements);
  FloatBuffer(FloatBuffer&& other) noexcept;
  FloatBuffer& operator=(FloatBuffer&& other) noexcept;
  FloatBuffer(const FloatBuffer&) = delete;
  FloatBuffer& operator=(const FloatBuffer&) = delete;
  ~FloatBuffer();

  // Bytes allocated for `elements` floats (rounded up to 64, at least 64).
  static std::size_t bytes_for(std::int64_t elements);

  float* data() const { return data_; }
  std::int64_t size() const { return size_; }
  std::span<float> span() const { return {data_, static_cast<std::size_t>(size_)}; }
  std::span<const float> view() const { return {data_, static_cast<std::size_t>(size_)}; }

 private:
  float* data_ = nullptr;
  std::int64_t size_ = 0;
};

// Deterministic values uniform in [-1, 1) from a seed (splitmix64). Input argument i of
// a measurement is filled with seed + i.
void fill_uniform(std::span<float> values, std::uint64_t seed);
// NaN everywhere: an output the kernel does not write fails the check.
void fill_nan(std::span<float> values);

// Compares output arguments with reference outputs: element by element, |out - ref| must
// be at most tolerance * (1 + |ref|) (NaN never is).
class OutputCheck {
 public:
  explicit OutputCheck(double tolerance) : tolerance_(tolerance) {}
  // Checks output argument `argument` (its index among all arguments, for messages).
  void add(std::size_t argument, std::span<const float> got, std::span<const float> want);
  bool ok() const { return first_bad_.empty(); }
  // The largest error over every element checked (infinity for NaN).
  double max_error() const { return max_error_; }
  // Empty when ok, else e.g. "max error 0.5 exceeds tolerance 0.0001; first: element 3
  // of argument 2 is 1.5, expected 1".
  std::string message() const;

 private:
  double tolerance_;
  double max_error_ = 0;
  std::string first_bad_;
};

// Calls per timed round so that a round lasts at least min_round_s: `round(number)` runs
// `number` calls and returns the seconds they took. One call estimates the time per call,
// then at most four untimed rounds grow the count until a round is long enough (at most
// 10^7 calls).
std::uint32_t calibrate_number(double min_round_s, const std::function<double(std::uint32_t)>& round);

}  // namespace kestrel::device
