// SHA-256 and hex (libsodium).
#include "kestrel/rpc/sha256.h"

#include <sodium.h>

namespace kestrel::rpc {

std::string to_hex(std::span<const std::uint8_t> bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (std::uint8_t b : bytes) {
    out += kDigits[b >> 4];
    out += kDigits[b & 15];
  }
  return out;
}

std::string sha256_hex(std::span<const std::uint8_t> bytes) {
  std::uint8_t digest[crypto_hash_sha256_BYTES];
  crypto_hash_sha256(digest, bytes.data(), bytes.size());
  return to_hex(digest);
}

}  // namespace kestrel::rpc
