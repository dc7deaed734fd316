// The wire's primitives on mbedTLS and the kernel's random numbers (board runtimes).
#include <mbedtls/md.h>
#include <mbedtls/platform_util.h>
#include <mbedtls/sha256.h>
#include <sys/random.h>

#include <cerrno>
#include <stdexcept>

#include "crypto.h"

namespace kestrel::rpc::crypto {

Digest hmac_sha256(std::span<const std::uint8_t> key, std::initializer_list<std::span<const std::uint8_t>> parts) {
  mbedtls_md_context_t ctx;
  mbedtls_md_init(&ctx);
  Digest mac{};
  bool ok = mbedtls_md_setup(&ctx, mbedtls_md_info_from_type(MBEDTLS_MD_SHA256), 1) == 0 &&
            mbedtls_md_hmac_starts(&ctx, key.data(), key.size()) == 0;
  for (auto part : parts) ok = ok && mbedtls_md_hmac_update(&ctx, part.data(), part.size()) == 0;
  ok = ok && mbedtls_md_hmac_finish(&ctx, mac.data()) == 0;
  mbedtls_md_free(&ctx);  // zeroes the key schedule
  if (!ok) throw std::runtime_error("HMAC-SHA256 failed (mbedTLS)");
  return mac;
}

Digest sha256(std::span<const std::uint8_t> bytes) {
  Digest digest{};
  if (mbedtls_sha256_ret(bytes.data(), bytes.size(), digest.data(), 0) != 0) {
    throw std::runtime_error("SHA-256 failed (mbedTLS)");
  }
  return digest;
}

void random_bytes(std::span<std::uint8_t> out) {
  std::size_t got = 0;
  while (got < out.size()) {
    ssize_t n = ::getrandom(out.data() + got, out.size() - got, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw std::runtime_error("getrandom failed: no random numbers from the kernel");
    }
    got += static_cast<std::size_t>(n);
  }
}

bool equal_32(const std::uint8_t* a, const std::uint8_t* b) {
  volatile std::uint8_t diff = 0;
  for (int i = 0; i < 32; ++i) diff = diff | static_cast<std::uint8_t>(a[i] ^ b[i]);
  return diff == 0;
}

void wipe(void* data, std::size_t size) { mbedtls_platform_zeroize(data, size); }

}  // namespace kestrel::rpc::crypto
