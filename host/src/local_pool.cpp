// In-process tracker plus kestrel-device children on loopback.
#include "kestrel/host/local_pool.h"

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>

#include "kestrel/base/log.h"
#include "kestrel/tracker/tracker.h"

extern char** environ;

namespace kestrel::host {

std::string device_binary_path() {
  if (const char* env = std::getenv("KESTREL_DEVICE_BIN")) return env;
  std::error_code ec;
  auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return "kestrel-device";
  return (self.parent_path() / "kestrel-device").string();
}

struct LocalPool::Impl {
  asio::io_context io;
  std::unique_ptr<tracker::Tracker> tracker;
  std::thread thread;
  std::vector<pid_t> children;
};

LocalPool::LocalPool(unsigned devices, std::string key, std::optional<std::uint16_t> http_port)
    : impl_(std::make_unique<Impl>()), key_(std::move(key)) {
  std::string binary = device_binary_path();
  if (::access(binary.c_str(), X_OK) != 0) {
    throw std::runtime_error("cannot find the device runtime at " + binary +
                             " (build it, or set KESTREL_DEVICE_BIN, or pass --tracker HOST:PORT)");
  }
  tracker::TrackerOptions options;
  options.host = "127.0.0.1";
  options.port = 0;
  if (http_port) {
    tracker::HttpOptions http;
    http.host = "127.0.0.1";
    http.port = *http_port;
    options.http = http;
  }
  impl_->tracker = std::make_unique<tracker::Tracker>(impl_->io, options);
  port_ = impl_->tracker->port();
  impl_->tracker->start();
  impl_->thread = std::thread([this] { impl_->io.run(); });
  std::string tracker = "127.0.0.1:" + std::to_string(port_);
  std::string level = log::level() <= log::Level::debug ? "debug" : "warn";
  for (unsigned i = 0; i < devices; ++i) {
    std::string name = "local-" + std::to_string(::getpid()) + "-" + std::to_string(i);
    std::vector<std::string> args = {binary, "--tracker", tracker, "--key", key_, "--name", name, "--log-level", level,
                                     "--exit-with-parent"};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    // In a process group of its own: a terminal's Ctrl-C goes to the foreground group,
    // which must be `kestrel` alone (it stops after the batch in flight and then stops
    // this child); the device would otherwise die mid-batch with the candidates on it.
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
    posix_spawnattr_setpgroup(&attr, 0);
    pid_t pid = -1;
    int spawned = ::posix_spawn(&pid, binary.c_str(), nullptr, &attr, argv.data(), environ);
    posix_spawnattr_destroy(&attr);
    if (spawned != 0) {
      shutdown();  // the destructor will not run: undo what was started
      throw std::runtime_error("cannot start " + binary);
    }
    impl_->children.push_back(pid);
  }
  log::info("local", "local pool: tracker on ", tracker, ", ", devices, " device(s) under key '", key_, "'");
}

LocalPool::~LocalPool() { shutdown(); }

void LocalPool::shutdown() {
  for (pid_t pid : impl_->children) ::kill(pid, SIGTERM);
  for (pid_t pid : impl_->children) {
    int status = 0;
    for (int i = 0; i < 200; ++i) {  // up to 2 s, then SIGKILL
      if (::waitpid(pid, &status, WNOHANG) == pid) {
        pid = -1;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (pid > 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
    }
  }
  impl_->children.clear();
  if (impl_->thread.joinable()) {
    asio::post(impl_->io, [this] { impl_->tracker->stop(); });
    impl_->thread.join();
  }
}

}  // namespace kestrel::host
