// Clang, in process: one C kernel source + #defines -> a relocatable object for a
// target, entirely in memory.
#pragma once

#include <string>
#include <vector>

#include "kestrel/host/target.h"
#include "kestrel/ops/op.h"

namespace kestrel::host::detail {

struct ObjectFile {
  bool ok = false;
  std::vector<char> bytes;  // ELF relocatable object when ok
  std::string diagnostics;  // driver and compiler messages, "file:line:col: error: ..."
  // Time in each phase (see CompilePhases): the optimiser's share is told by marker
  // passes at the start and the end of LLVM's pipeline.
  double frontend_ms = 0;
  double optimise_ms = 0;
  double codegen_ms = 0;
};

// Registers the X86, AArch64, ARM and RISCV backends and LLVM's crash recovery (so that
// an LLD fatal error returns to its caller instead of exiting). Once per process;
// thread-safe; every function here calls it.
void initialize_llvm();

// Compiles on the calling thread with a CompilerInstance of its own: safe to call from
// many threads at once. A bad source, CPU or feature is a result with ok == false, never
// an exception; so is a crash inside clang (recovered, reported in diagnostics).
ObjectFile compile_object(const ops::KernelSource& source, const Target& target, int opt_level);

// The clang driver arguments compile_object uses (for logs and tests).
std::vector<std::string> driver_arguments(const ops::KernelSource& source, const Target& target,
                                          int opt_level);

// The name the source has in diagnostics: file_name without directories, or "kernel.c".
std::string source_name(const ops::KernelSource& source);

// Full vendor version of the linked clang, e.g. "Debian clang version 19.1.7 (3~deb12u1)".
std::string clang_full_version();

}  // namespace kestrel::host::detail
