// Token handling and HMAC-SHA256 proofs (crypto.h: libsodium or mbedTLS).
#include "kestrel/rpc/auth.h"

#include <sys/stat.h>


#include "kestrel/rpc/errors.h"
#include "kestrel/base/file.h"
#include "kestrel/base/log.h"
#include "crypto.h"

namespace kestrel::rpc {

Token::Token(std::string secret) : secret_(std::move(secret)) {}

Token::~Token() {
  if (!secret_.empty()) crypto::wipe(secret_.data(), secret_.size());
}

Token Token::from_file(const std::string& path) {
  auto content = read_file(path, 64 * 1024);
  if (!content) throw RpcError(ErrorCode::bad_request, str("cannot read token file '", path, "'"));
  std::string secret = std::move(*content);
  auto first = secret.find_first_not_of(" \t\r\n");
  auto last = secret.find_last_not_of(" \t\r\n");
  secret = first == std::string::npos ? std::string() : secret.substr(first, last - first + 1);
  if (secret.size() < 16) {
    throw RpcError(ErrorCode::bad_request,
                   str("token file '", path, "' holds ", secret.size(),
                       " characters; use at least 16 (e.g. `head -c 32 /dev/urandom | base64 > ", path, "`)"));
  }
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && (st.st_mode & (S_IRWXG | S_IRWXO)) != 0) {
    log::warn("auth", "token file '", path, "' is readable by others; chmod 600 it");
  }
  return Token(std::move(secret));
}

Nonce random_nonce() {
  Nonce nonce;
  crypto::random_bytes(nonce);
  return nonce;
}

Mac hmac_sha256(std::span<const std::uint8_t> key, std::span<const std::uint8_t> message) {
  return crypto::hmac_sha256(key, {message});
}

Mac compute_mac(const Token& token, std::string_view label, wire::Role role, std::span<const std::uint8_t> first,
                std::span<const std::uint8_t> second, std::span<const std::uint8_t> binding) {
  std::vector<std::uint8_t> message;
  message.reserve(label.size() + 1 + first.size() + second.size() + binding.size());
  message.insert(message.end(), label.begin(), label.end());
  message.push_back(static_cast<std::uint8_t>(role));
  message.insert(message.end(), first.begin(), first.end());
  message.insert(message.end(), second.begin(), second.end());
  message.insert(message.end(), binding.begin(), binding.end());
  return hmac_sha256(token.bytes(), message);
}

bool mac_matches(const Mac& expected, std::span<const std::uint8_t> received) {
  if (received.size() != expected.size()) return false;
  return crypto::equal_32(expected.data(), received.data());
}

}  // namespace kestrel::rpc
