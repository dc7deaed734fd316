// Shared-token authentication by challenge-response. Both sides prove they know the
// token by an HMAC-SHA256 over both nonces; the token never crosses the wire.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kestrel/wire/tracker.capnp.h"

namespace kestrel::rpc {

inline constexpr std::size_t kNonceBytes = 32;
inline constexpr std::size_t kMacBytes = 32;
using Nonce = std::array<std::uint8_t, kNonceBytes>;
using Mac = std::array<std::uint8_t, kMacBytes>;

// A shared secret. Copyable; wiped from memory when destroyed.
class Token {
 public:
  explicit Token(std::string secret);
  ~Token();
  Token(const Token&) = default;
  Token& operator=(const Token&) = default;

  // Reads a token file: the secret is its content with surrounding whitespace
  // removed. Throws RpcError(bad_request) naming the file when it cannot be read, is
  // empty, or is shorter than 16 characters. Warns when others may read it.
  static Token from_file(const std::string& path);

  std::span<const std::uint8_t> bytes() const {
    return {reinterpret_cast<const std::uint8_t*>(secret_.data()), secret_.size()};
  }

 private:
  std::string secret_;
};

// Fresh random nonce from the OS CSPRNG (libsodium).
Nonce random_nonce();

// HMAC-SHA256(token, label | role | first | second | binding). `label` separates the
// peer's and the tracker's proofs so one can never be replayed as the other; `binding`
// is the TLS exporter value of the connection (empty without TLS), so a proof is only
// good on the TLS session it was made for.
Mac compute_mac(const Token& token, std::string_view label, wire::Role role,
                std::span<const std::uint8_t> first, std::span<const std::uint8_t> second,
                std::span<const std::uint8_t> binding = {});

// Constant-time comparison of a received MAC with the expected one; false when the
// received one has the wrong length.
bool mac_matches(const Mac& expected, std::span<const std::uint8_t> received);

inline constexpr std::string_view kPeerProofLabel = "kestrel-auth-v1 peer";
inline constexpr std::string_view kTrackerProofLabel = "kestrel-auth-v1 tracker";
// Frame MAC keys without TLS: compute_mac(token, label, role, nonceP, nonceT).
inline constexpr std::string_view kPeerFrameKeyLabel = "kestrel-frame-v1 peer to tracker";
inline constexpr std::string_view kTrackerFrameKeyLabel = "kestrel-frame-v1 tracker to peer";
// The direction byte inside each frame MAC.
inline constexpr std::uint8_t kPeerToTracker = 'P';
inline constexpr std::uint8_t kTrackerToPeer = 'T';

// Plain HMAC-SHA256, exposed for the test vectors.
Mac hmac_sha256(std::span<const std::uint8_t> key, std::span<const std::uint8_t> message);

}  // namespace kestrel::rpc
