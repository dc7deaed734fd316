// The few primitives the wire needs, from the build's crypto library: libsodium beside
// OpenSSL (crypto_sodium.cpp: the host, the tracker), mbedTLS on the boards
// (crypto_mbedtls.cpp), so a board runtime carries one crypto library, not two.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <span>

namespace kestrel::rpc::crypto {

using Digest = std::array<std::uint8_t, 32>;

// HMAC-SHA256 under `key` over the concatenation of `parts`.
Digest hmac_sha256(std::span<const std::uint8_t> key, std::initializer_list<std::span<const std::uint8_t>> parts);
Digest sha256(std::span<const std::uint8_t> bytes);
// Fills `out` from the operating system's CSPRNG; throws std::runtime_error if it fails.
void random_bytes(std::span<std::uint8_t> out);
// Compares in time independent of the contents.
bool equal_32(const std::uint8_t* a, const std::uint8_t* b);
// Zeroes memory in a way the compiler keeps.
void wipe(void* data, std::size_t size);

}  // namespace kestrel::rpc::crypto
