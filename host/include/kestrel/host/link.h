// Linking several kernel objects (CompileRequest::Output::object) into one library:
// a freestanding shared object with in-process LLD, or a static archive. What an exported
// kernel library is made of (model/export.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kestrel::host {

struct ObjectInput {
  std::string name;                 // member name in an archive, e.g. "kestrel_k3.o"
  std::vector<std::uint8_t> bytes;  // ELF relocatable object
};

struct LinkResult {
  bool ok = false;
  std::vector<std::uint8_t> bytes;  // the .so or the .a when ok
  std::string diagnostics;          // the linker's messages ("ld.lld: error: ...")
};

// Links the objects with no C library and no default libraries (-shared -nostdlib):
// a library with no NEEDED entries when the objects reference nothing outside
// themselves. Thread-safe (links run one at a time). Never throws for bad input.
LinkResult link_shared_library(const std::vector<ObjectInput>& objects, const std::string& soname);

// A GNU static archive of the objects, with a symbol table (llvm::object::writeArchive).
// Never throws for bad input: a malformed object is a result with ok == false.
LinkResult write_static_archive(const std::vector<ObjectInput>& objects);

}  // namespace kestrel::host
