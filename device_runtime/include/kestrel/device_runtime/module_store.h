// Kernel modules received from the host, kept in sealed memfds by content hash (the
// SHA-256 of the image: content_hash) and loaded with dlopen("/proc/self/fd/N") without
// ever touching the disk. Bounded: the least recently used modules are dropped first.
// The session server keeps one store per lease and checks each upload's hash.
#pragma once

#include <cstdint>
#include <list>
#include <map>
#include <span>
#include <string>

namespace kestrel::device {

class ModuleStore {
 public:
  explicit ModuleStore(std::size_t max_bytes = std::size_t(512) << 20, std::size_t max_modules = 4096);
  ~ModuleStore();
  ModuleStore(const ModuleStore&) = delete;
  ModuleStore& operator=(const ModuleStore&) = delete;

  // Stores `image` under `hash` (64 lower-case hex digits). Returns an empty string on
  // success, or why it could not (malformed hash, empty or oversized image, memfd error).
  // Storing a hash that is present again is a no-op.
  std::string put(const std::string& hash, std::span<const std::uint8_t> image);
  // The memfd holding a module, or -1. Marks it recently used. The fd stays valid until
  // the module is evicted by a later put(); forked workers inherit it.
  int fd(const std::string& hash);
  bool contains(const std::string& hash) const { return modules_.contains(hash); }
  std::size_t size() const { return modules_.size(); }
  std::size_t bytes() const { return bytes_; }

  static bool valid_hash(const std::string& hash);
  // The name a module goes by: the hex SHA-256 of its bytes (64 lower-case digits).
  static std::string content_hash(std::span<const std::uint8_t> image);

 private:
  struct Entry {
    int fd = -1;
    std::size_t bytes = 0;
    std::list<std::string>::iterator lru;
  };
  void evict_one();

  std::size_t max_bytes_;
  std::size_t max_modules_;
  std::size_t bytes_ = 0;
  std::map<std::string, Entry> modules_;
  std::list<std::string> lru_;  // front: most recently used
};

}  // namespace kestrel::device
