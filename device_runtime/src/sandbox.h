// The worker's confinement: what a forked measurement worker does to itself before it
// loads any uploaded code (the reference included). Private to the runtime.
//
// Steps, in order: keep only the result socket and the module fds (moved to 3, 4, ...;
// every other inherited fd closed, stdin/stdout to /dev/null, stderr too for CPU
// batches), resource limits, PR_SET_NO_NEW_PRIVS, a network namespace (root: plain;
// otherwise inside a new user namespace), dropping root to nobody, file access only
// below the library folders, /proc and /sys (Landlock; GPU batches also drivers, /dev,
// caches and temporary folders), and a seccomp filter (Kestrel's own classic BPF program,
// seccomp_bpf.h). A step the system does not offer is skipped and named in `degraded`.
//
// CPU batches get every step. GPU batches (OpenCL, CUDA: drivers that open device files,
// write caches and may fork helpers) keep their user, get no address-space limit and
// a looser filter (network sockets, ptrace, process_vm_*, signals to the runtime and
// namespace/mount calls are refused; files, fork and exec are allowed).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "seccomp_bpf.h"

namespace kestrel::device::sandbox {

enum class Kind { cpu, gpu };

struct Plan {
  Kind kind = Kind::cpu;
  std::uint64_t address_space_bytes = 0;  // RLIMIT_AS; 0: none
  std::uint64_t cpu_seconds = 0;          // RLIMIT_CPU (soft; hard 5 s above); 0: none
};

struct Outcome {
  std::vector<std::string> active;    // e.g. "seccomp filter", "uid nobody"
  std::vector<std::string> degraded;  // one reason per step that could not be applied
};

// Moves the descriptors in `fds` to 3, 4, ... (in order; a repeated one shares its number,
// -1 stays -1) and closes every other one above 2. The moved ones are not close-on-exec.
void keep_only(std::span<int> fds);

// In the freshly forked, single-threaded worker. `fds` are the descriptors to keep; on
// return each holds its new number (-1 stays -1). Never fails: what cannot be applied is
// reported in the outcome.
Outcome enter(const Plan& plan, std::span<int> fds);

// The worker's syscall filter for `kind`, built and not loaded (enter() loads it): allow
// by default; refuse (EPERM) ptrace, process_vm_*, kcmp, pidfd_*, tkill, namespaces,
// mounts, bpf, perf_event_open, io_uring, modules, kexec, keys and the like. CPU batches
// also: sockets, exec, fork and clone without CLONE_THREAD, clone3 and openat2 (ENOSYS,
// so the C library falls back to clone and openat), file changes (EPERM) and opens for
// writing (EACCES), signals to any process but `self`. GPU batches: AF_INET, AF_INET6,
// AF_PACKET and AF_NETLINK sockets, signals to `parent` (the runtime), to process groups
// and to every process. Empty if a rule was refused (a bug: nothing is loaded then).
std::optional<seccomp::Filter> syscall_filter(Kind kind, pid_t self, pid_t parent);

// Which protections a CPU batch's worker gets on this system, probed once per process in
// a throwaway child, e.g. "fds closed, rlimits, no_new_privs, ... ; not applied: ...".
const std::string& describe();

}  // namespace kestrel::device::sandbox
