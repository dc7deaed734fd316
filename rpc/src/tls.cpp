// TLS contexts (OpenSSL) and the transport set-up of a connection before its handshake.
#include "kestrel/rpc/tls.h"

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <sodium.h>

#include "kestrel/base/log.h"
#include "kestrel/rpc/errors.h"
#include "kestrel/rpc/messages.h"
#include "tls_stream.h"

namespace kestrel::rpc {
namespace {

// The first byte of a TLS record carrying a handshake message. A frame header is a
// little-endian length that is a multiple of 8, so its first byte never is 0x16.
constexpr std::uint8_t kTlsHandshakeRecord = 0x16;

std::string openssl_reason() {
  unsigned long code = ERR_get_error();
  ERR_clear_error();
  if (code == 0) return "unknown OpenSSL error";
  std::array<char, 256> text{};
  ERR_error_string_n(code, text.data(), text.size());
  return text.data();
}

std::string hex_fingerprint(X509* cert) {
  std::array<unsigned char, EVP_MAX_MD_SIZE> md{};
  unsigned int length = 0;
  if (X509_digest(cert, EVP_sha256(), md.data(), &length) != 1) return "?";
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned int i = 0; i < length; ++i) {
    if (i) out += ':';
    out += kHex[md[i] >> 4];
    out += kHex[md[i] & 15];
  }
  return out;
}

void require_tls13(asio::ssl::context& ctx) {
  SSL_CTX_set_min_proto_version(ctx.native_handle(), TLS1_3_VERSION);
  SSL_CTX_set_options(ctx.native_handle(), SSL_OP_NO_TICKET | SSL_OP_NO_COMPRESSION);
}

// A self-signed EC P-256 certificate for `CN=kestrel-tracker`, valid ten years.
void use_generated_certificate(asio::ssl::context& ctx) {
  std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)> key(EVP_EC_gen("P-256"), &EVP_PKEY_free);
  std::unique_ptr<X509, decltype(&X509_free)> cert(X509_new(), &X509_free);
  if (!key || !cert) throw RpcError(ErrorCode::bad_request, str("cannot generate a TLS key: ", openssl_reason()));
  std::uint64_t serial = 0;
  randombytes_buf(&serial, sizeof serial);
  bool ok = X509_set_version(cert.get(), 2) == 1 &&
            ASN1_INTEGER_set_uint64(X509_get_serialNumber(cert.get()), serial >> 1) == 1 &&
            X509_gmtime_adj(X509_getm_notBefore(cert.get()), -3600) != nullptr &&
            X509_gmtime_adj(X509_getm_notAfter(cert.get()), 10L * 365 * 24 * 3600) != nullptr &&
            X509_set_pubkey(cert.get(), key.get()) == 1;
  X509_NAME* name = X509_get_subject_name(cert.get());
  ok = ok &&
       X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                                  reinterpret_cast<const unsigned char*>("kestrel-tracker"), -1, -1, 0) == 1 &&
       X509_set_issuer_name(cert.get(), name) == 1 && X509_sign(cert.get(), key.get(), EVP_sha256()) > 0 &&
       SSL_CTX_use_certificate(ctx.native_handle(), cert.get()) == 1 &&
       SSL_CTX_use_PrivateKey(ctx.native_handle(), key.get()) == 1;
  if (!ok) throw RpcError(ErrorCode::bad_request, str("cannot generate a TLS certificate: ", openssl_reason()));
}

// Cancels a socket's operations when a deadline passes, unless disarmed first.
class Deadline {
 public:
  Deadline(asio::any_io_executor executor, std::chrono::milliseconds timeout, tcp::socket* socket)
      : state_(std::make_shared<State>(executor)) {
    state_->socket = socket;
    state_->timer.expires_after(timeout);
    state_->timer.async_wait([state = state_](std::error_code ec) {
      if (ec || state->disarmed) return;
      state->expired = true;
      std::error_code ignored;
      state->socket->cancel(ignored);
    });
  }
  ~Deadline() { disarm(); }
  Deadline(const Deadline&) = delete;
  Deadline& operator=(const Deadline&) = delete;
  void watch(tcp::socket* socket) { state_->socket = socket; }
  void disarm() {
    state_->disarmed = true;
    state_->timer.cancel();
  }
  bool expired() const { return state_->expired; }

 private:
  struct State {
    explicit State(asio::any_io_executor ex) : timer(ex) {}
    asio::steady_timer timer;
    tcp::socket* socket = nullptr;
    bool disarmed = false;
    bool expired = false;
  };
  std::shared_ptr<State> state_;
};

std::string peer_of(const tcp::socket& socket) {
  std::error_code ec;
  auto remote = socket.remote_endpoint(ec);
  return ec ? std::string("?") : str(remote.address().to_string(), ":", remote.port());
}

bool is_ssl_reason(const std::error_code& ec, int reason) {
  return ec.category() == asio::error::get_ssl_category() && ERR_GET_REASON(static_cast<unsigned long>(ec.value())) == reason;
}

}  // namespace

struct TlsContext::Impl {
  explicit Impl(asio::ssl::context::method method) : ctx(method) {}
  asio::ssl::context ctx;
  bool server = false;
  bool verifies = false;
  bool generated = false;
  std::string fingerprint;
};

TlsContext::TlsContext(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
TlsContext::~TlsContext() = default;
bool TlsContext::is_server() const { return impl_->server; }
bool TlsContext::verifies_peer() const { return impl_->verifies; }
const std::string& TlsContext::fingerprint() const { return impl_->fingerprint; }
bool TlsContext::generated_certificate() const { return impl_->generated; }
asio::ssl::context& TlsContext::native() const { return impl_->ctx; }

std::shared_ptr<const TlsContext> TlsContext::server(const std::string& cert_file, const std::string& key_file) {
  auto impl = std::make_unique<Impl>(asio::ssl::context::tls_server);
  impl->server = true;
  require_tls13(impl->ctx);
  SSL_CTX_set_num_tickets(impl->ctx.native_handle(), 0);  // connections are long-lived: no resumption
  if (cert_file.empty() != key_file.empty()) {
    throw RpcError(ErrorCode::bad_request, "--tls-cert and --tls-key go together: give both or neither");
  }
  if (cert_file.empty()) {
    use_generated_certificate(impl->ctx);
    impl->generated = true;
  } else {
    ERR_clear_error();
    if (SSL_CTX_use_certificate_chain_file(impl->ctx.native_handle(), cert_file.c_str()) != 1) {
      throw RpcError(ErrorCode::bad_request,
                     str("cannot use TLS certificate '", cert_file, "' (expected PEM): ", openssl_reason()));
    }
    if (SSL_CTX_use_PrivateKey_file(impl->ctx.native_handle(), key_file.c_str(), SSL_FILETYPE_PEM) != 1) {
      throw RpcError(ErrorCode::bad_request,
                     str("cannot use TLS key '", key_file, "' (expected PEM, unencrypted): ", openssl_reason()));
    }
    if (SSL_CTX_check_private_key(impl->ctx.native_handle()) != 1) {
      throw RpcError(ErrorCode::bad_request,
                     str("TLS key '", key_file, "' does not belong to certificate '", cert_file, "'"));
    }
  }
  impl->fingerprint = hex_fingerprint(SSL_CTX_get0_certificate(impl->ctx.native_handle()));
  return std::shared_ptr<const TlsContext>(new TlsContext(std::move(impl)));
}

std::shared_ptr<const TlsContext> TlsContext::client(const std::string& ca_file) {
  auto impl = std::make_unique<Impl>(asio::ssl::context::tls_client);
  require_tls13(impl->ctx);
  if (ca_file.empty()) {
    impl->ctx.set_verify_mode(asio::ssl::verify_none);
  } else {
    ERR_clear_error();
    if (SSL_CTX_load_verify_locations(impl->ctx.native_handle(), ca_file.c_str(), nullptr) != 1) {
      throw RpcError(ErrorCode::bad_request,
                     str("cannot use --tls-ca '", ca_file, "' (expected PEM certificates): ", openssl_reason()));
    }
    impl->ctx.set_verify_mode(asio::ssl::verify_peer);
    impl->verifies = true;
  }
  return std::shared_ptr<const TlsContext>(new TlsContext(std::move(impl)));
}

std::shared_ptr<const TlsContext> peer_tls_context(const PeerTls& tls, bool has_token) {
  if (tls.disabled || (!has_token && tls.ca_file.empty())) return nullptr;
  return TlsContext::client(tls.ca_file);
}

awaitable<std::shared_ptr<Connection>> accept_transport(tcp::socket socket, std::shared_ptr<const TlsContext> tls,
                                                        ConnectionOptions options, std::chrono::milliseconds timeout) {
  const std::string peer = peer_of(socket);
  Deadline deadline(socket.get_executor(), timeout, &socket);
  std::array<std::uint8_t, 1> first{};
  auto [ec, n] = co_await socket.async_receive(asio::buffer(first), tcp::socket::message_peek, use_nothrow);
  if (ec || n == 0) {
    if (deadline.expired()) throw RpcError(ErrorCode::timeout, str("no bytes within ", timeout.count(), " ms"));
    throw RpcError(ErrorCode::connection_lost, "closed before the handshake");
  }
  const bool speaks_tls = first[0] == kTlsHandshakeRecord;
  if (!tls) {
    if (speaks_tls) {
      std::error_code ignored;
      socket.close(ignored);
      throw RpcError(ErrorCode::protocol_error,
                     "the peer speaks TLS but this tracker runs with --no-tls (or without a token): pass --no-tls "
                     "to the peer, or drop --no-tls here");
    }
    deadline.disarm();
    co_return Connection::create(std::move(socket), options);
  }
  if (!speaks_tls) {
    deadline.disarm();
    auto conn = Connection::create(std::move(socket), options);
    conn->send(failure_frame(ErrorCode::auth_failed,
                             "the tracker requires TLS: drop --no-tls if given, and pass --token-file (TLS is on by "
                             "default with a token)"));
    conn->close_after_flush();
    throw RpcError(ErrorCode::auth_failed, "the peer speaks plain frames (--no-tls?) but this tracker requires TLS");
  }
  auto stream = std::make_unique<TlsStream>(std::move(socket), tls);
  deadline.watch(&stream->stream.next_layer());
  auto [hec] = co_await stream->stream.async_handshake(asio::ssl::stream_base::server, use_nothrow);
  if (hec) {
    if (deadline.expired()) {
      throw RpcError(ErrorCode::timeout, str("TLS handshake not completed within ", timeout.count(), " ms"));
    }
    throw RpcError(ErrorCode::protocol_error, str("TLS handshake failed: ", hec.message()));
  }
  deadline.disarm();
  co_return Connection::create(std::move(stream), options);
}

awaitable<std::shared_ptr<Connection>> connect_transport(tcp::socket socket, std::shared_ptr<const TlsContext> tls,
                                                         ConnectionOptions options, std::chrono::milliseconds timeout,
                                                         std::string tracker) {
  if (!tls) co_return Connection::create(std::move(socket), options);
  auto stream = std::make_unique<TlsStream>(std::move(socket), tls);
  Deadline deadline(stream->stream.get_executor(), timeout, &stream->stream.next_layer());
  auto [ec] = co_await stream->stream.async_handshake(asio::ssl::stream_base::client, use_nothrow);
  if (ec) {
    if (deadline.expired()) {
      throw RpcError(ErrorCode::timeout,
                     str("TLS handshake with the tracker at ", tracker, " not completed within ", timeout.count(), " ms"));
    }
    if (is_ssl_reason(ec, SSL_R_CERTIFICATE_VERIFY_FAILED)) {
      long verify = SSL_get_verify_result(stream->stream.native_handle());
      throw RpcError(ErrorCode::auth_failed,
                     str("the tracker at ", tracker, " presented a certificate that --tls-ca does not vouch for (",
                         X509_verify_cert_error_string(verify), "); refusing"));
    }
    // A tracker without TLS answers a ClientHello with a frame (or closes): OpenSSL then
    // reports a record-layer error. Retried like any other transient failure.
    throw RpcError(ErrorCode::protocol_error,
                   str("TLS handshake with the tracker at ", tracker, " failed (", ec.message(),
                       "); if the tracker runs with --no-tls, pass --no-tls here too"));
  }
  deadline.disarm();
  co_return Connection::create(std::move(stream), options);
}

}  // namespace kestrel::rpc
