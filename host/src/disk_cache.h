// The compile cache on disk: finished compiles by their cache key (Compiler::hash_of), so
// that another process (the next tuning session, the final re-measurement of a best
// configuration, `kestrel bench`) gets them without compiling.
#pragma once

#include <optional>
#include <string>

#include "kestrel/host/compiler.h"

namespace kestrel::host::detail {

// Entries live at <dir>/<key[0..2)>/<key>, one file each, written to a temporary name
// and renamed into place, so readers see a whole entry or none and concurrent writers
// (two processes compiling the same candidate) are harmless. An entry carries a SHA-256
// of its contents; a truncated or damaged file reads as a miss. The checksum is no defence
// against someone who can write the directory (they could plant any module), so it must
// be writable by the user alone. Nothing here throws: a directory that cannot be created
// or written just caches nothing.
class DiskCache {
 public:
  explicit DiskCache(std::string dir) : dir_(std::move(dir)) {}

  // The stored result of `key` (ok, diagnostics, shared_object, hash; key set), or
  // nothing when absent or unreadable.
  std::optional<CompileResult> load(const std::string& key) const;
  // Stores `result` under `key`; failures to write are ignored.
  void store(const std::string& key, const CompileResult& result) const;

  const std::string& dir() const { return dir_; }

 private:
  std::string path_of(const std::string& key) const;
  std::string dir_;
};

// The directory named by KESTREL_COMPILE_CACHE, or empty (no disk cache) when it is unset,
// empty or "off".
std::string compile_cache_dir_from_environment();

}  // namespace kestrel::host::detail
