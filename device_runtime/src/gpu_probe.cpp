// GPU discovery for the registration info: a short-lived child process loads the CUDA
// driver and the OpenCL ICD loader, lists their devices and reports them over a pipe.
// The runtime itself never initialises CUDA or OpenCL (contexts must not exist before
// the workers are forked, and a driver's threads do not survive a fork).
#include "kestrel/device_runtime/capabilities.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "gpu_api.h"
#include "opencl_devices.h"

namespace kestrel::device {
namespace {

// One record per line, fields separated by tabs; tabs and newlines inside fields are
// replaced by spaces.
std::string clean(std::string text) {
  for (char& c : text) {
    if (c == '\t' || c == '\n' || c == '\r') c = ' ';
  }
  while (!text.empty() && (text.back() == ' ' || text.back() == '\0')) text.pop_back();
  return text;
}

std::string encode(const rpc::GpuInfo& g) {
  return "gpu\t" + clean(g.backend) + "\t" + std::to_string(g.index) + "\t" + clean(g.name) + "\t" + clean(g.vendor) +
         "\t" + clean(g.version) + "\t" + clean(g.driver) + "\t" + std::to_string(g.memory_bytes) + "\t" +
         std::to_string(g.compute_units) + "\t" + std::to_string(g.max_threads_per_group) + "\t" +
         std::to_string(g.max_shared_bytes) + "\t" + std::to_string(g.l2_bytes) + "\n";
}

std::vector<std::string> split(const std::string& line, char separator) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (true) {
    auto end = line.find(separator, start);
    out.push_back(line.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return out;
}

std::uint64_t number(const std::string& text) { return std::strtoull(text.c_str(), nullptr, 10); }

void probe_opencl(std::string& out) {
  std::string error;
  const gpu::OpenCl* cl = gpu::load_opencl(error);
  if (!cl) {
    out += "note\t" + clean(error) + "\n";
    return;
  }
  std::vector<gpu::OpenClDevice> devices = gpu::opencl_devices(*cl, error);
  if (devices.empty()) {
    out += "note\t" + clean(error.empty() ? "no OpenCL device" : error) + "\n";
    return;
  }
  for (unsigned i = 0; i < devices.size(); ++i) {
    rpc::GpuInfo g = gpu::describe(*cl, devices[i]);
    g.index = i;
    out += encode(g);
  }
}

void probe_cuda(std::string& out) {
  std::string error;
  const gpu::Cuda* cu = gpu::load_cuda(error);
  if (!cu) {
    out += "note\t" + clean(error) + "\n";
    return;
  }
  int count = 0;
  if (gpu::CUresult rc = cu->DeviceGetCount(&count); rc != gpu::CUDA_SUCCESS || count == 0) {
    out += "note\t" + clean(rc != gpu::CUDA_SUCCESS ? "no CUDA device (" + gpu::cuda_error(*cu, rc) + ")"
                                                    : std::string("no CUDA device")) +
           "\n";
    return;
  }
  int driver = 0;
  cu->DriverGetVersion(&driver);
  for (int i = 0; i < count; ++i) {
    gpu::CUdevice device = 0;
    if (cu->DeviceGet(&device, i) != gpu::CUDA_SUCCESS) continue;
    rpc::GpuInfo g;
    g.backend = "cuda";
    g.index = static_cast<unsigned>(i);
    char name[256] = {};
    cu->DeviceGetName(name, sizeof name - 1, device);
    g.name = name;
    g.vendor = "NVIDIA";
    auto attribute = [&](int which) {
      int value = 0;
      cu->DeviceGetAttribute(&value, which, device);
      return value;
    };
    g.version = "sm_" + std::to_string(attribute(gpu::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)) +
                std::to_string(attribute(gpu::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR));
    g.driver = "CUDA " + std::to_string(driver / 1000) + "." + std::to_string(driver % 1000 / 10);
    std::size_t memory = 0;
    cu->DeviceTotalMem(&memory, device);
    g.memory_bytes = memory;
    g.compute_units = static_cast<unsigned>(attribute(gpu::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT));
    g.max_threads_per_group = static_cast<unsigned>(attribute(gpu::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK));
    int optin = attribute(gpu::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN);
    g.max_shared_bytes = static_cast<std::uint64_t>(
        optin > 0 ? optin : attribute(gpu::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK));
    g.l2_bytes = static_cast<std::uint64_t>(attribute(gpu::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE));
    out += encode(g);
  }
}

}  // namespace

void parse_gpu_probe(const std::string& text, rpc::DeviceInfo& info) {
  for (const std::string& line : split(text, '\n')) {
    auto fields = split(line, '\t');
    if (fields.size() == 2 && fields[0] == "note") {
      info.gpu_notes.push_back(fields[1]);
    } else if (fields.size() == 12 && fields[0] == "gpu") {
      rpc::GpuInfo g;
      g.backend = fields[1];
      g.index = static_cast<unsigned>(number(fields[2]));
      g.name = fields[3];
      g.vendor = fields[4];
      g.version = fields[5];
      g.driver = fields[6];
      g.memory_bytes = number(fields[7]);
      g.compute_units = static_cast<unsigned>(number(fields[8]));
      g.max_threads_per_group = static_cast<unsigned>(number(fields[9]));
      g.max_shared_bytes = number(fields[10]);
      g.l2_bytes = number(fields[11]);
      info.gpus.push_back(std::move(g));
    }
  }
}

void detect_gpus(rpc::DeviceInfo& info, std::chrono::milliseconds timeout) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    info.gpu_notes.push_back(std::string("GPU probe not run: pipe failed: ") + std::strerror(errno));
    return;
  }
  pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    info.gpu_notes.push_back(std::string("GPU probe not run: fork failed: ") + std::strerror(errno));
    return;
  }
  if (pid == 0) {
    ::close(fds[0]);
    std::string out;
    probe_cuda(out);
    probe_opencl(out);
    const char* p = out.data();
    std::size_t left = out.size();
    while (left > 0) {
      ssize_t n = ::write(fds[1], p, left);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      p += n;
      left -= static_cast<std::size_t>(n);
    }
    std::_Exit(0);
  }
  ::close(fds[1]);
  std::string text;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  bool timed_out = false;
  char buffer[4096];
  while (true) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      break;
    }
    pollfd pfd{fds[0], POLLIN, 0};
    int ready = ::poll(&pfd, 1, static_cast<int>(left.count()));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) {
      timed_out = ready == 0;
      break;
    }
    ssize_t n = ::read(fds[0], buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    text.append(buffer, static_cast<std::size_t>(n));
  }
  ::close(fds[0]);
  if (timed_out) ::kill(pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  parse_gpu_probe(text, info);
  if (timed_out) {
    info.gpu_notes.push_back("GPU probe did not finish within " + std::to_string(timeout.count()) + " ms");
  } else if (WIFSIGNALED(status)) {
    info.gpu_notes.push_back("GPU probe crashed (signal " + std::to_string(WTERMSIG(status)) +
                             ") while loading the CUDA or OpenCL driver");
  }
}

}  // namespace kestrel::device
