// Test harness for op kernels: compiles a KernelSource with clang-19 into a shared
// object, loads it, and runs it on random inputs with a test kestrel_services (serial
// or two std::threads), comparing against the op's reference kernel.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "kestrel/kernel/abi.h"
#include "kestrel/ops/op.h"

namespace kestrel::ops::test {

// A scratch folder removed on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

// A loaded kernel module (dlopen handle), closed on destruction.
class Kernel {
 public:
  Kernel(const Kernel&) = delete;
  Kernel& operator=(const Kernel&) = delete;
  Kernel(Kernel&& other) noexcept;
  Kernel& operator=(Kernel&&) = delete;
  ~Kernel();
  // Compiles `source` with clang-19 (-O2, -Wall -Wextra -Werror) into dir/name.so and
  // loads it. Throws std::runtime_error carrying the compiler output on failure.
  static Kernel build(const KernelSource& source, const std::filesystem::path& dir, const std::string& name);
  // Runs the kernel on `args` with `threads` threads (1 = serial parallel_for).
  std::int32_t run(std::vector<kestrel_arg>& args, int threads) const;

 private:
  Kernel(void* handle, kestrel_kernel_fn entry) : handle_(handle), entry_(entry) {}
  void* handle_;
  kestrel_kernel_fn entry_;
};

// Compiles `source` to an object for x86-64 with -march=`march` (e.g. "haswell" for AVX2)
// without running it; false with the compiler's output in `output` when it fails.
bool compiles_for(const KernelSource& source, const std::string& march, const std::filesystem::path& dir,
                  std::string& output);

// The traits of this machine's CPU, which the harness compiles for (-march=native): the
// target kernels' configurations are checked against and defaults derived for.
const TargetTraits& native_traits();

// Scratch allocations not yet released through the test services.
std::int64_t live_allocations();
// The last vendor_symbol lookup of the test services that failed ("the vendor library X
// is not on this machine", "... has no symbol Y"); empty when none did.
std::string last_vendor_failure();

// 64-byte aligned float buffer with `guard` extra elements after the data that hold a
// sentinel, to catch out-of-bounds writes.
class Buffer {
 public:
  explicit Buffer(std::int64_t elements);
  float* data() { return data_.get(); }
  const float* data() const { return data_.get(); }
  std::int64_t elements() const { return elements_; }
  void fill_random(std::uint64_t seed);  // uniform in [-1, 1]
  void fill_nan();
  bool guard_intact() const;

 private:
  struct Free {
    void operator()(float* p) const;
  };
  std::int64_t elements_;
  std::unique_ptr<float[], Free> data_;
};

// What gemm.c's compile-time register check says when a micro-tile does not fit the
// registers of the machine it is compiled for.
inline constexpr const char* kRegisterRefusal = "needs more vector registers than this target has";

// Checks one op workload: the reference runs once, then each configuration is compiled
// and run serially and with two threads, with outputs pre-filled with NaN, and compared
// within op.tolerance(). Every failure is reported through Catch (INFO + CHECK).
class WorkloadChecker {
 public:
  WorkloadChecker(const Op& op, Params params);
  // Returns true when the configuration matches the reference in both runs. A
  // configuration the kernel refuses to compile for this machine's registers (its message
  // contains kRegisterRefusal) is reported with WARN and counts as passing.
  bool check(const Config& config);
  // The same for a kernel source of the op's arguments (a vendor shim): compiled, run
  // serially and with two threads, compared, failures reported.
  bool check(const KernelSource& source);
  // Whether `source` (e.g. a kernel with an injected bug) matches the reference in both
  // runs, without reporting mismatches as failures. Throws if it does not compile.
  bool matches(const KernelSource& source);

 private:
  bool compare(const Kernel& kernel, bool report);

  const Op& op_;
  Params params_;
  TempDir dir_;
  std::vector<TensorSpec> tensors_;
  std::vector<Buffer> inputs_;
  std::vector<std::vector<float>> expected_;
  int count_ = 0;
};

// Up to `count` random valid configurations for `params`, sampled from the knob domains;
// configuration i cycles pack_b (i), pack_a (i / 2) and split (i) through their domains
// when the op has those knobs.
std::vector<Config> random_configs(const Op& op, const Params& params, int count, std::uint64_t seed);

}  // namespace kestrel::ops::test
