// The compile cache on disk (see disk_cache.h). Entry format, little-endian:
//   "KESTREL-CC1\n", u8 ok, u64 length + diagnostics, u64 length + image,
//   32-byte SHA-256 of everything before it.
#include "disk_cache.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string_view>
#include <vector>

#include <sodium.h>

#include "kestrel/rpc/sha256.h"

namespace kestrel::host::detail {
namespace {

constexpr std::string_view kMagic = "KESTREL-CC1\n";
constexpr std::size_t kDigest = crypto_hash_sha256_BYTES;
// An entry larger than this is not a kernel: refuse to read it into memory.
constexpr std::uint64_t kMaxEntry = 1ull << 30;

// Reads fields off an entry; any overrun turns `ok` false.
struct Reader {
  const std::vector<std::uint8_t>& bytes;
  std::size_t at = 0;
  bool ok = true;
  std::uint64_t u64() {
    if (bytes.size() - at < 8) return ok = false, 0;
    std::uint64_t value = 0;
    for (int i = 0; i < 8; ++i) value |= static_cast<std::uint64_t>(bytes[at + i]) << (8 * i);
    at += 8;
    return value;
  }
  std::span<const std::uint8_t> take(std::uint64_t n) {
    if (bytes.size() - at < n) return ok = false, std::span<const std::uint8_t>{};
    std::span<const std::uint8_t> out(bytes.data() + at, n);
    at += n;
    return out;
  }
};

bool read_file(const std::string& path, std::vector<std::uint8_t>& out) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  struct stat info {};
  bool ok = ::fstat(fd, &info) == 0 && info.st_size >= 0 && static_cast<std::uint64_t>(info.st_size) <= kMaxEntry;
  if (ok) {
    out.resize(static_cast<std::size_t>(info.st_size));
    std::size_t done = 0;
    while (ok && done < out.size()) {
      const ssize_t n = ::read(fd, out.data() + done, out.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) ok = false;
      else done += static_cast<std::size_t>(n);
    }
  }
  ::close(fd);
  return ok;
}

bool write_all(int fd, std::span<const std::uint8_t> bytes) {
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<std::size_t>(n);
  }
  return true;
}

bool make_dirs(const std::string& path) {
  for (std::size_t at = 1; at <= path.size(); ++at) {
    if (at != path.size() && path[at] != '/') continue;
    const std::string prefix = path.substr(0, at);
    if (::mkdir(prefix.c_str(), 0755) != 0 && errno != EEXIST) return false;
  }
  return true;
}

}  // namespace

std::string DiskCache::path_of(const std::string& key) const { return dir_ + "/" + key.substr(0, 2) + "/" + key; }

std::optional<CompileResult> DiskCache::load(const std::string& key) const {
  if (dir_.empty() || key.size() < 3) return std::nullopt;
  std::vector<std::uint8_t> bytes;
  if (!read_file(path_of(key), bytes) || bytes.size() < kMagic.size() + 1 + 16 + kDigest) return std::nullopt;
  std::array<std::uint8_t, kDigest> digest{};
  crypto_hash_sha256(digest.data(), bytes.data(), bytes.size() - kDigest);
  if (std::memcmp(digest.data(), bytes.data() + bytes.size() - kDigest, kDigest) != 0) return std::nullopt;
  if (std::memcmp(bytes.data(), kMagic.data(), kMagic.size()) != 0) return std::nullopt;
  Reader in{bytes, kMagic.size()};
  CompileResult result;
  const std::span<const std::uint8_t> ok = in.take(1);
  const std::uint64_t diagnostics_size = in.u64();
  const std::span<const std::uint8_t> diagnostics = in.take(diagnostics_size);
  const std::uint64_t image_size = in.u64();
  const std::span<const std::uint8_t> image = in.take(image_size);
  if (!in.ok || in.at != bytes.size() - kDigest || ok[0] > 1) return std::nullopt;
  result.ok = ok[0] == 1;
  result.diagnostics.assign(diagnostics.begin(), diagnostics.end());
  result.shared_object.assign(image.begin(), image.end());
  if (result.ok) result.hash = rpc::sha256_hex(result.shared_object);
  result.key = key;
  return result;
}

void DiskCache::store(const std::string& key, const CompileResult& result) const {
  if (dir_.empty() || key.size() < 3) return;
  // Sized once and filled through a cursor (GCC 12 misreads growing a vector here as an
  // overflow).
  const std::size_t total = kMagic.size() + 1 + 8 + result.diagnostics.size() + 8 + result.shared_object.size() + kDigest;
  std::vector<std::uint8_t> bytes(total);
  std::uint8_t* at = bytes.data();
  auto put = [&](const void* data, std::size_t size) {
    if (size > 0) std::memcpy(at, data, size);
    at += size;
  };
  auto put_u64 = [&](std::uint64_t value) {
    std::uint8_t little[8];
    for (int i = 0; i < 8; ++i) little[i] = static_cast<std::uint8_t>(value >> (8 * i));
    put(little, sizeof little);
  };
  put(kMagic.data(), kMagic.size());
  const std::uint8_t ok = result.ok ? 1 : 0;
  put(&ok, 1);
  put_u64(result.diagnostics.size());
  put(result.diagnostics.data(), result.diagnostics.size());
  put_u64(result.shared_object.size());
  put(result.shared_object.data(), result.shared_object.size());
  crypto_hash_sha256(at, bytes.data(), total - kDigest);

  const std::string final_path = path_of(key);
  const std::string subdir = final_path.substr(0, final_path.find_last_of('/'));
  if (!make_dirs(subdir)) return;
  // A name no other writer uses; the rename publishes the whole entry at once.
  thread_local std::mt19937_64 random(std::random_device{}());
  const std::string temporary = final_path + ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(random());
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return;
  const bool written = write_all(fd, bytes);
  const bool closed = ::close(fd) == 0;
  if (!written || !closed || ::rename(temporary.c_str(), final_path.c_str()) != 0) ::unlink(temporary.c_str());
}

std::string compile_cache_dir_from_environment() {
  const char* dir = std::getenv("KESTREL_COMPILE_CACHE");
  if (dir == nullptr || std::string_view(dir).empty() || std::string_view(dir) == "off") return {};
  return dir;
}

}  // namespace kestrel::host::detail
