// The wire's primitives on libsodium (host builds, beside OpenSSL).
#include <sodium.h>

#include <stdexcept>

#include "crypto.h"

namespace kestrel::rpc::crypto {
namespace {
void ensure_sodium() {
  static const bool ok = sodium_init() >= 0;
  if (!ok) throw std::runtime_error("libsodium failed to initialise");
}
}  // namespace

Digest hmac_sha256(std::span<const std::uint8_t> key, std::initializer_list<std::span<const std::uint8_t>> parts) {
  ensure_sodium();
  crypto_auth_hmacsha256_state state;
  crypto_auth_hmacsha256_init(&state, key.data(), key.size());
  for (auto part : parts) crypto_auth_hmacsha256_update(&state, part.data(), part.size());
  Digest mac{};
  crypto_auth_hmacsha256_final(&state, mac.data());
  sodium_memzero(&state, sizeof state);
  return mac;
}

Digest sha256(std::span<const std::uint8_t> bytes) {
  Digest digest{};
  crypto_hash_sha256(digest.data(), bytes.data(), bytes.size());
  return digest;
}

void random_bytes(std::span<std::uint8_t> out) {
  ensure_sodium();
  randombytes_buf(out.data(), out.size());
}

bool equal_32(const std::uint8_t* a, const std::uint8_t* b) { return crypto_verify_32(a, b) == 0; }

void wipe(void* data, std::size_t size) { sodium_memzero(data, size); }

}  // namespace kestrel::rpc::crypto
