// The OpenCL session: context, profiling queue, buffers, and programs cached by module
// hash: in memory for the worker's batch, and as driver binaries on disk across batches
// (see program_cache_dir()).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <map>
#include <optional>
#include <utility>

#include "kestrel/base/file.h"

#include "gpu_session.h"
#include "opencl_devices.h"

namespace kestrel::device::gpu {
namespace {

// Creates `path` and its parents (mode 0700); true when it exists afterwards.
bool make_dirs(const std::string& path) {
  for (std::size_t at = 1; at <= path.size(); ++at) {
    if (at == path.size() || path[at] == '/') {
      std::string prefix = path.substr(0, at);
      if (::mkdir(prefix.c_str(), 0700) != 0 && errno != EEXIST) return false;
    }
  }
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// FNV-1a, to name a device's binaries (device name + driver version) in the cache.
std::string fingerprint(const std::string& text) {
  std::uint64_t h = 1469598103934665603ull;
  for (unsigned char c : text) h = (h ^ c) * 1099511628211ull;
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  for (int i = 15; i >= 0; --i) out += kDigits[(h >> (4 * i)) & 15];
  return out;
}

bool write_atomically(const std::string& path, const std::vector<unsigned char>& bytes) {
  std::string temp = path + ".tmp" + std::to_string(::getpid());
  int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return false;
  std::size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += static_cast<std::size_t>(n);
  }
  bool ok = ::close(fd) == 0 && done == bytes.size() && ::rename(temp.c_str(), path.c_str()) == 0;
  if (!ok) ::unlink(temp.c_str());
  return ok;
}

class OpenClSession final : public Session {
 public:
  OpenClSession(const OpenCl& cl, OpenClDevice device) : cl_(cl), device_(device) {}

  ~OpenClSession() override {
    if (queue_) cl_.Finish(queue_);
    if (kernel_) cl_.ReleaseKernel(kernel_);
    for (auto& [hash, program] : programs_) cl_.ReleaseProgram(program);
    for (cl_mem buffer : buffers_) cl_.ReleaseMemObject(buffer);
    if (flush_) cl_.ReleaseMemObject(flush_);
    if (queue_) cl_.ReleaseCommandQueue(queue_);
    if (context_) cl_.ReleaseContext(context_);
  }

  std::string open() {
    cl_int rc = CL_SUCCESS;
    context_ = cl_.CreateContext(nullptr, 1, &device_.device, nullptr, nullptr, &rc);
    if (!context_) return "clCreateContext: " + cl_error_name(rc);
    queue_ = cl_.CreateCommandQueue(context_, device_.device, CL_QUEUE_PROFILING_ENABLE, &rc);
    if (!queue_) return "clCreateCommandQueue: " + cl_error_name(rc);
    info_ = describe(cl_, device_);
    return {};
  }

  Status upload(const std::vector<HostArg>& args, std::string& message) override {
    args_ = args;
    for (const HostArg& arg : args_) {
      cl_int rc = CL_SUCCESS;
      std::size_t bytes = static_cast<std::size_t>(std::max<std::int64_t>(arg.elements, 1)) * sizeof(float);
      cl_mem buffer = cl_.CreateBuffer(context_, CL_MEM_READ_WRITE, bytes, nullptr, &rc);
      if (!buffer) {
        message = "allocating a " + std::to_string(bytes) + "-byte OpenCL buffer: " + cl_error_name(rc);
        return Status::runtime_error;
      }
      buffers_.push_back(buffer);
      if (!arg.is_output && arg.elements > 0) {
        rc = cl_.EnqueueWriteBuffer(queue_, buffer, CL_TRUE, 0, bytes, arg.data, 0, nullptr, nullptr);
        if (rc != CL_SUCCESS) {
          message = "uploading an argument: " + cl_error_name(rc);
          return Status::runtime_error;
        }
      }
    }
    return Status::ok;
  }

  Status load(const kernel::GpuModule& module, const std::string& hash, std::string& message) override {
    if (kernel_) {
      cl_.ReleaseKernel(kernel_);
      kernel_ = nullptr;
    }
    module_ = module;
    cl_program program = nullptr;
    if (auto hit = programs_.find(hash); hit != programs_.end()) {
      program = hit->second;
    } else if ((program = load_cached(module, hash)) != nullptr) {
      programs_.emplace(hash, program);
    } else {
      const char* text = reinterpret_cast<const char*>(module.code.data());
      std::size_t length = module.code.size();
      cl_int rc = CL_SUCCESS;
      program = cl_.CreateProgramWithSource(context_, 1, &text, &length, &rc);
      if (!program) {
        message = "clCreateProgramWithSource: " + cl_error_name(rc);
        return Status::device_load_error;
      }
      rc = cl_.BuildProgram(program, 1, &device_.device, module.build_options.c_str(), nullptr, nullptr);
      if (rc != CL_SUCCESS) {
        message = "OpenCL build failed on " + info_.name + " (" + cl_error_name(rc) + "):\n" + build_log(program);
        cl_.ReleaseProgram(program);
        return Status::device_compile_error;
      }
      programs_.emplace(hash, program);
      store_cached(program, hash);
    }
    cl_int rc = CL_SUCCESS;
    kernel_ = cl_.CreateKernel(program, module.entry.c_str(), &rc);
    if (!kernel_) {
      message = "no kernel '" + module.entry + "' in the program: " + cl_error_name(rc);
      return Status::device_load_error;
    }
    for (cl_uint i = 0; i < buffers_.size(); ++i) {
      rc = cl_.SetKernelArg(kernel_, i, sizeof(cl_mem), &buffers_[i]);
      if (rc != CL_SUCCESS) {
        message = "setting kernel argument " + std::to_string(i) + ": " + cl_error_name(rc) +
                  " (does the kernel take one global float pointer per tensor?)";
        return Status::device_load_error;
      }
    }
    return Status::ok;
  }

  Status run_once(std::string& message) override {
    const float nan = __builtin_nanf("");
    for (std::size_t i = 0; i < args_.size(); ++i) {
      if (!args_[i].is_output) continue;
      cl_int rc = cl_.EnqueueFillBuffer(queue_, buffers_[i], &nan, sizeof nan, 0, bytes_of(i), 0, nullptr, nullptr);
      if (rc != CL_SUCCESS) return fail("clearing an output", rc, message);
    }
    if (cl_int rc = launch(nullptr); rc != CL_SUCCESS) return fail("launching " + module_.entry, rc, message);
    for (std::size_t i = 0; i < args_.size(); ++i) {
      if (!args_[i].is_output) continue;
      cl_int rc = cl_.EnqueueReadBuffer(queue_, buffers_[i], CL_TRUE, 0, bytes_of(i), args_[i].data, 0, nullptr,
                                        nullptr);
      if (rc != CL_SUCCESS) return fail("reading an output back", rc, message);
    }
    if (cl_int rc = cl_.Finish(queue_); rc != CL_SUCCESS) return fail("running " + module_.entry, rc, message);
    return Status::ok;
  }

  Status time_round(std::uint32_t number, bool flush, double& seconds, std::string& message) override {
    if (flush) {
      if (cl_int rc = flush_cache(); rc != CL_SUCCESS) return fail("flushing the device cache", rc, message);
    }
    number = std::max<std::uint32_t>(number, 1);
    cl_event first = nullptr, last = nullptr;
    for (std::uint32_t i = 0; i < number; ++i) {
      cl_event* event = i == 0 ? &first : i + 1 == number ? &last : nullptr;
      if (cl_int rc = launch(event); rc != CL_SUCCESS) {
        if (first) cl_.ReleaseEvent(first);
        return fail("launching " + module_.entry, rc, message);
      }
    }
    if (!last) last = first;
    cl_int rc = cl_.WaitForEvents(1, &last);
    cl_ulong start = 0, end = 0;
    if (rc == CL_SUCCESS) {
      rc = cl_.GetEventProfilingInfo(first, CL_PROFILING_COMMAND_START, sizeof start, &start, nullptr);
    }
    if (rc == CL_SUCCESS) rc = cl_.GetEventProfilingInfo(last, CL_PROFILING_COMMAND_END, sizeof end, &end, nullptr);
    if (last != first) cl_.ReleaseEvent(last);
    cl_.ReleaseEvent(first);
    if (rc != CL_SUCCESS) return fail("timing " + module_.entry, rc, message);
    seconds = static_cast<double>(end - start) * 1e-9 / number;
    return Status::ok;
  }

 private:
  std::size_t bytes_of(std::size_t i) const {
    return static_cast<std::size_t>(std::max<std::int64_t>(args_[i].elements, 1)) * sizeof(float);
  }

  cl_int launch(cl_event* event) {
    std::size_t global[3], local[3];
    for (int d = 0; d < 3; ++d) {
      local[d] = module_.block[d];
      global[d] = static_cast<std::size_t>(module_.grid[d]) * module_.block[d];
    }
    return cl_.EnqueueNDRangeKernel(queue_, kernel_, 3, nullptr, global, local, 0, nullptr, event);
  }

  // Overwrites a buffer twice the size of the device's global memory cache (8 MiB at least).
  cl_int flush_cache() {
    std::size_t bytes = std::max<std::size_t>(static_cast<std::size_t>(info_.l2_bytes) * 2, std::size_t(8) << 20);
    cl_int rc = CL_SUCCESS;
    if (!flush_) {
      flush_ = cl_.CreateBuffer(context_, CL_MEM_READ_WRITE, bytes, nullptr, &rc);
      if (!flush_) return rc;
    }
    ++flush_value_;
    rc = cl_.EnqueueFillBuffer(queue_, flush_, &flush_value_, sizeof flush_value_, 0, bytes, 0, nullptr, nullptr);
    return rc == CL_SUCCESS ? cl_.Finish(queue_) : rc;
  }

  // The on-disk program cache: $KESTREL_OPENCL_CACHE ("off" disables it), else
  // $XDG_CACHE_HOME/kestrel/opencl, else ~/.cache/kestrel/opencl. Empty when unusable:
  // the cache is an optimisation and never an error.
  static std::string program_cache_dir() {
    std::string dir;
    if (const char* env = std::getenv("KESTREL_OPENCL_CACHE"); env && *env) {
      if (std::string(env) == "off") return {};
      dir = env;
    } else if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) {
      dir = std::string(xdg) + "/kestrel/opencl";
    } else if (const char* home = std::getenv("HOME"); home && *home) {
      dir = std::string(home) + "/.cache/kestrel/opencl";
    } else {
      return {};
    }
    return make_dirs(dir) ? dir : std::string();
  }

  // <dir>/<module hash>-<device fingerprint>.bin, or empty without a cache.
  std::string cache_path(const std::string& hash) {
    if (!cache_dir_) cache_dir_ = program_cache_dir();
    if (cache_dir_->empty() || !rpc_valid_hash(hash)) return {};
    return *cache_dir_ + "/" + hash + "-" + fingerprint(info_.name + "|" + info_.vendor + "|" + info_.driver) + ".bin";
  }

  static bool rpc_valid_hash(const std::string& hash) {
    return !hash.empty() && hash.size() <= 128 &&
           std::all_of(hash.begin(), hash.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
  }

  // A program from a cached driver binary, built; null when absent or refused (a stale
  // or corrupt file is removed and the source is built instead).
  cl_program load_cached(const kernel::GpuModule& module, const std::string& hash) {
    std::string path = cache_path(hash);
    if (path.empty()) return nullptr;
    std::optional<std::string> bytes = kestrel::read_file(path, std::size_t(256) << 20);
    if (!bytes || bytes->empty()) return nullptr;
    const auto* binary = reinterpret_cast<const unsigned char*>(bytes->data());
    std::size_t length = bytes->size();
    cl_int status = CL_SUCCESS, rc = CL_SUCCESS;
    cl_program program = cl_.CreateProgramWithBinary(context_, 1, &device_.device, &length, &binary, &status, &rc);
    if (program && rc == CL_SUCCESS && status == CL_SUCCESS &&
        cl_.BuildProgram(program, 1, &device_.device, module.build_options.c_str(), nullptr, nullptr) == CL_SUCCESS) {
      return program;
    }
    if (program) cl_.ReleaseProgram(program);
    ::unlink(path.c_str());
    return nullptr;
  }

  void store_cached(cl_program program, const std::string& hash) {
    std::string path = cache_path(hash);
    if (path.empty()) return;
    std::size_t size = 0;
    if (cl_.GetProgramInfo(program, CL_PROGRAM_BINARY_SIZES, sizeof size, &size, nullptr) != CL_SUCCESS || size == 0) {
      return;
    }
    std::vector<unsigned char> binary(size);
    unsigned char* pointer = binary.data();
    if (cl_.GetProgramInfo(program, CL_PROGRAM_BINARIES, sizeof pointer, &pointer, nullptr) != CL_SUCCESS) return;
    write_atomically(path, binary);
  }

  Status fail(const std::string& what, cl_int rc, std::string& message) {
    message = what + ": " + cl_error_name(rc);
    return Status::runtime_error;
  }

  std::string build_log(cl_program program) {
    std::size_t size = 0;
    cl_.GetProgramBuildInfo(program, device_.device, CL_PROGRAM_BUILD_LOG, 0, nullptr, &size);
    std::string log(size, '\0');
    if (size > 0) cl_.GetProgramBuildInfo(program, device_.device, CL_PROGRAM_BUILD_LOG, size, log.data(), nullptr);
    while (!log.empty() && (log.back() == '\0' || log.back() == '\n')) log.pop_back();
    if (log.size() > 8000) log = log.substr(0, 8000) + "\n[build log truncated]";
    return log.empty() ? "(no build log)" : log;
  }

  const OpenCl& cl_;
  OpenClDevice device_;
  rpc::GpuInfo info_;
  cl_context context_ = nullptr;
  cl_command_queue queue_ = nullptr;
  std::vector<HostArg> args_;
  std::vector<cl_mem> buffers_;
  std::map<std::string, cl_program> programs_;  // built programs by module hash
  cl_kernel kernel_ = nullptr;
  kernel::GpuModule module_;
  cl_mem flush_ = nullptr;
  std::uint32_t flush_value_ = 0;
  std::optional<std::string> cache_dir_;  // resolved on first use
};

}  // namespace

std::unique_ptr<Session> open_opencl(unsigned device_index, std::string& error) {
  const OpenCl* cl = load_opencl(error);
  if (!cl) return nullptr;
  std::vector<OpenClDevice> devices = opencl_devices(*cl, error);
  if (devices.empty()) return nullptr;
  if (device_index >= devices.size()) {
    error = "OpenCL device " + std::to_string(device_index) + " does not exist (this device has " +
            std::to_string(devices.size()) + ")";
    return nullptr;
  }
  auto session = std::make_unique<OpenClSession>(*cl, devices[device_index]);
  error = session->open();
  if (!error.empty()) return nullptr;
  return session;
}

}  // namespace kestrel::device::gpu
