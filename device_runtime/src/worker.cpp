// Worker process: loads kernel modules, prepares data, checks and times candidates.
// Runs in a forked child with a single purpose, so it uses plain blocking I/O and one
// process-wide thread pool (the kernel ABI's services are plain C function pointers).
#include "worker.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include "gpu_session.h"
#include "kestrel/device_runtime/kernel_services.h"
#include "kestrel/kernel/abi.h"
#include "kestrel/base/file.h"
#include "kestrel/kernel/gpu_module.h"

namespace kestrel::device::worker {
namespace {

using Result = rpc::CandidateResult;
using Settings = rpc::MeasureSettings;

// ---- records to the parent ------------------------------------------------------

int g_out_fd = -1;

void write_all(const void* data, std::size_t size) {
  const auto* p = static_cast<const std::uint8_t*>(data);
  while (size > 0) {
    ssize_t n = ::write(g_out_fd, p, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      std::_Exit(1);  // the parent is gone
    }
    p += n;
    size -= static_cast<std::size_t>(n);
  }
}

void send(Record type, std::uint32_t index, std::span<const std::uint8_t> payload = {}) {
  RecordHeader header{static_cast<std::uint32_t>(type), index, static_cast<std::uint32_t>(payload.size())};
  write_all(&header, sizeof header);
  if (!payload.empty()) write_all(payload.data(), payload.size());
}

// Ends the batch: payload is the status every remaining candidate gets, then the message.
[[noreturn]] void fatal(Status status, const std::string& message) {
  std::vector<std::uint8_t> payload(4 + message.size());
  auto code = static_cast<std::uint32_t>(status);
  std::memcpy(payload.data(), &code, 4);
  std::memcpy(payload.data() + 4, message.data(), message.size());
  send(Record::fatal, 0, payload);
  std::_Exit(0);
}

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

double now_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// ---- kernel services: thread pool and scratch memory -------------------------------

KernelServices* g_services = nullptr;

void reclaim_scratch() { g_services->reclaim_scratch(); }

// ---- data --------------------------------------------------------------------------

struct Buffer {
  float* data = nullptr;
  std::int64_t elements = 0;
  Buffer() = default;
  explicit Buffer(std::int64_t n) : elements(n) {
    std::size_t bytes = (static_cast<std::size_t>(std::max<std::int64_t>(n, 1)) * sizeof(float) + 63) / 64 * 64;
    data = static_cast<float*>(std::aligned_alloc(64, bytes));
    if (!data) fatal(Status::runtime_error, "out of memory allocating a " + std::to_string(bytes) + "-byte argument");
  }
  Buffer(Buffer&& other) noexcept : data(other.data), elements(other.elements) { other.data = nullptr; }
  Buffer& operator=(Buffer&&) = delete;
  ~Buffer() { std::free(data); }
};

void fill_random(Buffer& buffer, std::uint64_t seed) {
  std::uint64_t state = seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull;
  for (std::int64_t i = 0; i < buffer.elements; ++i) {
    // splitmix64
    std::uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    buffer.data[i] = static_cast<float>(static_cast<double>(z >> 40) * (2.0 / 16777216.0) - 1.0);
  }
}

void fill_nan(Buffer& buffer) {
  for (std::int64_t i = 0; i < buffer.elements; ++i) buffer.data[i] = std::nanf("");
}

// ---- modules ---------------------------------------------------------------------

struct Module {
  void* handle = nullptr;
  kestrel_kernel_fn entry = nullptr;
  std::string error;
  double load_ms = 0;
  ~Module() {
    if (handle) dlclose(handle);
  }
};

// `entry`: the kernel's symbol; empty: the ABI's single entry (KESTREL_KERNEL_ENTRY).
void load(Module& module, int fd, const std::string& hash, const std::string& entry) {
  if (fd < 0) {
    module.error = "module " + hash.substr(0, 12) + " is not on this device (upload it first)";
    return;
  }
  double start = now_seconds();
  std::string path = "/proc/self/fd/" + std::to_string(fd);
  module.handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  module.load_ms = (now_seconds() - start) * 1e3;
  if (!module.handle) {
    const char* why = dlerror();
    std::string mismatch = architecture_mismatch(fd);
    if (!mismatch.empty()) {
      module.error = "cannot load module " + hash.substr(0, 12) + ": " + mismatch;
      return;
    }
    module.error = std::string("cannot load module ") + hash.substr(0, 12) + ": " + (why ? why : "dlopen failed");
    // dlerror names the memfd path; the hash is the useful name.
    if (auto pos = module.error.find(path + ": "); pos != std::string::npos) module.error.erase(pos, path.size() + 2);
    return;
  }
  auto* version = static_cast<const std::uint32_t*>(dlsym(module.handle, KESTREL_KERNEL_ABI_SYMBOL));
  if (!version) {
    module.error = "module " + hash.substr(0, 12) + " does not export " KESTREL_KERNEL_ABI_SYMBOL " (not a Kestrel kernel)";
    return;
  }
  if (*version != KESTREL_KERNEL_ABI_VERSION) {
    module.error = "module " + hash.substr(0, 12) + " was built for kernel ABI " + std::to_string(*version) +
                   " but this runtime implements " + std::to_string(KESTREL_KERNEL_ABI_VERSION);
    return;
  }
  const std::string symbol = entry.empty() ? std::string(KESTREL_KERNEL_ENTRY) : entry;
  module.entry = reinterpret_cast<kestrel_kernel_fn>(dlsym(module.handle, symbol.c_str()));
  if (!module.entry) module.error = "module " + hash.substr(0, 12) + " does not export " + symbol;
}

// ---- one batch -------------------------------------------------------------------

struct Batch {
  const rpc::BatchRequest& spec;  // the request; the fds are below
  int reference_fd = -1;
  std::vector<Buffer> buffers;
  std::vector<Buffer> expected;  // reference outputs, parallel to output args
  std::vector<kestrel_arg> args;
  kestrel_services services{};
  std::vector<std::uint8_t> flush;
  // GPU sessions by (backend, device index), opened on the first candidate that needs
  // one (contexts are created here in the worker, never in the runtime before a fork).
  struct GpuSlot {
    std::unique_ptr<gpu::Session> session;
    std::string error;
  };
  std::map<std::pair<kernel::GpuBackend, std::uint32_t>, GpuSlot> gpu_sessions;

  explicit Batch(const BatchSpec& s) : spec(s.request), reference_fd(s.reference_fd) {}

  void prepare() {
    for (std::size_t i = 0; i < spec.args.size(); ++i) {
      buffers.emplace_back(spec.args[i].elements);
      if (!spec.args[i].is_output) fill_random(buffers.back(), spec.settings.seed + i);
    }
    for (const auto& b : buffers) args.push_back(kestrel_arg{b.data, b.elements, 0.0});
    services = *g_services->table();
    if (spec.settings.flush_cache) flush.resize(flush_bytes());
    if (reference_fd >= 0) run_reference();
  }

  static std::size_t flush_bytes() {
    std::size_t largest = 0;
    for (int index = 0; index < 8; ++index) {
      auto content = read_file("/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index) + "/size");
      if (!content) break;
      std::string text = *content;
      while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
      if (text.empty()) break;
      std::size_t value = std::strtoull(text.c_str(), nullptr, 10);
      if (text.back() == 'K') value <<= 10;
      if (text.back() == 'M') value <<= 20;
      largest = std::max(largest, value);
    }
    return std::max<std::size_t>(largest * 2, std::size_t(8) << 20);
  }

  void run_reference() {
    Module reference;
    load(reference, reference_fd, spec.reference_hash, spec.reference_entry);
    if (!reference.entry) fatal(Status::device_load_error, "reference kernel: " + reference.error);
    for (std::size_t i = 0; i < spec.args.size(); ++i) {
      if (spec.args[i].is_output) fill_nan(buffers[i]);
    }
    int32_t rc = reference.entry(&services, args.data(), static_cast<int32_t>(args.size()));
    reclaim_scratch();
    if (rc != 0) fatal(Status::runtime_error, "reference kernel returned " + std::to_string(rc));
    for (std::size_t i = 0; i < spec.args.size(); ++i) {
      if (!spec.args[i].is_output) continue;
      Buffer copy(buffers[i].elements);
      std::memcpy(copy.data, buffers[i].data, static_cast<std::size_t>(buffers[i].elements) * sizeof(float));
      expected.push_back(std::move(copy));
    }
  }

  void clear_outputs() {
    for (std::size_t i = 0; i < spec.args.size(); ++i) {
      if (spec.args[i].is_output) fill_nan(buffers[i]);
    }
  }

  // Returns an empty string when all outputs match within the tolerance.
  std::string check(double& max_error) {
    max_error = 0;
    std::size_t which = 0;
    std::string first_bad;
    for (std::size_t i = 0; i < spec.args.size(); ++i) {
      if (!spec.args[i].is_output) continue;
      const Buffer& want = expected[which++];
      const float* got = buffers[i].data;
      for (std::int64_t j = 0; j < want.elements; ++j) {
        double e = want.data[j];
        double g = got[j];
        double err = std::fabs(g - e);
        if (!(err <= spec.tolerance * (1.0 + std::fabs(e)))) {
          if (std::isnan(err)) err = INFINITY;
          if (first_bad.empty()) {
            char text[160];
            std::snprintf(text, sizeof text, "element %lld of argument %zu is %.6g, expected %.6g",
                          static_cast<long long>(j), i, g, e);
            first_bad = text;
          }
        }
        if (err > max_error || std::isnan(err)) max_error = std::isnan(err) ? INFINITY : err;
      }
    }
    if (first_bad.empty()) return {};
    char text[96];
    std::snprintf(text, sizeof text, "max error %.3g exceeds tolerance %.3g; first: ", max_error, spec.tolerance);
    return text + first_bad;
  }

  int32_t call(kestrel_kernel_fn entry) {
    int32_t rc = entry(&services, args.data(), static_cast<int32_t>(args.size()));
    reclaim_scratch();
    return rc;
  }

  void flush_caches() {
    for (std::size_t i = 0; i < flush.size(); i += 64) flush[i] = static_cast<std::uint8_t>(flush[i] + 1);
  }

  // The whole module image behind an fd, or nothing when it is not a GPU module.
  static std::optional<std::vector<std::uint8_t>> gpu_image(int fd) {
    if (fd < 0) return std::nullopt;
    char magic[sizeof kernel::kGpuModuleMagic] = {};
    if (::pread(fd, magic, sizeof magic, 0) != static_cast<ssize_t>(sizeof magic) ||
        std::memcmp(magic, kernel::kGpuModuleMagic, sizeof magic) != 0)
      return std::nullopt;
    std::vector<std::uint8_t> image;
    std::uint8_t chunk[65536];
    for (off_t at = 0;;) {
      ssize_t n = ::pread(fd, chunk, sizeof chunk, at);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      image.insert(image.end(), chunk, chunk + n);
      at += n;
    }
    return image;
  }

  gpu::Session* gpu_session(kernel::GpuBackend backend, std::uint32_t index, std::string& error) {
    auto [slot, fresh] = gpu_sessions.try_emplace({backend, index});
    if (fresh) {
      slot->second.session = backend == kernel::GpuBackend::cuda ? gpu::open_cuda(index, slot->second.error)
                                                              : gpu::open_opencl(index, slot->second.error);
      if (slot->second.session) {
        std::vector<gpu::HostArg> host_args;
        for (std::size_t i = 0; i < spec.args.size(); ++i) {
          host_args.push_back({buffers[i].data, buffers[i].elements, spec.args[i].is_output});
        }
        if (slot->second.session->upload(host_args, slot->second.error) != Status::ok) slot->second.session.reset();
      }
    }
    error = slot->second.error;
    return slot->second.session.get();
  }

  // A CUDA or OpenCL candidate: same method as on the CPU, timed with device events.
  Result measure_gpu(const rpc::CandidateRequest& candidate, const std::vector<std::uint8_t>& image) {
    Result result;
    result.id = candidate.id;
    const std::string name = candidate.module_hash.substr(0, 12);
    kernel::GpuModule module;
    std::string error;
    if (!kernel::decode_gpu_module(image, module, error)) {
      result.status = Status::device_load_error;
      result.message = "module " + name + ": " + error;
      return result;
    }
    double start = now_seconds();
    gpu::Session* session = gpu_session(module.backend, module.device_index, error);
    if (!session) {
      result.status = Status::device_load_error;
      result.message = "cannot use " + std::string(kernel::to_string(module.backend)) + " device " +
                       std::to_string(module.device_index) + ": " + error;
      return result;
    }
    result.status = session->load(module, candidate.module_hash, result.message);
    result.load_ms = (now_seconds() - start) * 1e3;
    if (result.status != Status::ok) return result;
    clear_outputs();
    if ((result.status = session->run_once(result.message)) != Status::ok) return result;
    if (!expected.empty()) {
      std::string mismatch = check(result.max_error);
      if (!mismatch.empty()) {
        result.status = Status::wrong_answer;
        result.message = mismatch;
        return result;
      }
    }
    const Settings& s = spec.settings;
    std::uint32_t number = s.number;
    double seconds = 0;
    if (number == 0) {
      if ((result.status = session->time_round(1, false, seconds, result.message)) != Status::ok) return result;
      number = static_cast<std::uint32_t>(std::clamp(std::ceil(s.min_repeat_ms * 1e-3 / std::max(seconds, 1e-9)), 1.0, 1e7));
      for (int attempt = 0; attempt < 4 && s.min_repeat_ms > 0; ++attempt) {
        if ((result.status = session->time_round(number, false, seconds, result.message)) != Status::ok) return result;
        double round = seconds * number;
        if (round >= s.min_repeat_ms * 1e-3 || number >= 10'000'000) break;
        double grow = s.min_repeat_ms * 1e-3 / std::max(round, 1e-9) * 1.1;
        number = static_cast<std::uint32_t>(std::clamp(std::ceil(number * grow), number + 1.0, 1e7));
      }
    }
    result.number = number;
    for (std::uint32_t round = 0; round < std::max<std::uint32_t>(s.repeat, 1); ++round) {
      if (round > 0 && s.cooldown_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(s.cooldown_ms));
      if ((result.status = session->time_round(number, s.flush_cache, seconds, result.message)) != Status::ok) {
        result.round_seconds.clear();
        return result;
      }
      result.round_seconds.push_back(seconds);
    }
    return result;
  }

  Result measure(const rpc::CandidateRequest& candidate, int module_fd) {
    if (auto image = gpu_image(module_fd)) return measure_gpu(candidate, *image);
    Result result;
    result.id = candidate.id;
    Module module;
    load(module, module_fd, candidate.module_hash, candidate.entry);
    result.load_ms = module.load_ms;
    if (!module.entry) {
      result.status = Status::device_load_error;
      result.message = module.error;
      return result;
    }
    // Warm-up, which is also the correctness run.
    clear_outputs();
    double start = now_seconds();
    int32_t rc = call(module.entry);
    double single = now_seconds() - start;
    if (rc != 0) {
      result.status = Status::runtime_error;
      result.message = "kernel returned error code " + std::to_string(rc);
      return result;
    }
    if (!expected.empty()) {
      std::string mismatch = check(result.max_error);
      if (!mismatch.empty()) {
        result.status = Status::wrong_answer;
        result.message = mismatch;
        return result;
      }
    }
    const Settings& s = spec.settings;
    std::uint32_t number = s.number;
    if (number == 0) {
      // A second, warm call estimates the per-call time; number grows to fill min_repeat_ms.
      start = now_seconds();
      call(module.entry);
      single = std::max(now_seconds() - start, 1e-9);
      double wanted = s.min_repeat_ms * 1e-3 / single;
      number = static_cast<std::uint32_t>(std::clamp(std::ceil(wanted), 1.0, 1e7));
      // The estimate comes from one call; grow it until a whole round really lasts
      // min_repeat_ms (a few untimed calibration rounds at most).
      for (int attempt = 0; attempt < 4 && s.min_repeat_ms > 0; ++attempt) {
        start = now_seconds();
        for (std::uint32_t i = 0; i < number; ++i) module.entry(&services, args.data(), static_cast<int32_t>(args.size()));
        double round = now_seconds() - start;
        reclaim_scratch();
        if (round >= s.min_repeat_ms * 1e-3 || number >= 10'000'000) break;
        double grow = s.min_repeat_ms * 1e-3 / std::max(round, 1e-9) * 1.1;
        number = static_cast<std::uint32_t>(std::clamp(std::ceil(number * grow), number + 1.0, 1e7));
      }
    }
    result.number = number;
    for (std::uint32_t round = 0; round < std::max<std::uint32_t>(s.repeat, 1); ++round) {
      if (round > 0 && s.cooldown_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(s.cooldown_ms));
      if (!flush.empty()) flush_caches();
      start = now_seconds();
      for (std::uint32_t i = 0; i < number; ++i) {
        if (module.entry(&services, args.data(), static_cast<int32_t>(args.size())) != 0) {
          result.status = Status::runtime_error;
          result.message = "kernel returned an error code in a timed round";
          reclaim_scratch();
          return result;
        }
      }
      double elapsed = now_seconds() - start;
      reclaim_scratch();
      result.round_seconds.push_back(elapsed / number);
    }
    return result;
  }
};

}  // namespace

void run(int fd, const BatchSpec& spec, std::size_t first) {
  g_out_fd = fd;
  // Die with the runtime; leave the runtime's signal handling (Asio's signal pipe) alone.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() == 1) std::_Exit(1);
  // Default dispositions: a crashing kernel must kill this process, whatever handlers
  // the runtime (or a test framework) installed before the fork.
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGPIPE, SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGTRAP, SIGSYS}) {
    std::signal(sig, SIG_DFL);
  }
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  unsigned threads = spec.request.settings.threads ? spec.request.settings.threads : cores;
  static KernelServices services(std::min(threads, 256u));
  g_services = &services;

  Batch batch(spec);
  batch.prepare();
  send(Record::ready, 0);
  for (std::size_t i = first; i < spec.request.candidates.size(); ++i) {
    send(Record::started, static_cast<std::uint32_t>(i));
    Result result = batch.measure(spec.request.candidates[i], spec.module_fds[i]);
    send(Record::result, static_cast<std::uint32_t>(i), rpc::encode_result(result));
  }
  std::_Exit(0);
}

}  // namespace kestrel::device::worker
