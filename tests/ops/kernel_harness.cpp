// Test harness for op kernels; see kernel_harness.h.
#include "kernel_harness.h"

#include <dlfcn.h>
#include <stdlib.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <optional>
#include <map>
#include <mutex>
#include <random>
#include <stdexcept>
#include <thread>

namespace kestrel::ops::test {

// From the CPU itself (cpuid), not from LLVM: this file also links into the GPU test
// executable, which must not load libclang-cpp.
const TargetTraits& native_traits() {
  static const TargetTraits traits = [] {
#if defined(__x86_64__)
    TargetTraits t = TargetTraits::of(__builtin_cpu_supports("avx512f")  ? Isa::avx512
                                      : __builtin_cpu_supports("avx2") ? Isa::avx2
                                                                       : Isa::sse);
    t.fma = __builtin_cpu_supports("fma");
    return t;
#elif defined(__aarch64__)
    return TargetTraits::of(Isa::neon);
#else
    return TargetTraits::of(Isa::scalar);
#endif
  }();
  return traits;
}

namespace {

constexpr std::int64_t kGuard = 16;
constexpr float kSentinel = 1234.5f;

std::atomic<std::int64_t> g_live{0};

void serial_for(void*, std::int64_t n, void (*fn)(std::int64_t, void*), void* ctx) {
  for (std::int64_t i = 0; i < n; ++i) fn(i, ctx);
}

// Two threads (the caller and one more) taking indices from a shared counter.
void threaded_for(void*, std::int64_t n, void (*fn)(std::int64_t, void*), void* ctx) {
  if (n <= 0) return;
  std::atomic<std::int64_t> next{0};
  auto work = [&] {
    for (std::int64_t i = next++; i < n; i = next++) fn(i, ctx);
  };
  std::thread other(work);
  work();
  other.join();
}

// The services' context is the live-allocation counter: a kernel that passed the
// wrong context would corrupt the count the tests check.
void* test_alloc(void* context, std::size_t bytes) {
  void* p = std::aligned_alloc(64, (std::max<std::size_t>(bytes, 1) + 63) / 64 * 64);
  if (p) ++*static_cast<std::atomic<std::int64_t>*>(context);
  return p;
}

void test_release(void* context, void* p) {
  if (!p) return;
  --*static_cast<std::atomic<std::int64_t>*>(context);
  std::free(p);
}

// Vendor libraries (dlopen by file name, kept loaded) and the last failed lookup.
std::mutex g_vendor_mutex;
std::map<std::string, void*> g_vendor_libraries;
std::string g_vendor_failure;

void* test_vendor_symbol(void*, const char* library, const char* symbol) {
  std::lock_guard lock(g_vendor_mutex);
  auto [it, added] = g_vendor_libraries.try_emplace(library, nullptr);
  if (added) it->second = ::dlopen(library, RTLD_NOW | RTLD_LOCAL);
  if (!it->second) {
    g_vendor_failure = std::string("the vendor library ") + library + " is not on this machine";
    return nullptr;
  }
  void* found = ::dlsym(it->second, symbol);
  if (!found) g_vendor_failure = std::string("the vendor library ") + library + " has no symbol " + symbol;
  return found;
}

std::string run_command(const std::string& command, int& status) {
  std::string output;
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  if (!pipe) throw std::runtime_error("cannot run " + command);
  char chunk[4096];
  while (std::size_t got = std::fread(chunk, 1, sizeof chunk, pipe)) output.append(chunk, got);
  status = ::pclose(pipe);
  return output;
}

}  // namespace

TempDir::TempDir() {
  std::string pattern = (std::filesystem::temp_directory_path() / "kestrel_ops_test_XXXXXX").string();
  if (!::mkdtemp(pattern.data())) throw std::runtime_error("mkdtemp failed");
  path_ = pattern;
}

TempDir::~TempDir() {
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
}

Kernel::Kernel(Kernel&& other) noexcept : handle_(other.handle_), entry_(other.entry_) { other.handle_ = nullptr; }

Kernel::~Kernel() {
  if (handle_) ::dlclose(handle_);
}

Kernel Kernel::build(const KernelSource& source, const std::filesystem::path& dir, const std::string& name) {
  auto c_file = dir / (name + ".c");
  auto so_file = dir / (name + ".so");
  {
    FILE* f = std::fopen(c_file.c_str(), "wb");
    if (!f) throw std::runtime_error("cannot write " + c_file.string());
    std::fwrite(source.text.data(), 1, source.text.size(), f);
    std::fclose(f);
  }
  std::string command = std::string(KESTREL_TEST_CLANG) +
                        " -O2 -shared -fPIC -ffreestanding -nostdlib -Wall -Wextra -Werror -march=native -I" +
                        KESTREL_SOURCE_DIR + "/kernel/include";
  for (const auto& d : source.defines) command += " -D" + d.name + "=" + d.value;
  command += " -o " + so_file.string() + " " + c_file.string();
  int status = 0;
  std::string output = run_command(command, status);
  if (status != 0) throw std::runtime_error("compile failed: " + command + "\n" + output);
  void* handle = ::dlopen(so_file.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) throw std::runtime_error(std::string("dlopen failed: ") + ::dlerror());
  auto* version = static_cast<const std::uint32_t*>(::dlsym(handle, KESTREL_KERNEL_ABI_SYMBOL));
  auto entry = reinterpret_cast<kestrel_kernel_fn>(::dlsym(handle, KESTREL_KERNEL_DEFAULT_ENTRY));
  if (!version || *version < KESTREL_KERNEL_ABI_OLDEST || *version > KESTREL_KERNEL_ABI_VERSION || !entry) {
    ::dlclose(handle);
    throw std::runtime_error("module " + so_file.string() + " lacks the kernel ABI symbols");
  }
  return Kernel(handle, entry);
}

bool compiles_for(const KernelSource& source, const std::string& march, const std::filesystem::path& dir,
                  std::string& output) {
  auto c_file = dir / "compile_only.c";
  {
    FILE* f = std::fopen(c_file.c_str(), "wb");
    if (!f) throw std::runtime_error("cannot write " + c_file.string());
    std::fwrite(source.text.data(), 1, source.text.size(), f);
    std::fclose(f);
  }
  std::string command = std::string(KESTREL_TEST_CLANG) + " -O2 -ffreestanding -Wall -Wextra -Werror -march=" + march +
                        " -I" + KESTREL_SOURCE_DIR + "/kernel/include -c -o " + (dir / "compile_only.o").string();
  for (const auto& d : source.defines) command += " -D" + d.name + "=" + d.value;
  command += " " + c_file.string();
  int status = 0;
  output = run_command(command, status);
  return status == 0;
}

std::int32_t Kernel::run(std::vector<kestrel_arg>& args, int threads) const {
  kestrel_services services{};
  services.abi_version = KESTREL_KERNEL_ABI_VERSION;
  services.num_threads = static_cast<std::uint32_t>(threads);
  services.context = &g_live;
  services.parallel_for = threads > 1 ? threaded_for : serial_for;
  services.alloc = test_alloc;
  services.release = test_release;
  services.vendor_symbol = test_vendor_symbol;
  return entry_(&services, args.data(), static_cast<std::int32_t>(args.size()));
}

std::int64_t live_allocations() { return g_live.load(); }

std::string last_vendor_failure() {
  std::lock_guard lock(g_vendor_mutex);
  return g_vendor_failure;
}

void Buffer::Free::operator()(float* p) const { std::free(p); }

Buffer::Buffer(std::int64_t elements)
    : elements_(elements),
      data_(static_cast<float*>(
          std::aligned_alloc(64, static_cast<std::size_t>((elements + kGuard) * 4 + 63) / 64 * 64))) {
  if (!data_) throw std::bad_alloc();
  for (std::int64_t i = 0; i < kGuard; ++i) data_[elements_ + i] = kSentinel;
}

void Buffer::fill_random(std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (std::int64_t i = 0; i < elements_; ++i) data_[i] = dist(rng);
}

void Buffer::fill_nan() {
  for (std::int64_t i = 0; i < elements_; ++i) data_[i] = std::numeric_limits<float>::quiet_NaN();
}

bool Buffer::guard_intact() const {
  for (std::int64_t i = 0; i < kGuard; ++i) {
    if (data_[elements_ + i] != kSentinel) return false;
  }
  return true;
}

WorkloadChecker::WorkloadChecker(const Op& op, Params params)
    : op_(op), params_(std::move(params)), tensors_(op.tensors(params_)) {
  Kernel reference = Kernel::build(op_.reference(params_), dir_.path(), "reference");
  std::vector<Buffer> buffers;
  std::vector<kestrel_arg> args;
  std::uint64_t seed = 1;
  for (const auto& tensor : tensors_) {
    buffers.emplace_back(tensor.elements());
    if (tensor.role == Role::input) {
      buffers.back().fill_random(seed++);
    } else {
      buffers.back().fill_nan();
    }
  }
  for (auto& b : buffers) args.push_back({b.data(), b.elements(), 0.0});
  REQUIRE(reference.run(args, 1) == 0);
  for (std::size_t i = 0; i < tensors_.size(); ++i) {
    if (tensors_[i].role == Role::input) {
      inputs_.push_back(std::move(buffers[i]));
    } else {
      REQUIRE(buffers[i].guard_intact());
      expected_.emplace_back(buffers[i].data(), buffers[i].data() + buffers[i].elements());
      for (float v : expected_.back()) REQUIRE(std::isfinite(v));
    }
  }
}

bool WorkloadChecker::check(const Config& config) {
  INFO(op_.name() << " " << format_params(params_) << " config " << format_config(config));
  KernelSource source = op_.source(Backend::cpu, params_, config);
  std::optional<Kernel> kernel;
  try {
    kernel.emplace(Kernel::build(source, dir_.path(), "k" + std::to_string(count_++)));
  } catch (const std::runtime_error& e) {
    // The kernel's own register check for this machine's vector width (e.g. 16 ymm
    // registers on AVX2 for vec=8): refused at compile time by design, not a failure.
    if (std::string(e.what()).find(kRegisterRefusal) != std::string::npos) {
      WARN("refused by the kernel's register check on this machine: " << format_config(config));
      return true;
    }
    throw;
  }
  return compare(*kernel, true);
}

bool WorkloadChecker::check(const KernelSource& source) {
  INFO(op_.name() << " " << format_params(params_) << " source " << source.file_name);
  Kernel kernel = Kernel::build(source, dir_.path(), "k" + std::to_string(count_++));
  return compare(kernel, true);
}

bool WorkloadChecker::matches(const KernelSource& source) {
  Kernel kernel = Kernel::build(source, dir_.path(), "k" + std::to_string(count_++));
  return compare(kernel, false);
}

bool WorkloadChecker::compare(const Kernel& kernel, bool report) {
  double tol = op_.tolerance(params_);
  bool ok = true;
  for (int threads : {1, 2}) {
    INFO("threads " << threads);
    std::vector<Buffer> outputs;
    std::vector<kestrel_arg> args;
    std::size_t next_input = 0;
    for (const auto& tensor : tensors_) {
      if (tensor.role == Role::output) {
        outputs.emplace_back(tensor.elements());
        outputs.back().fill_nan();
      }
    }
    std::size_t next_output = 0;
    for (const auto& tensor : tensors_) {
      Buffer& b = tensor.role == Role::input ? inputs_[next_input++] : outputs[next_output++];
      args.push_back({b.data(), b.elements(), 0.0});
    }
    std::int64_t live_before = live_allocations();
    std::int32_t rc = kernel.run(args, threads);
    if (report) {
      CHECK(rc == 0);
      CHECK(live_allocations() == live_before);  // the kernel releases its scratch
    }
    ok = ok && rc == 0 && live_allocations() == live_before;
    for (std::size_t o = 0; o < outputs.size(); ++o) {
      if (report) CHECK(outputs[o].guard_intact());
      ok = ok && outputs[o].guard_intact();
      const auto& want = expected_[o];
      const float* got = outputs[o].data();
      std::int64_t bad = 0, first_bad = -1;
      double max_err = 0;
      for (std::size_t j = 0; j < want.size(); ++j) {
        double err = std::fabs(static_cast<double>(got[j]) - want[j]);
        if (!(err <= tol * (1.0 + std::fabs(static_cast<double>(want[j]))))) {
          if (first_bad < 0) first_bad = static_cast<std::int64_t>(j);
          ++bad;
        }
        if (!(err <= max_err)) max_err = err;
      }
      if (report) {
        INFO("max error " << max_err << ", tolerance " << tol << ", " << bad << " bad elements, first at "
                          << first_bad << " (got "
                          << (first_bad >= 0 ? got[first_bad] : 0.0f) << ", expected "
                          << (first_bad >= 0 ? want[static_cast<std::size_t>(first_bad)] : 0.0f) << ")");
        CHECK(bad == 0);
      }
      ok = ok && bad == 0;
    }
  }
  return ok;
}

std::vector<Config> random_configs(const Op& op, const Params& params, int count, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto knobs = op.knobs(params);
  std::vector<Config> out;
  for (int i = 0, attempts = 0; i < count && attempts < 100000; ++attempts) {
    Config config;
    for (const auto& knob : knobs) {
      std::uniform_int_distribution<std::size_t> pick(0, knob.values.size() - 1);
      config[knob.name] = knob.values[pick(rng)];
    }
    // Cycle the structural knobs so that every count of configurations covers them.
    for (const auto& knob : knobs) {
      if (knob.name == "pack_b") config[knob.name] = knob.values[static_cast<std::size_t>(i) % knob.values.size()];
      if (knob.name == "pack_a") config[knob.name] = knob.values[static_cast<std::size_t>(i / 2) % knob.values.size()];
      if (knob.name == "split") config[knob.name] = knob.values[static_cast<std::size_t>(i) % knob.values.size()];
    }
    if (!op.check(params, config, native_traits()).empty()) continue;
    out.push_back(config);
    ++i;
  }
  return out;
}

}  // namespace kestrel::ops::test
