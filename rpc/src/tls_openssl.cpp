// TLS on OpenSSL through Asio's SSL stream (host builds: the tracker, the kestrel
// commands, and kestrel-device where it is built with the host): the contexts and the
// stream of tls_stream.h.
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <asio/ssl.hpp>

#include "crypto.h"
#include "kestrel/base/log.h"
#include "kestrel/rpc/errors.h"
#include "kestrel/rpc/tls.h"
#include "tls_stream.h"

namespace kestrel::rpc {
namespace {

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

// Peers (OpenSSL on both ends) speak TLS 1.3 only.
void require_tls13(asio::ssl::context& ctx) {
  SSL_CTX_set_min_proto_version(ctx.native_handle(), TLS1_3_VERSION);
  SSL_CTX_set_options(ctx.native_handle(), SSL_OP_NO_TICKET | SSL_OP_NO_COMPRESSION);
}

// The tracker speaks TLS 1.3, and TLS 1.2 to the board runtimes built on mbedTLS 2.28
// (which has no TLS 1.3): then only ephemeral ECDH with an AEAD cipher (forward secrecy,
// no CBC), no renegotiation, and the extended master secret (RFC 7627, checked after the
// handshake), which the token binding's exporter relies on.
void accept_tls12_for_boards(asio::ssl::context& ctx) {
  SSL_CTX_set_min_proto_version(ctx.native_handle(), TLS1_2_VERSION);
  SSL_CTX_set_options(ctx.native_handle(), SSL_OP_NO_TICKET | SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION);
  SSL_CTX_set_cipher_list(ctx.native_handle(),
                          "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-ECDSA-CHACHA20-POLY1305:"
                          "ECDHE-RSA-AES128-GCM-SHA256:ECDHE-RSA-AES256-GCM-SHA384:ECDHE-RSA-CHACHA20-POLY1305");
}

// A self-signed EC P-256 certificate for `CN=kestrel-tracker`, valid ten years.
void use_generated_certificate(asio::ssl::context& ctx) {
  std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)> key(EVP_EC_gen("P-256"), &EVP_PKEY_free);
  std::unique_ptr<X509, decltype(&X509_free)> cert(X509_new(), &X509_free);
  if (!key || !cert) throw RpcError(ErrorCode::bad_request, str("cannot generate a TLS key: ", openssl_reason()));
  std::uint64_t serial = 0;
  crypto::random_bytes({reinterpret_cast<std::uint8_t*>(&serial), sizeof serial});
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
  accept_tls12_for_boards(impl->ctx);
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

struct TlsStream::Impl {
  Impl(tcp::socket socket, std::shared_ptr<const TlsContext> ctx)
      : context(std::move(ctx)), stream(std::move(socket), context->native()) {}
  std::shared_ptr<const TlsContext> context;  // keeps the SSL_CTX alive
  asio::ssl::stream<tcp::socket> stream;
  bool verify_failed = false;
};

TlsStream::TlsStream(tcp::socket socket, std::shared_ptr<const TlsContext> context)
    : impl_(std::make_unique<Impl>(std::move(socket), std::move(context))) {}
TlsStream::~TlsStream() = default;

tcp::socket& TlsStream::socket() { return impl_->stream.next_layer(); }

awaitable<std::error_code> TlsStream::handshake() {
  const bool server = impl_->context->is_server();
  auto [ec] = co_await impl_->stream.async_handshake(server ? asio::ssl::stream_base::server
                                                            : asio::ssl::stream_base::client,
                                                     use_nothrow);
  if (ec) {
    impl_->verify_failed = is_ssl_reason(ec, SSL_R_CERTIFICATE_VERIFY_FAILED);
    co_return ec;
  }
  SSL* ssl = impl_->stream.native_handle();
  if (server && SSL_version(ssl) < TLS1_3_VERSION && SSL_get_extms_support(ssl) != 1) {
    log::warn("tls", "a TLS 1.2 peer without the extended master secret (RFC 7627): refused");
    co_return std::make_error_code(std::errc::protocol_not_supported);
  }
  co_return std::error_code();
}

std::string TlsStream::verify_failure() const {
  if (!impl_->verify_failed) return {};
  return X509_verify_cert_error_string(SSL_get_verify_result(impl_->stream.native_handle()));
}

awaitable<std::tuple<std::error_code, std::size_t>> TlsStream::read(asio::mutable_buffer buffer) {
  auto [ec, n] = co_await asio::async_read(impl_->stream, buffer, use_nothrow);
  if (ec == asio::ssl::error::stream_truncated) ec = asio::error::eof;
  co_return std::tuple(ec, n);
}

awaitable<std::tuple<std::error_code, std::size_t>> TlsStream::write(asio::const_buffer buffer) {
  co_return co_await asio::async_write(impl_->stream, buffer, use_nothrow);
}

std::vector<std::uint8_t> TlsStream::exporter(std::string_view label) const {
  std::vector<std::uint8_t> out(32);
  std::string label_text(label);
  if (SSL_export_keying_material(impl_->stream.native_handle(), out.data(), out.size(), label_text.c_str(),
                                 label_text.size(), nullptr, 0, 0) != 1) {
    return {};
  }
  return out;
}

}  // namespace kestrel::rpc
