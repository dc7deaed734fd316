// Test support: start the real kestrel binaries as child processes, with their
// output captured to a log file.
#pragma once

#include <catch2/catch.hpp>

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fcntl.h>

#include <chrono>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <iterator>
#include <vector>

extern char** environ;

namespace kestrel::test {

inline std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

// A file's bytes, and a file made of `bytes` (a program or weights file flipped or cut).
inline std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}
inline void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

// How many times `what` occurs in `text` (e.g. a line in a process's log).
inline std::size_t count_of(const std::string& text, const std::string& what) {
  std::size_t count = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++count;
  return count;
}

// A unique scratch directory for one test, removed when done.
class TempDir {
 public:
  TempDir() {
    char pattern[] = "/tmp/kestrel-test-XXXXXX";
    path_ = ::mkdtemp(pattern);
  }
  ~TempDir() { std::system(("rm -rf '" + path_ + "'").c_str()); }
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

class Process {
 public:
  // Starts argv[0] with stdout and stderr appended to `log_path`; with `new_group`, in a
  // process group of its own (as a shell starts a foreground job; see signal_group).
  Process(std::vector<std::string> argv, std::string log_path, bool new_group = false)
      : log_path_(std::move(log_path)) {
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, log_path_.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
    std::vector<char*> args;
    for (auto& a : argv) args.push_back(a.data());
    args.push_back(nullptr);
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    if (new_group) {
      posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
      posix_spawnattr_setpgroup(&attr, 0);
    }
    int rc = ::posix_spawn(&pid_, args[0], &actions, &attr, args.data(), environ);
    posix_spawnattr_destroy(&attr);
    posix_spawn_file_actions_destroy(&actions);
    REQUIRE(rc == 0);
  }
  ~Process() {
    if (running()) {
      ::kill(pid_, SIGKILL);
      wait_exit(std::chrono::seconds(5));
    }
  }
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  pid_t pid() const { return pid_; }
  void signal(int sig) const { ::kill(pid_, sig); }
  // Signals the whole process group, as a terminal's Ctrl-C does (needs new_group).
  void signal_group(int sig) const { ::kill(-pid_, sig); }
  bool running() {
    if (status_) return false;
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      status_ = decode(status);
      return false;
    }
    return true;
  }
  // Exit code (128 + signal when killed), or nullopt if still running after `timeout`.
  std::optional<int> wait_exit(std::chrono::milliseconds timeout) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (running()) {
      if (std::chrono::steady_clock::now() > deadline) return std::nullopt;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return status_;
  }
  std::string log() const { return read_text(log_path_); }

 private:
  static int decode(int status) { return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status); }
  pid_t pid_ = -1;
  std::string log_path_;
  std::optional<int> status_;
};

// Runs a command to completion and returns its exit code; output goes to `output`.
inline int run_command(std::vector<std::string> argv, std::string& output, const std::string& scratch_file) {
  std::remove(scratch_file.c_str());
  Process p(std::move(argv), scratch_file);
  auto code = p.wait_exit(std::chrono::seconds(30));
  REQUIRE(code);
  output = p.log();
  return *code;
}

// Polls `condition` until it holds or `limit` passes.
template <typename Condition>
bool wait_for(Condition condition, std::chrono::milliseconds limit = std::chrono::seconds(10)) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  while (!condition()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

}  // namespace kestrel::test
