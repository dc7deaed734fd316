// Worker process: confines itself, loads kernel modules, prepares data, hands outputs to
// the runtime for the check and has candidates timed (timing_loop.h). Runs in a forked child with a single
// purpose, so it uses plain blocking I/O and one process-wide thread pool (the kernel
// ABI's services are plain C function pointers).
#include "worker.h"

#include "kestrel/device_runtime/capabilities.h"

#include <fcntl.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <map>
#include <new>
#include <mutex>
#include <optional>
#include <set>

#include "gpu_session.h"
#include "sandbox.h"
#include "timing_loop.h"
#include "kestrel/device_runtime/kernel_runner.h"
#include "kestrel/device_runtime/kernel_services.h"
#include "kestrel/kernel/abi.h"
#include "kestrel/base/file.h"
#include "kestrel/kernel/gpu_module.h"

namespace kestrel::device::worker {
namespace {

using Result = rpc::CandidateResult;

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

// The parent's answer to an `outputs` record: whether they matched the reference.
bool verdict() {
  std::uint8_t byte = 0;
  while (true) {
    ssize_t n = ::read(g_out_fd, &byte, 1);
    if (n == 1) return byte == 1;
    if (n < 0 && errno == EINTR) continue;
    std::_Exit(1);  // the parent is gone
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

// ---- kernel services: thread pool and scratch memory -------------------------------

KernelServices* g_services = nullptr;

void reclaim_scratch() { g_services->reclaim_scratch(); }

// ---- data --------------------------------------------------------------------------

FloatBuffer allocate(std::int64_t elements) {
  try {
    return FloatBuffer(elements);
  } catch (const std::bad_alloc&) {
    fatal(Status::runtime_error,
          "out of memory allocating a " + std::to_string(FloatBuffer::bytes_for(elements)) + "-byte argument");
  }
}

// Loads a CPU kernel module and finds its kernel `entry` (empty: the default entry name).
// `load_ms` gets how long it took.
std::optional<CpuKernelModule> load(int fd, const std::string& hash, const std::string& entry, std::string& error,
                                    double& load_ms) {
  if (fd < 0) {
    error = "module " + hash.substr(0, 12) + " is not on this device (upload it first)";
    return std::nullopt;
  }
  double start = now_seconds();
  auto module = CpuKernelModule::load(fd, hash.substr(0, 12), entry, error);
  load_ms = (now_seconds() - start) * 1e3;
  return module;
}

// ---- one batch -------------------------------------------------------------------

// Whether the module behind `fd` is a GPU module (a CUDA or OpenCL image).
bool is_gpu_module(int fd) {
  char magic[sizeof kernel::kGpuModuleMagic] = {};
  return fd >= 0 && ::pread(fd, magic, sizeof magic, 0) == static_cast<ssize_t>(sizeof magic) &&
         std::memcmp(magic, kernel::kGpuModuleMagic, sizeof magic) == 0;
}

struct Batch {
  const rpc::BatchRequest& spec;  // the request; the fds are below
  int reference_fd = -1;
  bool checked = false;  // a reference ran: each candidate's outputs go to the parent
  std::vector<FloatBuffer> buffers;
  std::vector<kestrel_arg> args;
  kestrel_services services{};
  CacheFlush cache{false};
  // GPU sessions by (backend, device index), opened on the first candidate that needs
  // one (contexts are created here in the worker, never in the runtime before a fork).
  struct GpuSlot {
    std::unique_ptr<gpu::Session> session;
    std::string error;
  };
  std::map<std::pair<kernel::GpuBackend, std::uint32_t>, GpuSlot> gpu_sessions;

  Batch(const BatchSpec& s, int reference) : spec(s.request), reference_fd(reference), checked(reference >= 0) {}

  void prepare() {
    std::uint64_t output_bytes = 0;
    for (const auto& arg : spec.args) {
      if (arg.is_output) output_bytes += static_cast<std::uint64_t>(arg.elements) * sizeof(float);
    }
    if (reference_fd >= 0 && output_bytes > 0xffffffffu) {
      fatal(Status::runtime_error, "outputs of " + std::to_string(output_bytes) +
                                       " bytes are too large to check (at most 4 GiB per candidate)");
    }
    for (std::size_t i = 0; i < spec.args.size(); ++i) {
      buffers.push_back(allocate(spec.args[i].elements));
      if (!spec.args[i].is_output) fill_uniform(buffers.back().span(), spec.settings.seed + i);
    }
    for (const auto& b : buffers) args.push_back(kestrel_arg{b.data(), b.size(), 0.0});
    services = *g_services->table();
    if (spec.settings.flush_cache) cache = CacheFlush(true);
    if (reference_fd >= 0) run_reference();
  }

  // The output arguments' values, in order, after a record header of `type`.
  void send_outputs(Record type, std::uint32_t index) {
    std::size_t bytes = 0;
    for (std::size_t i = 0; i < spec.args.size(); ++i) {
      if (spec.args[i].is_output) bytes += static_cast<std::size_t>(buffers[i].size()) * sizeof(float);
    }
    RecordHeader header{static_cast<std::uint32_t>(type), index, static_cast<std::uint32_t>(bytes)};
    write_all(&header, sizeof header);
    for (std::size_t i = 0; i < spec.args.size(); ++i) {
      if (spec.args[i].is_output) write_all(buffers[i].data(), static_cast<std::size_t>(buffers[i].size()) * sizeof(float));
    }
  }

  // After the warm-up call: the parent compares the outputs with the reference's.
  bool outputs_match(std::uint32_t index) {
    send_outputs(Record::outputs, index);
    return verdict();
  }

  // Runs the reference (unloaded again before any candidate) and hands its outputs to
  // the parent with `ready`; no copy stays in this process.
  void run_reference() {
    std::string error;
    double load_ms = 0;
    {
      auto reference = load(reference_fd, spec.reference_hash, spec.reference_entry, error, load_ms);
      if (!reference) fatal(Status::device_load_error, "reference kernel: " + error);
      clear_outputs();
      int32_t rc = reference->call(&services, args);
      reclaim_scratch();
      if (rc != 0) fatal(Status::runtime_error, "reference kernel returned " + std::to_string(rc));
    }
    send_outputs(Record::ready, 0);
    clear_outputs();
  }

  void clear_outputs() {
    for (std::size_t i = 0; i < spec.args.size(); ++i) {
      if (spec.args[i].is_output) fill_nan(buffers[i].span());
    }
  }

  int32_t call(const CpuKernelModule& module) {
    int32_t rc = module.call(&services, args);
    reclaim_scratch();
    return rc;
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
          host_args.push_back({buffers[i].data(), buffers[i].size(), spec.args[i].is_output});
        }
        if (slot->second.session->upload(host_args, slot->second.error) != Status::ok) slot->second.session.reset();
      }
    }
    error = slot->second.error;
    return slot->second.session.get();
  }

  // A CUDA or OpenCL candidate: same method as on the CPU, timed with device events.
  Result measure_gpu(std::uint32_t index, const rpc::CandidateRequest& candidate, const std::vector<std::uint8_t>& image) {
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
    if (checked && !outputs_match(index)) {
      result.status = Status::wrong_answer;  // the parent has the details
      return result;
    }
    time_gpu(spec.settings, *session, result);
    return result;
  }

  Result measure(std::uint32_t index, const rpc::CandidateRequest& candidate, int module_fd) {
    if (auto image = gpu_image(module_fd)) return measure_gpu(index, candidate, *image);
    Result result;
    result.id = candidate.id;
    auto module = load(module_fd, candidate.module_hash, candidate.entry, result.message, result.load_ms);
    if (!module) {
      result.status = Status::device_load_error;
      return result;
    }
    // Warm-up, which is also the correctness run.
    clear_outputs();
    int32_t rc = call(*module);
    if (rc != 0) {
      result.status = Status::runtime_error;
      result.message = g_services->describe_error(rc);
      return result;
    }
    if (checked && !outputs_match(index)) {
      result.status = Status::wrong_answer;  // the parent has the details
      return result;
    }
    time_cpu(spec.settings, *module, &services, args, *g_services, cache, result);
    return result;
  }
};

}  // namespace

namespace {

std::uint64_t process_address_space() {
  auto statm = read_file("/proc/self/statm");
  if (!statm) return 0;
  return std::strtoull(statm->c_str(), nullptr, 10) * static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
}

// Limits for this worker: the address space it has, its buffers twice over (scratch),
// the cache flush, each thread's stack and malloc arena, and 1 GiB; CPU time for every
// core over the whole batch's deadlines (a backstop: the parent's deadlines act first).
sandbox::Plan plan_for(const BatchSpec& spec, std::size_t first, bool gpu, unsigned threads) {
  const auto& request = spec.request;
  sandbox::Plan plan;
  plan.kind = gpu ? sandbox::Kind::gpu : sandbox::Kind::cpu;
  const double timeout_s = std::max<std::uint32_t>(request.settings.timeout_ms, 1) * 1e-3;
  const double wall_s = 4 * timeout_s + 10 + static_cast<double>(request.candidates.size() - first) * timeout_s;
  const unsigned cores = usable_cpus();
  plan.cpu_seconds = static_cast<std::uint64_t>(std::ceil(wall_s * cores)) + 10;
  if (!gpu) {  // GPU drivers (CUDA above all) reserve address space far beyond their use
    std::uint64_t buffers = 0;
    for (const auto& arg : request.args) buffers += FloatBuffer::bytes_for(arg.elements);
    const std::uint64_t flush = request.settings.flush_cache ? CacheFlush::bytes() : 0;
    plan.address_space_bytes = process_address_space() + 2 * buffers + flush +
                               static_cast<std::uint64_t>(threads) * (72ull << 20) + (1ull << 30);
    if (sizeof(void*) == 4 && plan.address_space_bytes >= (4ull << 30)) plan.address_space_bytes = 0;
  }
  return plan;
}

}  // namespace

void run(int fd, const BatchSpec& spec, std::size_t first, std::span<const std::string> notices) {
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
  unsigned cores = usable_cpus();
  unsigned threads = std::min(spec.request.settings.threads ? spec.request.settings.threads : cores, 256u);

  // Confinement before any uploaded code (the reference included) is loaded.
  std::vector<int> fds = {fd, spec.reference_fd};
  bool gpu = is_gpu_module(spec.reference_fd);
  for (std::size_t i = first; i < spec.module_fds.size(); ++i) {
    fds.push_back(spec.module_fds[i]);
    gpu = gpu || is_gpu_module(spec.module_fds[i]);
  }
  sandbox::Outcome confined = sandbox::enter(plan_for(spec, first, gpu, threads), fds);
  g_out_fd = fds[0];
  // A changed user clears the parent-death signal.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() == 1) std::_Exit(1);
  for (const auto& reason : notices) {
    send(Record::notice, 0, {reinterpret_cast<const std::uint8_t*>(reason.data()), reason.size()});
  }
  for (const auto& reason : confined.degraded) {
    send(Record::notice, 0, {reinterpret_cast<const std::uint8_t*>(reason.data()), reason.size()});
  }

  static KernelServices services(threads);
  g_services = &services;

  Batch batch(spec, fds[1]);
  batch.prepare();
  if (!batch.checked) send(Record::ready, 0);  // else run_reference() sent it with the outputs
  for (std::size_t i = first; i < spec.request.candidates.size(); ++i) {
    const auto index = static_cast<std::uint32_t>(i);
    send(Record::started, index);
    Result result = batch.measure(index, spec.request.candidates[i], fds[2 + (i - first)]);
    send(Record::result, index, rpc::encode_result(result));
  }
  std::_Exit(0);
}

}  // namespace kestrel::device::worker
