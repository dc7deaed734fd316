// Reading small text files (tokens, /proc and /sys entries) with POSIX calls, so the
// device runtime needs no iostreams.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <optional>
#include <string>

namespace kestrel {

// The whole file, or nullopt if it cannot be opened or read. Reads at most `limit` bytes.
inline std::optional<std::string> read_file(const std::string& path, std::size_t limit = std::size_t(1) << 20) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  std::string out;
  char buffer[4096];
  while (out.size() < limit) {
    ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      ::close(fd);
      return std::nullopt;
    }
    if (n == 0) break;
    out.append(buffer, static_cast<std::size_t>(n));
  }
  ::close(fd);
  if (out.size() > limit) out.resize(limit);
  return out;
}

}  // namespace kestrel
