// Which compile target a kernel is built for, as an identity: the backend, and the CPU
// triple with its -mcpu and extra features, or the GPU architecture and index. Plain
// data, what the records keep of a target (they need no compiler to read it):
// host::Target::id() gives a target's, host::target_of() a target for one. Its text,
// "x86_64-linux-gnu (znver4)" or "cuda sm_90", is written in one place (to_string: what
// host::Target::to_string() prints and the records store) and parsed in one (parse).
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "kestrel/ops/op.h"

namespace kestrel::ops {

struct TargetId {
  Backend backend = Backend::cpu;
  std::string triple;    // CPU targets: "aarch64-linux-gnu"
  std::string cpu;       // -mcpu; empty: the triple's baseline
  std::string features;  // extra LLVM features, "+avx2,+fma"
  std::string gpu_arch;  // CUDA targets: "sm_90" (cubin) or "compute_90" (PTX); may be empty
  unsigned gpu_index = 0;  // which of the device's GPUs of the backend

  bool is_gpu() const { return backend != Backend::cpu; }
  // "triple", "triple (cpu)", "triple (cpu, features)", "triple (features)"; "cuda sm_90",
  // "opencl", "opencl #1".
  std::string to_string() const;
  // to_string()'s text back. Any word is taken as a triple (records do not check it
  // against what the compiler supports); nothing for text that is not of that form (an
  // unclosed parenthesis, an empty text).
  static std::optional<TargetId> parse(std::string_view text);

  friend bool operator==(const TargetId&, const TargetId&) = default;
};

}  // namespace kestrel::ops
