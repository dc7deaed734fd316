// Private temporary directories for the in-process linker.
#include "temp_dir.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <system_error>

namespace kestrel::host::detail {
namespace {

[[noreturn]] void fail(const std::string& what) {
  throw std::system_error(errno, std::generic_category(), what);
}

// Closes a file descriptor on scope exit.
struct Fd {
  int fd;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

TempDir::TempDir() {
  std::vector<std::string> bases;
  struct stat st {};
  if (::stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) && ::access("/dev/shm", W_OK) == 0)
    bases.emplace_back("/dev/shm");
  if (const char* tmp = std::getenv("TMPDIR"); tmp != nullptr && *tmp != '\0') bases.emplace_back(tmp);
  bases.emplace_back("/tmp");
  for (const std::string& base : bases) {
    std::string pattern = base + "/kestrel-cc-XXXXXX";
    if (::mkdtemp(pattern.data()) != nullptr) {
      path_ = std::move(pattern);
      return;
    }
  }
  fail("cannot create a temporary directory in /dev/shm, $TMPDIR or /tmp");
}

TempDir::~TempDir() {
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
}

void TempDir::write(const std::string& name, std::span<const char> bytes) const {
  const std::string path = file(name);
  Fd out{::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600)};
  if (out.fd < 0) fail("cannot create " + path);
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(out.fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail("cannot write " + path);
    done += static_cast<std::size_t>(n);
  }
}

std::vector<std::uint8_t> TempDir::read(const std::string& name) const {
  const std::string path = file(name);
  Fd in{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (in.fd < 0) fail("cannot open " + path);
  std::vector<std::uint8_t> bytes;
  std::uint8_t buffer[1 << 16];
  for (;;) {
    const ssize_t n = ::read(in.fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail("cannot read " + path);
    if (n == 0) break;
    bytes.insert(bytes.end(), buffer, buffer + n);
  }
  return bytes;
}

}  // namespace kestrel::host::detail
