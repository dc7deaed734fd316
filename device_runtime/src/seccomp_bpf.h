// A seccomp filter of Kestrel's own, written as a classic BPF program (<linux/filter.h>):
// allow by default, refuse what a list of rules names. The worker's filter (sandbox.cpp)
// is the only user. It replaces libseccomp, whose syscall tables for every architecture
// were 100 KB of the board runtime (issue 29) when the worker needs one filter for the
// architecture it was built for.
//
// The program, in order: a system call of another architecture than the build's
// (seccomp_data.arch against its AUDIT_ARCH_*) kills the process, and on x86_64 so does an
// x32 one (its number carries __X32_SYSCALL_BIT); then each rule as a block of its own,
// which returns the rule's action when the number and every comparison match and falls
// through to the next block otherwise (so no jump spans more than one block, however long
// the list: classic BPF jumps reach 255 instructions); then allow.
#pragma once

#include <linux/filter.h>

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

namespace kestrel::device::seccomp {

// Whether this architecture has a filter here (x86_64, aarch64, 32-bit ARM EABI, riscv64;
// little-endian only). Elsewhere load() refuses and the worker runs unfiltered.
bool supported();

// The AUDIT_ARCH_* value the program checks (0 where unsupported).
std::uint32_t audit_arch();

// SECCOMP_RET_ERRNO: the call fails with `error` and does nothing.
std::uint32_t fail_with(int error);

// One comparison on argument `arg` (0-5) of a system call, with libseccomp's meaning:
// the 64-bit argument is compared whole on 64-bit architectures (both 32-bit halves of
// seccomp_data.args[arg]) and as its low 32 bits on 32-bit ones.
struct Compare {
  enum class Op { not_equal, masked_equal };
  unsigned arg = 0;
  Op op = Op::not_equal;
  std::uint64_t mask = ~std::uint64_t{0};  // masked_equal: (argument & mask) == value
  std::uint64_t value = 0;
};

inline Compare not_equal(unsigned arg, std::uint64_t value) { return {arg, Compare::Op::not_equal, ~std::uint64_t{0}, value}; }
inline Compare masked_equal(unsigned arg, std::uint64_t mask, std::uint64_t value) {
  return {arg, Compare::Op::masked_equal, mask, value};
}

class Filter {
 public:
  // Adds a rule: system call `nr` returns `action` (fail_with(), or any SECCOMP_RET_*)
  // when every comparison holds; the first matching rule wins. A negative `nr` (a call
  // this architecture lacks) adds nothing and succeeds. Returns false, adding nothing,
  // for more than six comparisons (a block must stay within a jump's reach) or one that
  // can never hold as written: an argument past 5, a value with bits outside its mask,
  // or (32-bit architectures) bits above the low 32.
  bool add(long nr, std::uint32_t action, std::initializer_list<Compare> conditions = {});

  // The whole program (see the file header); empty where unsupported().
  std::vector<sock_filter> program() const;

  // Loads the program into the calling thread (seccomp(2), else prctl(PR_SET_SECCOMP)).
  // It needs PR_SET_NO_NEW_PRIVS (or CAP_SYS_ADMIN) and stays for the thread's life and
  // its children. Returns an empty string, or why it was not loaded (the call that
  // failed and its errno's text, e.g. "prctl(PR_SET_SECCOMP): Invalid argument").
  std::string load() const;

  std::size_t rules() const { return rules_.size(); }

 private:
  struct Rule {
    std::uint32_t nr;
    std::uint32_t action;
    std::vector<Compare> conditions;
  };
  std::vector<Rule> rules_;
};

}  // namespace kestrel::device::seccomp
