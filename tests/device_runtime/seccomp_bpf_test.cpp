// Kestrel's seccomp filter builder (device_runtime/src/seccomp_bpf.cpp) and the worker's
// rules built with it (sandbox::syscall_filter): each case loads a filter into a forked
// child, which makes the system calls and reports their errno through a pipe, so the
// kernel itself judges the program. The architecture check is read off the program, and
// on x86_64 also run (an x32 call and a 32-bit int 0x80 call kill the child).
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <linux/audit.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <thread>

#include "sandbox.h"
#include "seccomp_bpf.h"

using namespace kestrel::device;

namespace {

// What a child reported (call name -> 0 or its errno) and how it ended.
struct Child {
  std::map<std::string, int> calls;
  int status = 0;
  bool loaded() const { return calls.count("loaded") && calls.at("loaded") == 0; }
};

// Each call's result as one line "name errno" (0: it succeeded).
class Report {
 public:
  void add(const std::string& name, long rc) { text_ += name + " " + std::to_string(rc < 0 ? errno : 0) + "\n"; }
  const std::string& text() const { return text_; }

 private:
  std::string text_;
};

// Forks; the child sets no_new_privs, loads what `make` builds (given its own pid and the
// test's; nothing when it gives nullopt), runs `body` and writes its report. `make` runs
// in the child because the signal rules name the child's pid.
template <typename Make, typename Body>
Child filtered(Make make, Body body) {
  int pipe_fds[2];
  REQUIRE(::pipe(pipe_fds) == 0);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::close(pipe_fds[0]);
    Report report;
    std::optional<seccomp::Filter> filter = make(::getpid(), parent);
    std::string failed;
    if (filter) failed = ::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 ? filter->load() : "no_new_privs";
    errno = EINVAL;
    report.add("loaded", filter && failed.empty() ? 0 : -1);
    if (failed.empty()) body(report);
    (void)!::write(pipe_fds[1], report.text().data(), report.text().size());
    std::_Exit(0);
  }
  ::close(pipe_fds[1]);
  std::string text;
  char buffer[4096];
  for (ssize_t n; (n = ::read(pipe_fds[0], buffer, sizeof buffer)) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    text.append(buffer, static_cast<std::size_t>(n));
  }
  ::close(pipe_fds[0]);
  Child child;
  while (::waitpid(pid, &child.status, 0) < 0 && errno == EINTR) {
  }
  std::istringstream lines(text);
  std::string name;
  int error = 0;
  while (lines >> name >> error) child.calls[name] = error;
  return child;
}

std::optional<seccomp::Filter> worker_filter(sandbox::Kind kind, pid_t self, pid_t parent) {
  return sandbox::syscall_filter(kind, self, parent);
}

// A raw clone without CLONE_THREAD (fork's flags); a copy that gets through exits at once.
long raw_fork() {
  const long rc = ::syscall(SYS_clone, SIGCHLD, 0, 0, 0, 0);
  if (rc == 0) std::_Exit(0);
  if (rc > 0) ::waitpid(static_cast<pid_t>(rc), nullptr, 0);
  return rc;
}

long open_close(const char* path, int flags) {
  const int fd = ::open(path, flags | O_CLOEXEC, 0600);
  if (fd >= 0) ::close(fd);
  return fd;
}

long socket_close(int family) {
  const int fd = ::socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd >= 0) ::close(fd);
  return fd;
}

// A file for the open rules, beside the test binary's temporary folder.
std::string scratch_file() {
  const char* tmp = std::getenv("TMPDIR");
  std::string path = std::string(tmp && *tmp ? tmp : "/tmp") + "/kestrel-seccomp-" + std::to_string(::getpid());
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd >= 0) ::close(fd);
  return path;
}

}  // namespace

TEST_CASE("the filter starts with the architecture check, kills on a foreign architecture and ends in allow",
          "[sandbox][seccomp]") {
  if (!seccomp::supported()) {
    WARN("no seccomp filter for this architecture");
    return;
  }
  seccomp::Filter filter;
  REQUIRE(filter.add(SYS_getppid, seccomp::fail_with(EPERM)));
  const auto program = filter.program();
  REQUIRE(program.size() >= 6);
  CHECK(program[0].code == (BPF_LD | BPF_W | BPF_ABS));
  CHECK(program[0].k == offsetof(seccomp_data, arch));
  CHECK(program[1].code == (BPF_JMP | BPF_JEQ | BPF_K));
  CHECK(program[1].k == seccomp::audit_arch());
  CHECK(program[1].jt == 1);
  CHECK(program[1].jf == 0);
  CHECK(program[2].code == (BPF_RET | BPF_K));
  CHECK((program[2].k & SECCOMP_RET_ACTION_FULL) == SECCOMP_RET_KILL_PROCESS);
  CHECK(program[3].k == offsetof(seccomp_data, nr));
#if defined(__x86_64__)
  CHECK(seccomp::audit_arch() == AUDIT_ARCH_X86_64);
  CHECK(program[4].code == (BPF_JMP | BPF_JGE | BPF_K));
  CHECK(program[4].k == __X32_SYSCALL_BIT);
  CHECK((program[6].k & SECCOMP_RET_ACTION_FULL) == SECCOMP_RET_KILL_PROCESS);
#elif defined(__aarch64__)
  CHECK(seccomp::audit_arch() == AUDIT_ARCH_AARCH64);
#elif defined(__arm__)
  CHECK(seccomp::audit_arch() == AUDIT_ARCH_ARM);
#elif defined(__riscv)
  CHECK(seccomp::audit_arch() == AUDIT_ARCH_RISCV64);
#endif
  CHECK(program.back().code == (BPF_RET | BPF_K));
  CHECK(program.back().k == SECCOMP_RET_ALLOW);
  // The worker's filters check the architecture the same way.
  for (auto kind : {sandbox::Kind::cpu, sandbox::Kind::gpu}) {
    auto worker = sandbox::syscall_filter(kind, 100, 1);
    REQUIRE(worker);
    auto code = worker->program();
    REQUIRE(code.size() > 3);
    CHECK(code[0].k == offsetof(seccomp_data, arch));
    CHECK(code[1].k == seccomp::audit_arch());
    CHECK(code.back().k == SECCOMP_RET_ALLOW);
  }
}

#if defined(__x86_64__)
TEST_CASE("on x86_64 an x32 call and a 32-bit (int 0x80) call kill the process", "[sandbox][seccomp]") {
  auto getppid_only = [](pid_t, pid_t) {
    seccomp::Filter f;
    f.add(SYS_getppid, seccomp::fail_with(EPERM));
    return std::optional<seccomp::Filter>(f);
  };
  Child x32 = filtered(getppid_only, [](Report& r) { r.add("x32_getpid", ::syscall(SYS_getpid | __X32_SYSCALL_BIT)); });
  CHECK(WIFSIGNALED(x32.status));
  CHECK(WTERMSIG(x32.status) == SIGSYS);
  CHECK(x32.calls.count("x32_getpid") == 0);

  // i386's getpid (20) through the 32-bit entry: seccomp_data.arch is AUDIT_ARCH_I386.
  auto int80 = [](Report& r) {
    long rc = 20;
    asm volatile("int $0x80" : "+a"(rc) : : "memory");
    errno = rc < 0 ? static_cast<int>(-rc) : 0;
    r.add("int80_getpid", rc == ::getpid() ? 0 : -1);
  };
  Child unfiltered = filtered([](pid_t, pid_t) { return std::optional<seccomp::Filter>(); }, int80);
  // A kernel without IA32 emulation faults on int 0x80 whatever the filter.
  if (!WIFEXITED(unfiltered.status) || unfiltered.calls["int80_getpid"] != 0) {
    WARN("no 32-bit system calls on this kernel: the foreign-architecture kill is checked on the program only");
    return;
  }
  Child i386 = filtered(getppid_only, int80);
  CHECK(WIFSIGNALED(i386.status));
  CHECK(WTERMSIG(i386.status) == SIGSYS);
}
#endif

TEST_CASE("a rule list far longer than a jump's reach still reaches its last rule, and comparisons cover both halves",
          "[sandbox][seccomp]") {
  if (!seccomp::supported()) {
    WARN("no seccomp filter for this architecture");
    return;
  }
  auto make = [](pid_t self, pid_t) {
    seccomp::Filter f;
    // 800 blocks of 3-5 instructions for numbers no call has, then the rules under test.
    for (long nr = 0; nr < 400; ++nr) {
      f.add(100000 + nr, seccomp::fail_with(EPERM), {seccomp::masked_equal(1, 0xffff, static_cast<std::uint64_t>(nr))});
      f.add(200000 + nr, seccomp::fail_with(EPERM));
    }
    f.add(SYS_getppid, seccomp::fail_with(EPERM));
    f.add(SYS_kill, seccomp::fail_with(EPERM), {seccomp::not_equal(0, static_cast<std::uint64_t>(self))});
    f.add(SYS_fcntl, seccomp::fail_with(EBADE), {seccomp::masked_equal(1, 0xf0, 0x30)});
    return std::optional<seccomp::Filter>(f);
  };
  const auto program = make(1, 1)->program();
  CHECK(program.size() > 3000);
  CHECK(program.size() <= BPF_MAXINSNS);
  // Every jump lands inside the program.
  for (std::size_t at = 0; at < program.size(); ++at) {
    if (BPF_CLASS(program[at].code) == BPF_JMP) {
      INFO(at);
      CHECK(at + 1 + program[at].jt < program.size());
      CHECK(at + 1 + program[at].jf < program.size());
    }
  }
  Child child = filtered(make, [](Report& r) {
    r.add("getppid", ::syscall(SYS_getppid));
    r.add("getpid", ::syscall(SYS_getpid));
    r.add("kill_self", ::kill(::getpid(), 0));
    r.add("kill_parent", ::kill(::getppid(), 0));
    // The kernel reads a pid_t (the low half); the filter, as libseccomp's, compares all 64 bits.
    const std::uint64_t high = sizeof(long) == 8 ? std::uint64_t{1} << 32 : 0;
    r.add("kill_self_high", ::syscall(SYS_kill, static_cast<long>(static_cast<std::uint64_t>(::getpid()) | high), 0));
    r.add("fcntl_masked_match", ::syscall(SYS_fcntl, 0, 0x3f, 0));
    r.add("fcntl_masked_miss", ::syscall(SYS_fcntl, 0, F_GETFD, 0));
  });
  REQUIRE(child.loaded());
  CHECK(WIFEXITED(child.status));
  CHECK(child.calls["getppid"] == EPERM);
  CHECK(child.calls["getpid"] == 0);
  CHECK(child.calls["kill_self"] == 0);
  CHECK(child.calls["kill_parent"] == EPERM);
  CHECK(child.calls["kill_self_high"] == (sizeof(long) == 8 ? EPERM : 0));
  CHECK(child.calls["fcntl_masked_match"] == EBADE);
  CHECK(child.calls["fcntl_masked_miss"] == 0);
}

TEST_CASE("the builder refuses a comparison that can never hold as written, or more than six in a rule",
          "[sandbox][seccomp]") {
  seccomp::Filter f;
  CHECK_FALSE(f.add(SYS_kill, seccomp::fail_with(EPERM), {seccomp::not_equal(6, 1)}));
  CHECK_FALSE(f.add(SYS_kill, seccomp::fail_with(EPERM), {seccomp::masked_equal(0, 0xff, 0x100)}));
  const auto one = seccomp::not_equal(0, 1);
  CHECK_FALSE(f.add(SYS_kill, seccomp::fail_with(EPERM), {one, one, one, one, one, one, one}));
  CHECK(f.add(SYS_kill, seccomp::fail_with(EPERM), {one, one, one, one, one, one}));
  f = seccomp::Filter{};
  CHECK(f.add(-1, seccomp::fail_with(EPERM)));  // a call this architecture lacks: nothing to add
  CHECK(f.rules() == 0);
}

TEST_CASE("the CPU worker's filter: threads but no processes, no sockets, opens read-only, signals to itself, "
          "clone3 and openat2 ENOSYS",
          "[sandbox][seccomp]") {
  if (!seccomp::supported()) {
    WARN("no seccomp filter for this architecture");
    return;
  }
  const std::string file = scratch_file();
  Child child = filtered([](pid_t self, pid_t parent) { return worker_filter(sandbox::Kind::cpu, self, parent); },
                         [&](Report& r) {
                           r.add("clone_process", raw_fork());
                           r.add("fork", raw_fork());
                           std::atomic<bool> ran{false};
                           std::thread([&] { ran = true; }).join();
                           errno = ECHILD;
                           r.add("thread", ran ? 0 : -1);
                           r.add("socket_inet", socket_close(AF_INET));
                           r.add("socket_unix", socket_close(AF_UNIX));
                           r.add("open_read", open_close("/proc/self/status", O_RDONLY));
                           r.add("open_create", open_close((file + ".new").c_str(), O_RDONLY | O_CREAT));
                           r.add("open_write", open_close(file.c_str(), O_WRONLY));
                           r.add("open_rdwr", open_close(file.c_str(), O_RDWR));
                           r.add("open_trunc", open_close(file.c_str(), O_RDONLY | O_TRUNC));
                           r.add("open_append", open_close(file.c_str(), O_WRONLY | O_APPEND));
#ifdef SYS_open
                           r.add("sys_open_create", ::syscall(SYS_open, (file + ".new").c_str(), O_RDONLY | O_CREAT, 0600));
#endif
                           r.add("kill_self", ::kill(::getpid(), 0));
                           r.add("kill_parent", ::kill(::getppid(), 0));
                           r.add("kill_all", ::kill(-1, 0));
                           r.add("tgkill_self", ::syscall(SYS_tgkill, ::getpid(), ::gettid(), 0));
#ifdef SYS_clone3
                           r.add("clone3", ::syscall(SYS_clone3, nullptr, 0));
#endif
#ifdef SYS_openat2
                           r.add("openat2", ::syscall(SYS_openat2, AT_FDCWD, "/proc/self/status", nullptr, 0));
#endif
                           r.add("ptrace", ::syscall(SYS_ptrace, 0 /* PTRACE_TRACEME */, 0, 0, 0));
                           r.add("unshare", ::unshare(CLONE_NEWNET));
                           r.add("execve", ::syscall(SYS_execve, "/bin/true", nullptr, nullptr));
                           r.add("unlink", ::unlinkat(AT_FDCWD, file.c_str(), 0));
                         });
  std::remove(file.c_str());
  std::remove((file + ".new").c_str());
  REQUIRE(child.loaded());
  CHECK(WIFEXITED(child.status));
  CHECK(child.calls["clone_process"] == EPERM);
  CHECK(child.calls["fork"] == EPERM);
  CHECK(child.calls["thread"] == 0);
  CHECK(child.calls["socket_inet"] == EPERM);
  CHECK(child.calls["socket_unix"] == EPERM);
  CHECK(child.calls["open_read"] == 0);
  CHECK(child.calls["open_create"] == EACCES);
  CHECK(child.calls["open_write"] == EACCES);
  CHECK(child.calls["open_rdwr"] == EACCES);
  CHECK(child.calls["open_trunc"] == EACCES);
  CHECK(child.calls["open_append"] == EACCES);
#ifdef SYS_open
  CHECK(child.calls["sys_open_create"] == EACCES);
#endif
  CHECK(child.calls["kill_self"] == 0);
  CHECK(child.calls["kill_parent"] == EPERM);
  CHECK(child.calls["kill_all"] == EPERM);
  CHECK(child.calls["tgkill_self"] == 0);
#ifdef SYS_clone3
  CHECK(child.calls["clone3"] == ENOSYS);
#endif
#ifdef SYS_openat2
  CHECK(child.calls["openat2"] == ENOSYS);
#endif
  CHECK(child.calls["ptrace"] == EPERM);
  CHECK(child.calls["unshare"] == EPERM);
  CHECK(child.calls["execve"] == EPERM);
  CHECK(child.calls["unlink"] == EPERM);
}

TEST_CASE("the GPU worker's filter: local sockets but no network ones, processes and files, no signals to the "
          "runtime, a group or everyone",
          "[sandbox][seccomp]") {
  if (!seccomp::supported()) {
    WARN("no seccomp filter for this architecture");
    return;
  }
  const std::string file = scratch_file();
  Child child = filtered([](pid_t self, pid_t parent) { return worker_filter(sandbox::Kind::gpu, self, parent); },
                         [&](Report& r) {
                           r.add("socket_inet", socket_close(AF_INET));
                           r.add("socket_inet6", socket_close(AF_INET6));
                           r.add("socket_netlink", ::socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, 0));
                           r.add("socket_unix", socket_close(AF_UNIX));
                           r.add("fork", raw_fork());
                           r.add("open_write", open_close(file.c_str(), O_WRONLY | O_TRUNC));
                           r.add("kill_self", ::kill(::getpid(), 0));
                           r.add("kill_parent", ::kill(::getppid(), 0));
                           r.add("kill_group", ::kill(0, 0));
                           r.add("kill_all", ::kill(-1, 0));
                           r.add("tgkill_parent", ::syscall(SYS_tgkill, ::getppid(), ::getppid(), 0));
                           r.add("ptrace", ::syscall(SYS_ptrace, 0 /* PTRACE_TRACEME */, 0, 0, 0));
                         });
  std::remove(file.c_str());
  REQUIRE(child.loaded());
  CHECK(WIFEXITED(child.status));
  CHECK(child.calls["socket_inet"] == EPERM);
  CHECK(child.calls["socket_inet6"] == EPERM);
  CHECK(child.calls["socket_netlink"] == EPERM);
  CHECK(child.calls["socket_unix"] == 0);
  CHECK(child.calls["fork"] == 0);
  CHECK(child.calls["open_write"] == 0);
  CHECK(child.calls["kill_self"] == 0);
  CHECK(child.calls["kill_parent"] == EPERM);
  CHECK(child.calls["kill_group"] == EPERM);
  CHECK(child.calls["kill_all"] == EPERM);
  CHECK(child.calls["tgkill_parent"] == EPERM);
  CHECK(child.calls["ptrace"] == EPERM);
}
