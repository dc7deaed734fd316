// The TLS stream a Connection may own (private to kestrel_rpc). One class, implemented
// by the build's TLS library: tls_openssl.cpp (OpenSSL through Asio's SSL stream: the
// host, the tracker) or tls_mbedtls.cpp (mbedTLS over the socket: board runtimes,
// client side only). Neither library's headers leak out of those files.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <system_error>
#include <tuple>
#include <vector>

#include "kestrel/rpc/asio.h"
#include "kestrel/rpc/tls.h"

namespace kestrel::rpc {

class TlsStream {
 public:
  // Takes the connected socket; the context decides the side (tracker: server) and
  // keeps what the stream needs alive.
  TlsStream(tcp::socket socket, std::shared_ptr<const TlsContext> context);
  ~TlsStream();
  TlsStream(const TlsStream&) = delete;
  TlsStream& operator=(const TlsStream&) = delete;

  tcp::socket& socket();
  // Runs the TLS handshake. An error code on failure (the socket's, or the library's);
  // verify_failure() then says whether the peer's certificate was refused.
  awaitable<std::error_code> handshake();
  // After a failed handshake: why the peer's certificate was refused, or empty when it
  // was not the certificate.
  std::string verify_failure() const;
  // Reads exactly `buffer.size()` bytes (or fewer with an error). A peer that ends the
  // stream, with or without TLS's close_notify, gives asio::error::eof. One read and one
  // write may be in flight at once.
  awaitable<std::tuple<std::error_code, std::size_t>> read(asio::mutable_buffer buffer);
  // Writes all of `buffer` (or fewer with an error).
  awaitable<std::tuple<std::error_code, std::size_t>> write(asio::const_buffer buffer);
  // 32 bytes of exported keying material (RFC 5705 / RFC 8446 7.5, no context) under
  // `label`; empty if the library cannot export it.
  std::vector<std::uint8_t> exporter(std::string_view label) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kestrel::rpc
