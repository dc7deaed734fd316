// The in-process ELF linker (LLD 19's library entry point, lld::lldMain).
#include "linker.h"

#include <exception>
#include <mutex>

#include <lld/Common/Driver.h>
#include <llvm/Config/llvm-config.h>
#include <llvm/Support/raw_ostream.h>

#include "frontend.h"
#include "temp_dir.h"

LLD_HAS_DRIVER(elf)

namespace kestrel::host::detail {
namespace {

// LLD's ELF driver lives in process-wide globals: one link at a time, and after a
// crash it cannot run again (lldMain says so with canRunAgain).
struct LldState {
  std::mutex mutex;
  bool broken = false;
};

LldState& lld_state() {
  static LldState state;
  return state;
}

}  // namespace

SharedObject link_shared_object(std::span<const char> object, const std::string& soname) {
  initialize_llvm();  // crash recovery: LLD's fatal() must return, not exit
  SharedObject out;
  try {
    const TempDir dir;
    dir.write("kernel.o", object);
    const std::string input = dir.file("kernel.o");
    const std::string output = dir.file("kernel.so");
    const std::vector<const char*> args = {
        "ld.lld", "-shared", "-nostdlib", "--threads=1",
        "-z", "noexecstack", "--hash-style=both", "--eh-frame-hdr",
        "-soname", soname.c_str(), "-o", output.c_str(), input.c_str()};
    llvm::raw_string_ostream messages(out.diagnostics);
    LldState& state = lld_state();
    int code = 1;
    {
      const std::lock_guard lock(state.mutex);
      if (state.broken) {
        out.deterministic = false;
        out.diagnostics += "kestrel: the in-process linker crashed earlier in this process; restart it\n";
        return out;
      }
      // lldMain runs the driver with exitEarly = false and inside a CrashRecoveryContext,
      // so errors (even fatal ones) come back as a return code.
      const lld::Result result = lld::lldMain(args, messages, messages, {{lld::Gnu, &lld::elf::link}});
      code = result.retCode;
      if (!result.canRunAgain) {
        state.broken = true;
        out.deterministic = false;
      }
    }
    messages.flush();
    // Name files as "kernel.o", not by their random temporary path: the same input gives
    // the same (cacheable) diagnostics.
    for (std::size_t at; (at = out.diagnostics.find(dir.path() + "/")) != std::string::npos;)
      out.diagnostics.erase(at, dir.path().size() + 1);
    if (code != 0) {
      if (out.diagnostics.empty()) out.diagnostics = "ld.lld: failed with code " + std::to_string(code) + "\n";
      return out;
    }
    out.bytes = dir.read("kernel.so");
    out.ok = true;
  } catch (const std::exception& e) {
    out.ok = false;
    out.bytes.clear();
    out.deterministic = false;
    out.diagnostics += std::string("kestrel: cannot link: ") + e.what() + "\n";
  }
  return out;
}

// LLD is linked statically from the same release as the LLVM headers (Debian ships no
// lld/Common/Version.inc, so lld::getLLDVersion's header is unusable).
std::string lld_version() { return "LLD " LLVM_VERSION_STRING; }

}  // namespace kestrel::host::detail
