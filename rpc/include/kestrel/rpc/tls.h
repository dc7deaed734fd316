// TLS for tracker connections: the contexts of the tracker and of its peers, and the
// set-up of a connection's transport (TLS or plain) before the handshake. Host builds
// use OpenSSL through Asio's SSL stream (TLS 1.3; the tracker also accepts TLS 1.2 with
// ECDHE, AEAD and the extended master secret, for boards); board runtimes built on
// mbedTLS (KESTREL_TLS_LIBRARY) are TLS 1.2 clients only. Authentication stays the token
// handshake, bound to the TLS session by an exported key (kTokenBindingLabel), so a
// proxy that terminates TLS on each side cannot complete it even where peers do not
// check the certificate.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <string_view>

#include "kestrel/rpc/asio.h"
#include "kestrel/rpc/connection.h"

namespace asio::ssl {
class context;
}

namespace kestrel::rpc {

// The TLS exporter label of the token binding (RFC 8446 section 7.5).
inline constexpr std::string_view kTokenBindingLabel = "EXPORTER-kestrel-token-binding";

class TlsContext {
 public:
  // Tracker side. With a certificate and key (PEM files) it presents them; with both
  // empty it generates a self-signed EC P-256 certificate in memory. Throws
  // RpcError(bad_request) naming the file and OpenSSL's reason when one cannot be used,
  // and always in an mbedTLS build (client only).
  static std::shared_ptr<const TlsContext> server(const std::string& cert_file, const std::string& key_file);
  // Peer side. With a CA file (PEM: the tracker's certificate itself, or the CA that
  // signed it) the tracker's certificate must chain to it (its name is not checked);
  // with an empty path the certificate is not checked (the token binding still stops a
  // proxy). Throws RpcError(bad_request) when the file cannot be used.
  static std::shared_ptr<const TlsContext> client(const std::string& ca_file);
  ~TlsContext();
  TlsContext(const TlsContext&) = delete;
  TlsContext& operator=(const TlsContext&) = delete;

  bool is_server() const;
  bool verifies_peer() const;
  // Tracker side: SHA-256 of its certificate (DER), as colon-separated hex.
  const std::string& fingerprint() const;
  bool generated_certificate() const;

  // OpenSSL builds only (the tracker's HTTPS server shares the context).
  asio::ssl::context& native() const;

 private:
  friend class TlsStream;
  struct Impl;
  explicit TlsContext(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// A peer's TLS settings (kestrel-device, kestrel tune/query/...).
struct PeerTls {
  bool disabled = false;  // --no-tls: plain frames, with frame MACs when a token is set
  std::string ca_file;    // --tls-ca: PEM the tracker's certificate must chain to
};
// The context a peer connects with: TLS whenever it has a token or a CA file, unless
// disabled; null for plain frames. Throws like TlsContext::client.
std::shared_ptr<const TlsContext> peer_tls_context(const PeerTls& tls, bool has_token);

// Tracker side, right after accept: reads nothing but peeks at the first byte the peer
// sends (a TLS record starts with 0x16, which no frame header can). With `tls` set it
// runs the TLS handshake; a peer speaking plain frames gets a failure frame ("the
// tracker requires TLS: drop --no-tls") and RpcError(auth_failed) is thrown. Without
// `tls`, a peer speaking TLS is closed and RpcError(protocol_error) is thrown ("the peer
// speaks TLS but this tracker runs with --no-tls"). Everything must happen within
// `timeout` (RpcError(timeout)).
awaitable<std::shared_ptr<Connection>> accept_transport(tcp::socket socket, std::shared_ptr<const TlsContext> tls,
                                                        ConnectionOptions options, std::chrono::milliseconds timeout);

// Peer side, right after connect: with `tls` set runs the TLS handshake as a client
// (RpcError(auth_failed) when the certificate fails the check or the tracker does not
// speak TLS: both are settings to change; protocol_error or timeout otherwise), else
// wraps the plain socket. `tracker` names the tracker in messages.
awaitable<std::shared_ptr<Connection>> connect_transport(tcp::socket socket, std::shared_ptr<const TlsContext> tls,
                                                         ConnectionOptions options, std::chrono::milliseconds timeout,
                                                         std::string tracker);

}  // namespace kestrel::rpc
