// HMAC-SHA256 proofs and token files.
#include <catch2/catch.hpp>

#include <sys/stat.h>

#include <cstdio>
#include <fstream>

#include "kestrel/rpc/auth.h"
#include "kestrel/rpc/errors.h"

using namespace kestrel;
using namespace kestrel::rpc;
namespace wire = kestrel::wire;

namespace {
std::string hex(std::span<const std::uint8_t> bytes) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (auto b : bytes) {
    out += digits[b >> 4];
    out += digits[b & 15];
  }
  return out;
}
std::span<const std::uint8_t> bytes_of(std::string_view s) {
  return {reinterpret_cast<const std::uint8_t*>(s.data()), s.size()};
}
std::string write_temp(const std::string& content, mode_t mode = 0600) {
  char path[] = "/tmp/kestrel-token-XXXXXX";
  int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  ::write(fd, content.data(), content.size());
  ::close(fd);
  ::chmod(path, mode);
  return path;
}
}  // namespace

TEST_CASE("HMAC-SHA256 matches the RFC 4231 test vectors", "[auth]") {
  // Test case 2.
  CHECK(hex(hmac_sha256(bytes_of("Jefe"), bytes_of("what do ya want for nothing?"))) ==
        "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  // Test case 6: a key longer than the block size.
  std::string key(131, '\xaa');
  CHECK(hex(hmac_sha256(bytes_of(key), bytes_of("Test Using Larger Than Block-Size Key - Hash Key First"))) ==
        "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
}

TEST_CASE("proofs bind the label, role and both nonces in order", "[auth]") {
  Token token("correct horse battery staple");
  Nonce a = random_nonce();
  Nonce b = random_nonce();
  CHECK(a != b);
  Mac peer = compute_mac(token, kPeerProofLabel, wire::Role::DEVICE, a, b);
  CHECK(mac_matches(peer, peer));
  CHECK_FALSE(mac_matches(peer, compute_mac(token, kTrackerProofLabel, wire::Role::DEVICE, a, b)));
  CHECK_FALSE(mac_matches(peer, compute_mac(token, kPeerProofLabel, wire::Role::CLIENT, a, b)));
  CHECK_FALSE(mac_matches(peer, compute_mac(token, kPeerProofLabel, wire::Role::DEVICE, b, a)));
  CHECK_FALSE(mac_matches(peer, compute_mac(Token("another token of some length"), kPeerProofLabel,
                                            wire::Role::DEVICE, a, b)));
  std::vector<std::uint8_t> short_mac(peer.begin(), peer.begin() + 16);
  CHECK_FALSE(mac_matches(peer, short_mac));
  CHECK_FALSE(mac_matches(peer, {}));
}

TEST_CASE("token files are trimmed and checked", "[auth]") {
  std::string good = write_temp("  s3cret-token-0123456789\n");
  Token token = Token::from_file(good);
  CHECK(std::string(reinterpret_cast<const char*>(token.bytes().data()), token.bytes().size()) ==
        "s3cret-token-0123456789");
  std::remove(good.c_str());

  std::string short_token = write_temp("short\n");
  try {
    Token::from_file(short_token);
    FAIL("a short token was accepted");
  } catch (const RpcError& e) {
    CHECK(e.code() == ErrorCode::bad_request);
    CHECK_THAT(e.what(), Catch::Contains("at least 16"));
  }
  std::remove(short_token.c_str());

  try {
    Token::from_file("/nonexistent/kestrel/token");
    FAIL("a missing token file was accepted");
  } catch (const RpcError& e) {
    CHECK_THAT(e.what(), Catch::Contains("cannot read token file '/nonexistent/kestrel/token'"));
  }
}
