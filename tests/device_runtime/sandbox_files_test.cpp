// What the measurement worker's file rules (Landlock, device_runtime/src/sandbox.cpp) let
// a kernel open: a CPU batch's worker only reads libraries, /proc and /sys; a GPU batch's
// worker also reaches drivers, device files, the temporary folder and the driver caches;
// neither reaches a file elsewhere, such as the device's token file (docs/security.md).
// Each case confines a forked child and reports what it could open through a pipe.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <string>

#include "sandbox.h"

using namespace kestrel::device;

namespace {

// A folder outside every path the rules open (not below /tmp, $HOME/.cache, /dev, ...):
// the kind of place a token file lives. Empty when none can be made here.
std::string secret_folder() {
  const std::string tag = "kestrel-sandbox-files-" + std::to_string(::getpid());
  std::string home = std::getenv("HOME") ? std::getenv("HOME") : "";
  for (const std::string& base : {std::string("/run"), std::string("/var/lib"), home}) {
    if (base.empty() || base.rfind("/tmp", 0) == 0 || base.rfind("/usr", 0) == 0) continue;
    std::string dir = base + "/" + tag;
    if (::mkdir(dir.c_str(), 0700) == 0) return dir;
  }
  return {};
}

struct Reach {
  bool secret = false;        // read the file in the secret folder
  bool library = false;       // read /etc/ld.so.cache
  bool proc = false;          // read /proc/self/status
  bool dev_null = false;      // open /dev/null for writing
  bool temp_write = false;    // create a file in the temporary folder
  std::string confinement;    // what the sandbox reported
};

Reach reach_under(sandbox::Kind kind, const std::string& secret, const std::string& temp_file) {
  int report[2];
  REQUIRE(::pipe(report) == 0);
  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::close(report[0]);
    int fds[] = {report[1]};
    sandbox::Outcome outcome = sandbox::enter(sandbox::Plan{kind, 0, 0}, fds);
    auto opens = [](const std::string& path, int flags) {
      int fd = ::open(path.c_str(), flags | O_CLOEXEC, 0600);
      if (fd >= 0) ::close(fd);
      return fd >= 0;
    };
    std::string line;
    line += opens(secret, O_RDONLY) ? '1' : '0';
    line += opens("/etc/ld.so.cache", O_RDONLY) ? '1' : '0';
    line += opens("/proc/self/status", O_RDONLY) ? '1' : '0';
    line += opens("/dev/null", O_WRONLY) ? '1' : '0';
    line += opens(temp_file, O_WRONLY | O_CREAT) ? '1' : '0';
    for (const auto& a : outcome.active) line += " " + a + ";";
    for (const auto& d : outcome.degraded) line += " not: " + d + ";";
    (void)!::write(fds[0], line.data(), line.size());
    std::_Exit(0);
  }
  ::close(report[1]);
  std::string line;
  char buffer[4096];
  ssize_t n;
  while ((n = ::read(report[0], buffer, sizeof buffer)) > 0) line.append(buffer, static_cast<std::size_t>(n));
  ::close(report[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  REQUIRE(line.size() >= 5);
  return Reach{line[0] == '1', line[1] == '1', line[2] == '1', line[3] == '1', line[4] == '1', line.substr(5)};
}

}  // namespace

TEST_CASE("a worker's file rules keep the token file closed to CPU and GPU batches and let GPU drivers work",
          "[device][sandbox]") {
  const std::string dir = secret_folder();
  if (dir.empty()) {
    WARN("no folder outside the worker's allowed paths could be made here: nothing to check");
    return;
  }
  const std::string secret = dir + "/token";
  { std::ofstream(secret) << "not-for-kernels\n"; }
  const char* tmp = std::getenv("TMPDIR");
  const std::string temp_file = std::string(tmp && *tmp == '/' ? tmp : "/tmp") + "/kestrel-sandbox-files-" +
                                std::to_string(::getpid());

  Reach cpu = reach_under(sandbox::Kind::cpu, secret, temp_file);
  Reach gpu = reach_under(sandbox::Kind::gpu, secret, temp_file);
  ::unlink(temp_file.c_str());
  ::unlink(secret.c_str());
  ::rmdir(dir.c_str());
  INFO("cpu:" << cpu.confinement);
  INFO("gpu:" << gpu.confinement);
  if (cpu.confinement.find("Landlock") == std::string::npos) {
    WARN("no Landlock on this system: the file rules are not applied (" << cpu.confinement << ")");
    return;
  }
  CHECK_FALSE(cpu.secret);
  CHECK(cpu.library);
  CHECK(cpu.proc);
  CHECK_FALSE(cpu.temp_write);

  CHECK_FALSE(gpu.secret);
  CHECK(gpu.library);
  CHECK(gpu.proc);
  CHECK(gpu.dev_null);
  CHECK(gpu.temp_write);
}
