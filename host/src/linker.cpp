// The in-process ELF linker (LLD 19's library entry point, lld::lldMain).
#include "linker.h"

#include <exception>
#include <mutex>

#include <lld/Common/Driver.h>
#include <llvm/Config/llvm-config.h>
#include <llvm/Object/ArchiveWriter.h>
#include <llvm/Support/Error.h>
#include <llvm/Support/MemoryBuffer.h>
#include <llvm/Support/raw_ostream.h>

#include "frontend.h"
#include "kestrel/host/link.h"
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
  return link_objects({{"kernel.o", object}}, soname);
}

SharedObject link_objects(const std::vector<std::pair<std::string, std::span<const char>>>& objects,
                          const std::string& soname) {
  initialize_llvm();  // crash recovery: LLD's fatal() must return, not exit
  SharedObject out;
  try {
    const TempDir dir;
    std::vector<std::string> inputs;
    for (std::size_t i = 0; i < objects.size(); ++i) {
      // Numbered: member names need not be unique or valid file names.
      const std::string name = objects.size() == 1 ? std::string("kernel.o") : std::to_string(i) + "-" + objects[i].first;
      dir.write(name, objects[i].second);
      inputs.push_back(dir.file(name));
    }
    const std::string output = dir.file("kernel.so");
    std::vector<const char*> args = {
        "ld.lld", "-shared", "-nostdlib", "--threads=1",
        "-z", "noexecstack", "--hash-style=both", "--eh-frame-hdr",
        "-soname", soname.c_str(), "-o", output.c_str()};
    for (const std::string& input : inputs) args.push_back(input.c_str());
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

namespace kestrel::host {

LinkResult link_shared_library(const std::vector<ObjectInput>& objects, const std::string& soname) {
  std::vector<std::pair<std::string, std::span<const char>>> inputs;
  for (const ObjectInput& object : objects)
    inputs.emplace_back(object.name, std::span(reinterpret_cast<const char*>(object.bytes.data()), object.bytes.size()));
  detail::SharedObject so = detail::link_objects(inputs, soname);
  LinkResult result;
  result.ok = so.ok;
  result.bytes = std::move(so.bytes);
  result.diagnostics = std::move(so.diagnostics);
  return result;
}

LinkResult write_static_archive(const std::vector<ObjectInput>& objects) {
  detail::initialize_llvm();
  LinkResult result;
  std::vector<llvm::NewArchiveMember> members;
  for (const ObjectInput& object : objects) {
    llvm::NewArchiveMember member(llvm::MemoryBufferRef(
        llvm::StringRef(reinterpret_cast<const char*>(object.bytes.data()), object.bytes.size()), object.name));
    member.MemberName = object.name;
    members.push_back(std::move(member));
  }
  llvm::Expected<std::unique_ptr<llvm::MemoryBuffer>> archive =
      llvm::writeArchiveToBuffer(members, llvm::SymtabWritingMode::NormalSymtab, llvm::object::Archive::K_GNU,
                                 /*Deterministic=*/true, /*Thin=*/false);
  if (!archive) {
    result.diagnostics = "kestrel: cannot write the archive: " + llvm::toString(archive.takeError()) + "\n";
    return result;
  }
  const llvm::StringRef bytes = (*archive)->getBuffer();
  result.bytes.assign(bytes.begin(), bytes.end());
  result.ok = true;
  return result;
}

}  // namespace kestrel::host
