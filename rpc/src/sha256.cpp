// SHA-256 and hex (crypto.h: libsodium or mbedTLS).
#include "kestrel/rpc/sha256.h"

#include "crypto.h"

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
  return to_hex(crypto::sha256(bytes));
}

}  // namespace kestrel::rpc
