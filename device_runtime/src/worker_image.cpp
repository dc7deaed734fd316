// The exec'd measurement worker (see worker_image.h): the child's side before the exec,
// and the worker mode's side after it.
#include "worker_image.h"

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <optional>

#include "kestrel/base/log.h"
#include "sandbox.h"
#include "worker.h"

extern char** environ;

namespace kestrel::device {
namespace {

constexpr char kMagic[8] = {'K', 'W', 'O', 'R', 'K', 'E', 'R', '1'};

// What precedes the batch in the spec fd; then `candidates` module fds (i32, -1 for none
// and for candidates before `first`), then `wire_bytes` of encode_batch.
struct SpecHeader {
  char magic[8];
  std::uint64_t first;
  std::int32_t reference_fd;
  std::uint32_t candidates;
  std::uint64_t wire_bytes;
};

// Variables the loader and GPU drivers read; never a secret. Everything else stays behind.
// PATH: PoCL's compiler driver looks the linker up in it (`ld`), and finds none without.
constexpr const char* kKeptVariables[] = {"PATH", "LD_LIBRARY_PATH", "CUDA_VISIBLE_DEVICES", "CUDA_CACHE_PATH",
                                          "OCL_ICD_VENDORS", "OCL_ICD_FILENAMES", "POCL_DEVICES",
                                          "POCL_CACHE_DIR", "XDG_CACHE_HOME", "HOME", "TMPDIR",
                                          "KESTREL_OPENCL_CACHE"};

std::optional<worker::Image>& registered() {
  static std::optional<worker::Image> image;
  return image;
}

std::string& unregistered_reason() {
  static std::string reason = "this program registered no worker image";
  return reason;
}

bool write_all(int fd, const void* data, std::size_t size) {
  const auto* p = static_cast<const std::uint8_t*>(data);
  while (size > 0) {
    ssize_t n = ::write(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    size -= static_cast<std::size_t>(n);
  }
  return true;
}

bool read_exact(int fd, void* data, std::size_t size, off_t at) {
  auto* p = static_cast<std::uint8_t*>(data);
  while (size > 0) {
    ssize_t n = ::pread(fd, p, size, at);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    at += n;
    size -= static_cast<std::size_t>(n);
  }
  return true;
}

// The worker mode could not read its batch: the parent fails the batch with this.
[[noreturn]] void refuse(int result_fd, const std::string& message) {
  worker::RecordHeader header{static_cast<std::uint32_t>(worker::Record::fatal), 0,
                              static_cast<std::uint32_t>(4 + message.size())};
  const auto code = static_cast<std::uint32_t>(Status::runtime_error);
  (void)(write_all(result_fd, &header, sizeof header) && write_all(result_fd, &code, 4) &&
         write_all(result_fd, message.data(), message.size()));
  std::_Exit(1);
}

int parse_fd(const char* text) {
  char* end = nullptr;
  errno = 0;
  long v = std::strtol(text, &end, 10);
  return errno == 0 && end != text && *end == 0 && v >= 3 && v < 65536 ? static_cast<int>(v) : -1;
}

}  // namespace

std::string own_executable() {
  char path[4096];
  ssize_t n = ::readlink("/proc/self/exe", path, sizeof path - 1);
  if (n <= 0) return {};
  return std::string(path, static_cast<std::size_t>(n));
}

void set_worker_image(const std::string& path) {
  registered().reset();
  const std::string file = path.substr(path.rfind('/') + 1);
  if (path.empty()) {
    unregistered_reason() = "this program registered no worker image";
    return;
  }
  if (file.rfind("ld-", 0) == 0 || file.rfind("ld.so", 0) == 0) {
    // Started as `ld.so kestrel-device ...`: /proc/self/exe is the loader, which would
    // take --kestrel-worker for one of its own options.
    unregistered_reason() = "the runtime was started through the dynamic loader " + path;
    return;
  }
  worker::Image image{path, {}};
  for (const char* name : kKeptVariables) {
    if (const char* value = std::getenv(name)) image.environment.push_back(std::string(name) + "=" + value);
  }
  registered() = std::move(image);
}

bool is_worker_invocation(int argc, char** argv) { return argc >= 2 && std::strcmp(argv[1], kWorkerFlag) == 0; }

void run_worker_image(int argc, char** argv) {
  // kestrel-device --kestrel-worker <result fd> <spec fd>
  const int result_fd = argc == 4 ? parse_fd(argv[2]) : -1;
  const int spec_fd = argc == 4 ? parse_fd(argv[3]) : -1;
  if (result_fd < 0) {
    static const char text[] = "this mode is for the device runtime's own measurement workers\n";
    (void)!::write(2, text, sizeof text - 1);
    std::_Exit(2);
  }
  if (spec_fd < 0) refuse(result_fd, "worker image: bad spec fd");
  SpecHeader header{};
  if (!read_exact(spec_fd, &header, sizeof header, 0) || std::memcmp(header.magic, kMagic, sizeof kMagic) != 0) {
    refuse(result_fd, "worker image: the batch could not be read");
  }
  struct stat st {};
  const std::uint64_t fd_bytes = static_cast<std::uint64_t>(header.candidates) * sizeof(std::int32_t);
  if (::fstat(spec_fd, &st) != 0 || header.wire_bytes % sizeof(capnp::word) != 0 ||
      sizeof header + fd_bytes + header.wire_bytes != static_cast<std::uint64_t>(st.st_size)) {
    refuse(result_fd, "worker image: the batch has the wrong size");
  }
  BatchSpec spec;
  spec.reference_fd = header.reference_fd;
  std::vector<std::int32_t> module_fds(header.candidates);
  std::vector<capnp::word> words(header.wire_bytes / sizeof(capnp::word));
  if (!read_exact(spec_fd, module_fds.data(), fd_bytes, sizeof header) ||
      !read_exact(spec_fd, words.data(), header.wire_bytes, static_cast<off_t>(sizeof header + fd_bytes))) {
    refuse(result_fd, "worker image: the batch could not be read");
  }
  ::close(spec_fd);
  std::string error;
  try {
    capnp::ReaderOptions options;
    options.traversalLimitInWords = words.size() * 4 + 64;
    capnp::FlatArrayMessageReader reader(kj::ArrayPtr<const capnp::word>(words.data(), words.size()), options);
    if (!rpc::from_wire(reader.getRoot<wire::MeasureBatch>(), spec.request, error)) {
      refuse(result_fd, "worker image: " + error);
    }
  } catch (const kj::Exception& e) {
    refuse(result_fd, std::string("worker image: ") + e.getDescription().cStr());
  }
  if (spec.request.candidates.size() != module_fds.size() || header.first >= module_fds.size()) {
    refuse(result_fd, "worker image: the batch's candidates and module fds disagree");
  }
  spec.module_fds.assign(module_fds.begin(), module_fds.end());
  worker::run(result_fd, spec, static_cast<std::size_t>(header.first));
}

namespace worker {

const Image* image() { return registered() ? &*registered() : nullptr; }

const std::string& no_image_reason() { return unregistered_reason(); }

void check_image() {
  if (!registered()) return;
  const std::string path = registered()->path;
  int report[2];
  if (::pipe2(report, O_CLOEXEC) != 0) return;
  pid_t pid = ::fork();
  if (pid < 0) {
    ::close(report[0]);
    ::close(report[1]);
    return;
  }
  if (pid == 0) {
    // The worker mode without fds says so on stderr and exits 2: /dev/null here.
    int null_fd = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
    if (null_fd >= 0) ::dup2(null_fd, 2);
    char* argv[] = {const_cast<char*>(path.c_str()), const_cast<char*>(kWorkerFlag), nullptr};
    char* envp[] = {nullptr};
    ::execve(path.c_str(), argv, envp);
    const int error = errno;
    (void)!::write(report[1], &error, sizeof error);
    ::_exit(127);
  }
  ::close(report[1]);
  int error = 0;
  ssize_t n;
  while ((n = ::read(report[0], &error, sizeof error)) < 0 && errno == EINTR) {
  }
  ::close(report[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (n == static_cast<ssize_t>(sizeof error)) {
    registered().reset();
    unregistered_reason() = "execve " + path + ": " + std::strerror(error);
  }
}

std::vector<std::uint8_t> encode_batch(const rpc::BatchRequest& request) {
  capnp::MallocMessageBuilder builder;
  rpc::to_wire(request, builder.initRoot<wire::MeasureBatch>());
  kj::Array<capnp::word> words = capnp::messageToFlatArray(builder);
  auto bytes = words.asBytes();
  return {bytes.begin(), bytes.end()};
}

std::string exec_image(const Image& image, int& result_fd, int spec_fd, BatchSpec& spec, std::size_t first,
                       std::span<const std::uint8_t> wire) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // kept across the exec
  // result, spec, reference, then candidate first.. (their numbers after the move).
  std::vector<int> fds = {result_fd, spec_fd, spec.reference_fd};
  for (std::size_t i = first; i < spec.module_fds.size(); ++i) fds.push_back(spec.module_fds[i]);
  sandbox::keep_only(fds);
  result_fd = fds[0];
  spec_fd = fds[1];
  spec.reference_fd = fds[2];
  for (std::size_t i = first; i < spec.module_fds.size(); ++i) spec.module_fds[i] = fds[3 + (i - first)];

  std::vector<std::int32_t> module_fds(spec.module_fds.size(), -1);
  for (std::size_t i = first; i < spec.module_fds.size(); ++i) module_fds[i] = spec.module_fds[i];
  SpecHeader header{};
  std::memcpy(header.magic, kMagic, sizeof kMagic);
  header.first = first;
  header.reference_fd = spec.reference_fd;
  header.candidates = static_cast<std::uint32_t>(module_fds.size());
  header.wire_bytes = wire.size();
  std::string reason;
  if (!write_all(spec_fd, &header, sizeof header) ||
      !write_all(spec_fd, module_fds.data(), module_fds.size() * sizeof(std::int32_t)) ||
      !write_all(spec_fd, wire.data(), wire.size())) {
    reason = std::string("writing the batch: ") + std::strerror(errno);
  } else {
    // Sealed: what the worker reads is what the runtime wrote.
    ::fcntl(spec_fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL);
    const std::string result_arg = std::to_string(result_fd);
    const std::string spec_arg = std::to_string(spec_fd);
    std::vector<char*> argv = {const_cast<char*>(image.path.c_str()), const_cast<char*>(kWorkerFlag),
                               const_cast<char*>(result_arg.c_str()), const_cast<char*>(spec_arg.c_str()), nullptr};
    std::vector<char*> envp;
    for (const auto& variable : image.environment) envp.push_back(const_cast<char*>(variable.c_str()));
    envp.push_back(nullptr);
    ::execve(image.path.c_str(), argv.data(), envp.data());
    reason = "execve " + image.path + ": " + std::strerror(errno);
  }
  ::close(spec_fd);
  return "the worker is a fork of the runtime, its memory and all (" + reason + ")";
}

}  // namespace worker
}  // namespace kestrel::device
