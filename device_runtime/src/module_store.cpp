// Sealed-memfd module store with LRU eviction.
#include "kestrel/device_runtime/module_store.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "kestrel/base/log.h"
#include "kestrel/rpc/sha256.h"

namespace kestrel::device {

ModuleStore::ModuleStore(std::size_t max_bytes, std::size_t max_modules)
    : max_bytes_(max_bytes), max_modules_(max_modules) {}

ModuleStore::~ModuleStore() {
  for (auto& [hash, entry] : modules_) ::close(entry.fd);
}

bool ModuleStore::valid_hash(const std::string& hash) {
  if (hash.size() != 64) return false;
  for (char c : hash) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

std::string ModuleStore::content_hash(std::span<const std::uint8_t> image) { return rpc::sha256_hex(image); }

std::string ModuleStore::put(const std::string& hash, std::span<const std::uint8_t> image) {
  if (!valid_hash(hash)) return "malformed module hash '" + hash.substr(0, 80) + "' (expected 64 hex digits)";
  if (image.empty()) return "empty module image";
  if (image.size() > max_bytes_) {
    return "module of " + std::to_string(image.size()) + " bytes exceeds the store's " + std::to_string(max_bytes_) +
           "-byte limit";
  }
  if (modules_.contains(hash)) {
    fd(hash);
    return {};
  }
  int memfd = ::memfd_create(("kestrel-" + hash.substr(0, 16)).c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (memfd < 0) return std::string("memfd_create failed: ") + std::strerror(errno);
  std::size_t written = 0;
  while (written < image.size()) {
    ssize_t n = ::write(memfd, image.data() + written, image.size() - written);
    if (n < 0) {
      if (errno == EINTR) continue;
      std::string error = std::string("writing module failed: ") + std::strerror(errno);
      ::close(memfd);
      return error;
    }
    written += static_cast<std::size_t>(n);
  }
  // Sealed: nothing can change a module after it is stored.
  ::fcntl(memfd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL);
  while (!modules_.empty() && (bytes_ + image.size() > max_bytes_ || modules_.size() >= max_modules_)) evict_one();
  lru_.push_front(hash);
  modules_[hash] = Entry{memfd, image.size(), lru_.begin()};
  bytes_ += image.size();
  return {};
}

int ModuleStore::fd(const std::string& hash) {
  auto it = modules_.find(hash);
  if (it == modules_.end()) return -1;
  lru_.splice(lru_.begin(), lru_, it->second.lru);
  return it->second.fd;
}

void ModuleStore::evict_one() {
  const std::string victim = lru_.back();
  auto it = modules_.find(victim);
  log::debug("device", "evicting module ", victim.substr(0, 12));
  ::close(it->second.fd);
  bytes_ -= it->second.bytes;
  modules_.erase(it);
  lru_.pop_back();
}

}  // namespace kestrel::device
