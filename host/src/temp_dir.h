// A private temporary directory (mode 0700) for the files LLD reads and writes,
// removed with everything in it when the object goes away.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace kestrel::host::detail {

class TempDir {
 public:
  // Creates the directory under /dev/shm when it exists (no disk I/O), else under
  // $TMPDIR or /tmp. Throws std::system_error when neither works.
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

  // Throw std::system_error naming the file on failure.
  void write(const std::string& name, std::span<const char> bytes) const;
  std::vector<std::uint8_t> read(const std::string& name) const;

 private:
  std::string path_;
};

}  // namespace kestrel::host::detail
