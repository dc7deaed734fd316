// Kestrel's seccomp filter builder (see seccomp_bpf.h).
#include "seccomp_bpf.h"

#include <linux/audit.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstring>

namespace kestrel::device::seccomp {
namespace {

#if defined(__x86_64__) && !defined(__ILP32__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
constexpr std::uint32_t kArch = AUDIT_ARCH_X86_64;
#elif defined(__aarch64__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
constexpr std::uint32_t kArch = AUDIT_ARCH_AARCH64;
#elif defined(__arm__) && defined(__ARM_EABI__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
constexpr std::uint32_t kArch = AUDIT_ARCH_ARM;
#elif defined(__riscv) && __riscv_xlen == 64 && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
constexpr std::uint32_t kArch = AUDIT_ARCH_RISCV64;
#else
constexpr std::uint32_t kArch = 0;
#endif

constexpr bool kWide = sizeof(long) == 8;  // 64-bit arguments: compare both halves
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
constexpr std::uint32_t kLow = 0, kHigh = 4;
#else
constexpr std::uint32_t kLow = 4, kHigh = 0;
#endif

#ifdef SECCOMP_RET_KILL_PROCESS
constexpr std::uint32_t kKill = SECCOMP_RET_KILL_PROCESS;
#else
constexpr std::uint32_t kKill = SECCOMP_RET_KILL;  // before Linux 4.14 (the thread only)
#endif

constexpr std::uint32_t kNr = offsetof(seccomp_data, nr);
constexpr std::uint32_t kArchAt = offsetof(seccomp_data, arch);

std::uint32_t word(unsigned arg, std::uint32_t half) {
  return static_cast<std::uint32_t>(offsetof(seccomp_data, args) + 8 * arg + half);
}

sock_filter load_word(std::uint32_t at) { return BPF_STMT(BPF_LD | BPF_W | BPF_ABS, at); }
sock_filter ret(std::uint32_t action) { return BPF_STMT(BPF_RET | BPF_K, action); }
sock_filter jump_eq(std::uint32_t k, std::uint8_t jt, std::uint8_t jf) { return BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, k, jt, jf); }

// One rule's block. Jumps that leave the block (a mismatch) are recorded and aimed past
// its end once its length is known; a block is at most 2 + 6 * 6 + 1 instructions (six
// comparisons: Filter::add), well within a jump's 255.
class Block {
 public:
  void push(sock_filter op) { ops_.push_back(op); }
  // A comparison of A with `k`: on `equal` (or else on inequality) the rule does not apply.
  void mismatch_if(bool equal, std::uint32_t k) {
    exits_.push_back({ops_.size(), equal});
    push(jump_eq(k, 0, 0));
  }
  void append_to(std::vector<sock_filter>& program) {
    for (const auto& [at, on_true] : exits_) {
      const auto skip = static_cast<std::uint8_t>(ops_.size() - at - 1);
      (on_true ? ops_[at].jt : ops_[at].jf) = skip;
    }
    program.insert(program.end(), ops_.begin(), ops_.end());
  }

 private:
  struct Exit {
    std::size_t at;
    bool on_true;
  };
  std::vector<sock_filter> ops_;
  std::vector<Exit> exits_;
};

// Emits `c`, leaving A clobbered; a mismatch leaves the block.
void emit(Block& block, const Compare& c) {
  const auto low_mask = static_cast<std::uint32_t>(c.mask), high_mask = static_cast<std::uint32_t>(c.mask >> 32);
  const auto low = static_cast<std::uint32_t>(c.value), high = static_cast<std::uint32_t>(c.value >> 32);
  if (c.op == Compare::Op::not_equal) {
    if (kWide) {
      // Halves that differ: the comparison holds, on to whatever follows (2 ahead).
      block.push(load_word(word(c.arg, kHigh)));
      block.push(jump_eq(high, 0, 2));
    }
    block.push(load_word(word(c.arg, kLow)));
    block.mismatch_if(true, low);
    return;
  }
  // A half whose mask is 0 always matches (its value is 0 too: add() checked).
  if (kWide && high_mask != 0) {
    block.push(load_word(word(c.arg, kHigh)));
    if (high_mask != 0xffffffffu) block.push(BPF_STMT(BPF_ALU | BPF_AND | BPF_K, high_mask));
    block.mismatch_if(false, high);
  }
  if (low_mask != 0) {
    block.push(load_word(word(c.arg, kLow)));
    if (low_mask != 0xffffffffu) block.push(BPF_STMT(BPF_ALU | BPF_AND | BPF_K, low_mask));
    block.mismatch_if(false, low);
  }
}

}  // namespace

bool supported() { return kArch != 0; }

std::uint32_t audit_arch() { return kArch; }

std::uint32_t fail_with(int error) { return SECCOMP_RET_ERRNO | (static_cast<std::uint32_t>(error) & SECCOMP_RET_DATA); }

bool Filter::add(long nr, std::uint32_t action, std::initializer_list<Compare> conditions) {
  if (nr < 0) return true;
  if (conditions.size() > 6) return false;
  for (const Compare& c : conditions) {
    if (c.arg > 5) return false;
    if (c.op == Compare::Op::masked_equal && (c.value & ~c.mask) != 0) return false;
    if (!kWide && ((c.value >> 32) != 0 || (c.op == Compare::Op::masked_equal && (c.mask >> 32) != 0))) return false;
  }
  rules_.push_back({static_cast<std::uint32_t>(nr), action, std::vector<Compare>(conditions)});
  return true;
}

std::vector<sock_filter> Filter::program() const {
  std::vector<sock_filter> program;
  if (!supported()) return program;
  program.push_back(load_word(kArchAt));
  program.push_back(jump_eq(kArch, 1, 0));
  program.push_back(ret(kKill));
  program.push_back(load_word(kNr));
#if defined(__x86_64__) && defined(__X32_SYSCALL_BIT)
  // x32 calls enter with the same AUDIT_ARCH_X86_64 but their own table; -1 (no call at
  // all, as a tracer sets it) passes, as under libseccomp.
  program.push_back(BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, __X32_SYSCALL_BIT, 0, 2));
  program.push_back(jump_eq(0xffffffffu, 1, 0));
  program.push_back(ret(kKill));
#endif
  bool holds_nr = true;  // A still holds seccomp_data.nr
  for (const Rule& rule : rules_) {
    Block block;
    if (!holds_nr) block.push(load_word(kNr));
    block.mismatch_if(false, rule.nr);
    for (const Compare& c : rule.conditions) emit(block, c);
    block.push(ret(rule.action));
    block.append_to(program);
    holds_nr = rule.conditions.empty();
  }
  program.push_back(ret(SECCOMP_RET_ALLOW));
  return program;
}

std::string Filter::load() const {
  if (!supported()) return "Kestrel's filter does not know this architecture";
  std::vector<sock_filter> code = program();
  if (code.size() > BPF_MAXINSNS) {
    return std::to_string(code.size()) + " instructions, over the kernel's limit of " + std::to_string(BPF_MAXINSNS);
  }
  sock_fprog prog{static_cast<unsigned short>(code.size()), code.data()};
#ifdef __NR_seccomp
  if (::syscall(__NR_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) == 0) return {};
  if (errno != ENOSYS) return std::string("seccomp(SECCOMP_SET_MODE_FILTER): ") + std::strerror(errno);
#endif
  // Kernels before 3.17 have only the prctl.
  if (::prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0) == 0) return {};
  return std::string("prctl(PR_SET_SECCOMP): ") + std::strerror(errno);
}

}  // namespace kestrel::device::seccomp
