// The worker's confinement (see sandbox.h).
#include "sandbox.h"

#include "sandbox_syscalls.h"

#include <fcntl.h>
#include <grp.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <string>
#include <vector>

#if __has_include(<linux/landlock.h>)
#include <linux/landlock.h>
#endif

namespace kestrel::device::sandbox {
namespace {

constexpr uid_t kNobody = 65534;

std::string why(const char* call) { return std::string(call) + ": " + std::strerror(errno); }

}  // namespace

// Moves the kept fds to 3, 4, ... and closes every other one above 2.
void keep_only(std::span<int> fds) {
  std::vector<int> unique;
  for (int fd : fds) {
    if (fd >= 0 && std::find(unique.begin(), unique.end(), fd) == unique.end()) unique.push_back(fd);
  }
  const int top = unique.empty() ? 3 : std::max(3, *std::max_element(unique.begin(), unique.end()) + 1);
  // First above every kept fd, then down to 3.. (so no move overwrites one still to move).
  std::map<int, int> moved;
  for (int fd : unique) moved[fd] = ::fcntl(fd, F_DUPFD, top);
  int next = 3;
  std::map<int, int> final_fd;
  for (int fd : unique) {
    ::dup2(moved[fd], next);
    final_fd[fd] = next++;
  }
  for (int& fd : fds) {
    if (fd >= 0) fd = final_fd[fd];
  }
  if (::close_range(static_cast<unsigned>(next), ~0u, 0) != 0) {
    rlimit limit{};
    ::getrlimit(RLIMIT_NOFILE, &limit);
    const long last = limit.rlim_cur == RLIM_INFINITY ? 65536 : static_cast<long>(limit.rlim_cur);
    for (long fd = next; fd < last; ++fd) ::close(static_cast<int>(fd));
  }
}

namespace {

void null_std_streams(Kind kind) {
  int null_fd = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  if (null_fd < 0) return;
  ::dup2(null_fd, 0);
  ::dup2(null_fd, 1);
  // GPU drivers say why they fail on stderr; a CPU kernel has nothing to say there.
  if (kind == Kind::cpu) ::dup2(null_fd, 2);
  if (null_fd > 2) ::close(null_fd);
}

void set_limit(int resource, rlim_t soft, rlim_t hard, const char* name, Outcome& out) {
  rlimit limit{soft, hard};
  rlimit current{};
  if (::getrlimit(resource, &current) == 0 && current.rlim_max != RLIM_INFINITY) {
    limit.rlim_max = std::min(limit.rlim_max, current.rlim_max);
    limit.rlim_cur = std::min(limit.rlim_cur, limit.rlim_max);
  }
  if (::setrlimit(resource, &limit) != 0) out.degraded.push_back(std::string(name) + " not set: " + why("setrlimit"));
}

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || __has_feature(memory_sanitizer)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif
#else
constexpr bool kSanitized = false;
#endif

void limits(const Plan& plan, int open_fds, Outcome& out) {
  set_limit(RLIMIT_CORE, 0, 0, "RLIMIT_CORE", out);
  if (plan.cpu_seconds > 0) set_limit(RLIMIT_CPU, plan.cpu_seconds, plan.cpu_seconds + 5, "RLIMIT_CPU", out);
  // GPU drivers open device files, ICDs and caches.
  const rlim_t files = plan.kind == Kind::cpu ? static_cast<rlim_t>(open_fds + 32) : 1024;
  set_limit(RLIMIT_NOFILE, files, files, "RLIMIT_NOFILE", out);
  if (plan.kind == Kind::cpu) set_limit(RLIMIT_FSIZE, 0, 0, "RLIMIT_FSIZE", out);
  if (plan.address_space_bytes > 0) {
    if (kSanitized) {
      out.degraded.push_back("no address-space limit: a sanitizer build reserves terabytes of address space");
    } else {
      set_limit(RLIMIT_AS, plan.address_space_bytes, plan.address_space_bytes, "RLIMIT_AS", out);
    }
  }
  out.active.push_back("rlimits");
}

void no_new_privileges(Outcome& out) {
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0) {
    out.active.push_back("no_new_privs");
  } else {
    out.degraded.push_back("no_new_privs not set: " + why("prctl"));
  }
}

// A private, empty network namespace; as root, then the user nobody.
void namespaces_and_user(Kind kind, Outcome& out) {
  const bool root = ::geteuid() == 0;
  if (root) {
    if (::unshare(CLONE_NEWNET) == 0) {
      out.active.push_back("network namespace");
    } else {
      out.degraded.push_back("no network namespace: " + why("unshare(CLONE_NEWNET)"));
    }
    if (kind == Kind::gpu) return;  // drivers need the user's device files and caches
    bool dropped = ::setgroups(0, nullptr) == 0 && ::setresgid(kNobody, kNobody, kNobody) == 0 &&
                   ::setresuid(kNobody, kNobody, kNobody) == 0;
    if (dropped) {
      // A changed uid makes the process undumpable, and /proc/self/fd (dlopen's path to a
      // module) root's; the worker's own files stay its own.
      ::prctl(PR_SET_DUMPABLE, 1, 0, 0, 0);
      out.active.push_back("uid nobody");
    } else {
      out.degraded.push_back("still root: " + why("setresuid(nobody)"));
    }
    return;
  }
  if (kind == Kind::gpu) {
    out.degraded.push_back("no network namespace for GPU batches when not root (the seccomp filter refuses sockets)");
    return;
  }
  if (::unshare(CLONE_NEWUSER | CLONE_NEWNET) == 0) {
    out.active.push_back("user and network namespace");
  } else {
    out.degraded.push_back("no user or network namespace (unprivileged user namespaces off?): " +
                           why("unshare(CLONE_NEWUSER|CLONE_NEWNET)"));
  }
}

// File access (every right Landlock governs) only where a worker needs it, so that the
// device's token file, its TLS material and the user's files stay closed to the kernels
// it runs, whatever the worker's user (root included). CPU batches: reads below the
// system's library folders (vendor libraries), /proc (the module fds, the worker's own
// maps), /sys (cache sizes) and of the program's own file. GPU batches also read /usr,
// /opt and /etc/OpenCL (drivers, ICDs, PoCL's kernel library, helper programs) and may
// read and write /dev (device files), the temporary folder and the driver caches ($HOME's
// .cache and .nv, $XDG_CACHE_HOME, $CUDA_CACHE_PATH, $POCL_CACHE_DIR, Kestrel's OpenCL
// program cache).
void restrict_files(Kind kind, Outcome& out) {
#if defined(__NR_landlock_create_ruleset) && defined(__NR_landlock_add_rule) && \
    defined(__NR_landlock_restrict_self) && defined(LANDLOCK_ACCESS_FS_MAKE_SYM)
  const long abi = ::syscall(__NR_landlock_create_ruleset, nullptr, 0, LANDLOCK_CREATE_RULESET_VERSION);
  if (abi < 1) {
    out.degraded.push_back("token and other files stay readable: no Landlock (" + why("landlock_create_ruleset") + ")");
    return;
  }
  std::uint64_t all = (LANDLOCK_ACCESS_FS_MAKE_SYM << 1) - 1;  // every right of Landlock ABI 1
  if (kind == Kind::gpu) {
    // Drivers write a file and rename it into their cache from another folder (PoCL);
    // under ABI 1 every such rename is refused, so GPU batches need ABI 2's REFER right.
#ifdef LANDLOCK_ACCESS_FS_REFER
    if (abi >= 2) all |= LANDLOCK_ACCESS_FS_REFER;
#endif
    if ((all & (LANDLOCK_ACCESS_FS_MAKE_SYM << 1)) == 0) {
      out.degraded.push_back("token and other files stay readable: Landlock ABI " + std::to_string(abi) +
                             " would refuse the renames GPU drivers make in their caches (ABI 2 needed)");
      return;
    }
  }
  landlock_ruleset_attr attr{};
  attr.handled_access_fs = all;
  const int ruleset = static_cast<int>(::syscall(__NR_landlock_create_ruleset, &attr, sizeof attr, 0));
  if (ruleset < 0) {
    out.degraded.push_back("token and other files stay readable: " + why("landlock_create_ruleset"));
    return;
  }
  const std::uint64_t read_dir = LANDLOCK_ACCESS_FS_READ_FILE | LANDLOCK_ACCESS_FS_READ_DIR | LANDLOCK_ACCESS_FS_EXECUTE;
  const std::uint64_t read_file = LANDLOCK_ACCESS_FS_READ_FILE | LANDLOCK_ACCESS_FS_EXECUTE;
  struct Rule {
    std::string path;
    bool writable;
  };
  // /proc/self/exe: the program's own file (its ELF header names the device's architecture).
  std::vector<Rule> rules;
  for (const char* path : {"/proc", "/sys", "/lib", "/lib64", "/lib32", "/usr/lib", "/usr/lib64", "/usr/lib32",
                           "/usr/local/lib", "/etc/ld.so.cache", "/proc/self/exe"}) {
    rules.push_back({path, false});
  }
  if (kind == Kind::gpu) {
    for (const char* path : {"/usr", "/opt", "/etc/OpenCL"}) rules.push_back({path, false});
    for (const char* path : {"/dev", "/tmp", "/var/tmp"}) rules.push_back({path, true});
    auto env = [](const char* name) -> std::string {
      const char* value = std::getenv(name);
      return value && *value == '/' ? value : "";
    };
    const std::string home = env("HOME");
    for (const std::string& path : {env("TMPDIR"), env("XDG_CACHE_HOME"), env("CUDA_CACHE_PATH"), env("POCL_CACHE_DIR"),
                                    env("KESTREL_OPENCL_CACHE"), home.empty() ? "" : home + "/.cache",
                                    home.empty() ? "" : home + "/.nv"}) {
      if (!path.empty()) rules.push_back({path, true});
    }
  }
  bool ok = true;
  for (const Rule& r : rules) {
    const int fd = ::open(r.path.c_str(), O_PATH | O_CLOEXEC);
    if (fd < 0) continue;  // not on this system
    struct stat st {};
    const bool dir = ::fstat(fd, &st) == 0 && S_ISDIR(st.st_mode);
    landlock_path_beneath_attr rule{};
    if (r.writable) {
      rule.allowed_access = dir ? all : read_file | LANDLOCK_ACCESS_FS_WRITE_FILE;
    } else {
      rule.allowed_access = dir ? read_dir : read_file;
    }
    rule.parent_fd = fd;
    ok &= ::syscall(__NR_landlock_add_rule, ruleset, LANDLOCK_RULE_PATH_BENEATH, &rule, 0) == 0;
    ::close(fd);
  }
  if (!ok) {
    out.degraded.push_back("token and other files stay readable: " + why("landlock_add_rule"));
  } else if (::syscall(__NR_landlock_restrict_self, ruleset, 0) != 0) {
    out.degraded.push_back("token and other files stay readable: " + why("landlock_restrict_self"));
  } else {
    out.active.push_back(kind == Kind::gpu ? "files: libraries, drivers, /dev, caches and the temporary folder (Landlock)"
                                           : "file reads: libraries, /proc, /sys (Landlock)");
  }
  ::close(ruleset);
#else
  (void)kind;
  out.degraded.push_back("token and other files stay readable: built without Landlock");
#endif
}

// Default allow; refuses what a kernel needs none of (EPERM, or what makes the C library
// fall back or give up: ENOSYS, EACCES). The rules, by kind: sandbox.h; the numbers:
// sandbox_syscalls.h.
void filter(Kind kind, Outcome& out) {
  const std::optional<seccomp::Filter> rules = syscall_filter(kind, ::getpid(), ::getppid());
  if (!rules) {
    out.degraded.push_back("no seccomp filter: a rule was refused by the filter builder");
  } else if (std::string failed = rules->load(); !failed.empty()) {
    out.degraded.push_back("no seccomp filter: " + failed);
  } else {
    out.active.push_back(kind == Kind::cpu ? "seccomp filter" : "seccomp filter (GPU: network, ptrace, signals)");
  }
}

std::string join(const std::vector<std::string>& parts, const char* separator) {
  std::string text;
  for (const auto& part : parts) text += (text.empty() ? "" : separator) + part;
  return text;
}

}  // namespace

std::optional<seccomp::Filter> syscall_filter(Kind kind, pid_t self, pid_t parent) {
  namespace nr = syscalls;
  seccomp::Filter f;
  const std::uint32_t deny = seccomp::fail_with(EPERM);
  bool ok = true;
  for (long call : nr::kProcessCalls) ok &= f.add(call, deny);
  for (long call : nr::kSystemCalls) ok &= f.add(call, deny);
  if (kind == Kind::cpu) {
    // No network or local sockets at all, no new processes or programs, no writes to files.
    for (long call : nr::kCpuCalls) ok &= f.add(call, deny);
    // Threads (CLONE_THREAD set) only.
    ok &= f.add(nr::kClone, deny, {seccomp::masked_equal(0, CLONE_THREAD, 0)});
    ok &= f.add(nr::kClone3, seccomp::fail_with(ENOSYS));  // flags out of reach: glibc falls back to clone
    ok &= f.add(nr::kOpenat2, seccomp::fail_with(ENOSYS));
    for (int flag : {O_WRONLY, O_RDWR, O_CREAT, O_TRUNC, O_APPEND}) {
      const auto bits = static_cast<std::uint64_t>(flag);
      ok &= f.add(nr::kOpen, seccomp::fail_with(EACCES), {seccomp::masked_equal(1, bits, bits)});
      ok &= f.add(nr::kOpenat, seccomp::fail_with(EACCES), {seccomp::masked_equal(2, bits, bits)});
    }
    // Signals to itself only.
    for (long call : {nr::kKill, nr::kTgkill, nr::kRtSigqueueinfo, nr::kRtTgsigqueueinfo}) {
      ok &= f.add(call, deny, {seccomp::not_equal(0, static_cast<std::uint64_t>(self))});
    }
  } else {
    // Drivers use local sockets; nothing reaches a network.
    for (int family : {AF_INET, AF_INET6, AF_PACKET, AF_NETLINK}) {
      ok &= f.add(nr::kSocket, deny, {seccomp::masked_equal(0, 0xffffffffu, static_cast<std::uint64_t>(family))});
    }
    // Never the runtime, a process group or every process of the user.
    const auto runtime = static_cast<std::uint64_t>(static_cast<std::uint32_t>(parent));
    for (long call : {nr::kKill, nr::kRtSigqueueinfo}) {
      ok &= f.add(call, deny, {seccomp::masked_equal(0, 0xffffffffu, runtime)});
      ok &= f.add(call, deny, {seccomp::masked_equal(0, 0xffffffffu, 0)});
      ok &= f.add(call, deny, {seccomp::masked_equal(0, 0x80000000u, 0x80000000u)});
    }
    for (long call : {nr::kTgkill, nr::kRtTgsigqueueinfo}) {
      ok &= f.add(call, deny, {seccomp::masked_equal(0, 0xffffffffu, runtime)});
    }
  }
  if (!ok) return std::nullopt;
  return f;
}

Outcome enter(const Plan& plan, std::span<int> fds) {
  Outcome out;
  keep_only(fds);
  out.active.push_back("inherited fds closed");
  null_std_streams(plan.kind);
  int open_fds = 3;
  for (int fd : fds) open_fds = std::max(open_fds, fd + 1);
  limits(plan, open_fds, out);
  no_new_privileges(out);
  namespaces_and_user(plan.kind, out);
  restrict_files(plan.kind, out);
  filter(plan.kind, out);
  return out;
}

const std::string& describe() {
  static const std::string text = [] {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) return "unknown (" + why("pipe") + ")";
    pid_t pid = ::fork();
    if (pid < 0) return "unknown (" + why("fork") + ")";
    if (pid == 0) {
      int keep[1] = {fds[1]};
      Plan plan;
      plan.cpu_seconds = 10;
      Outcome out = enter(plan, keep);
      std::string report = join(out.active, ", ");
      if (!out.degraded.empty()) report += "; not applied: " + join(out.degraded, "; ");
      for (std::size_t at = 0; at < report.size();) {
        ssize_t n = ::write(keep[0], report.data() + at, report.size() - at);
        if (n <= 0) break;
        at += static_cast<std::size_t>(n);
      }
      ::_exit(0);
    }
    ::close(fds[1]);
    std::string report;
    char chunk[512];
    for (ssize_t n; (n = ::read(fds[0], chunk, sizeof chunk)) != 0;) {
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) break;
      report.append(chunk, static_cast<std::size_t>(n));
    }
    ::close(fds[0]);
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    return report.empty() ? std::string("unknown (the probe worker said nothing)") : report;
  }();
  return text;
}

}  // namespace kestrel::device::sandbox
