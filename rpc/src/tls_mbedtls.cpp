// TLS on mbedTLS 2.28 (the board runtimes of scripts/build-device.sh): the peer side of
// tls.h and the stream of tls_stream.h, a TLS 1.2 client driven over the Asio socket
// through in-memory buffers. mbedTLS 2.28 has no TLS 1.3, so this side offers TLS 1.2
// with ephemeral ECDH and AEAD ciphers only, no renegotiation and no tickets, and
// requires the extended master secret (RFC 7627), under which the exporter of the token
// binding (RFC 5705) is computed; the tracker (OpenSSL) checks the same from its side.
// A build on mbedTLS cannot be the TLS server: the tracker runs from a host build.
#include <mbedtls/platform_util.h>
#include <mbedtls/ssl.h>
#include <mbedtls/ssl_internal.h>  // handshake->extended_ms, read in the key export callback
#include <mbedtls/x509_crt.h>

#include <array>
#include <cstdio>
#include <cstring>

#include "crypto.h"
#include "kestrel/base/str.h"
#include "kestrel/rpc/errors.h"
#include "kestrel/rpc/tls.h"
#include "tls_stream.h"

namespace kestrel::rpc {
namespace {

const int kCipherSuites[] = {
    MBEDTLS_TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,       MBEDTLS_TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
    MBEDTLS_TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256, MBEDTLS_TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
    MBEDTLS_TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,         MBEDTLS_TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
    0};

// The key exchange groups offered: what the tracker (OpenSSL 3) picks from, nothing weaker.
const mbedtls_ecp_group_id kCurves[] = {MBEDTLS_ECP_DP_CURVE25519, MBEDTLS_ECP_DP_SECP256R1, MBEDTLS_ECP_DP_SECP384R1,
                                        MBEDTLS_ECP_DP_NONE};

// Bytes read from the socket at a time: one TLS record and its header.
constexpr std::size_t kReadChunk = 17 * 1024;

class MbedtlsCategory : public std::error_category {
 public:
  const char* name() const noexcept override { return "mbedtls"; }
  std::string message(int value) const override {
    switch (-value) {
      case MBEDTLS_ERR_SSL_FATAL_ALERT_MESSAGE: return "the peer sent a fatal TLS alert";
      case MBEDTLS_ERR_X509_CERT_VERIFY_FAILED: return "certificate verification failed";
      case MBEDTLS_ERR_SSL_NO_USABLE_CIPHERSUITE: return "no cipher suite in common";
      case MBEDTLS_ERR_SSL_BAD_HS_SERVER_HELLO: return "bad ServerHello (not a TLS 1.2 server with these cipher suites?)";
      case MBEDTLS_ERR_SSL_INVALID_RECORD: return "invalid TLS record";
      case MBEDTLS_ERR_SSL_INVALID_MAC: return "TLS record failed its integrity check";
      default: break;
    }
    std::array<char, 32> text{};
    std::snprintf(text.data(), text.size(), "mbedTLS error -0x%04X", static_cast<unsigned>(value));
    return text.data();
  }
};

std::error_code mbedtls_error(int code) {
  static const MbedtlsCategory category;
  return {-code, category};
}

// The callbacks mbedTLS calls are noexcept and turn a failure into its error code: the
// boards' mbedTLS has no unwind tables (scripts/build-mbedtls.sh), so an exception must
// never travel through its frames.
int random_for_tls(void*, unsigned char* out, std::size_t size) noexcept {
  try {
    crypto::random_bytes({out, size});
    return 0;
  } catch (...) {
    return MBEDTLS_ERR_SSL_INTERNAL_ERROR;
  }
}

}  // namespace

struct TlsContext::Impl {
  Impl() { mbedtls_x509_crt_init(&ca); }
  ~Impl() { mbedtls_x509_crt_free(&ca); }
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;
  mbedtls_x509_crt ca;  // what the tracker's certificate must chain to (--tls-ca)
  bool verifies = false;
  std::string fingerprint;
};

TlsContext::TlsContext(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
TlsContext::~TlsContext() = default;
bool TlsContext::is_server() const { return false; }
bool TlsContext::verifies_peer() const { return impl_->verifies; }
const std::string& TlsContext::fingerprint() const { return impl_->fingerprint; }
bool TlsContext::generated_certificate() const { return false; }

std::shared_ptr<const TlsContext> TlsContext::server(const std::string&, const std::string&) {
  throw RpcError(ErrorCode::bad_request,
                 "this build's TLS (mbedTLS, for boards) is client-only: run the tracker from a host build");
}

std::shared_ptr<const TlsContext> TlsContext::client(const std::string& ca_file) {
  auto impl = std::make_unique<Impl>();
  if (!ca_file.empty()) {
    int ret = mbedtls_x509_crt_parse_file(&impl->ca, ca_file.c_str());
    if (ret < 0 || impl->ca.version == 0) {
      throw RpcError(ErrorCode::bad_request, str("cannot use --tls-ca '", ca_file, "' (expected PEM certificates): ",
                                                 mbedtls_error(ret < 0 ? ret : MBEDTLS_ERR_X509_INVALID_FORMAT).message()));
    }
    impl->verifies = true;
  }
  return std::shared_ptr<const TlsContext>(new TlsContext(std::move(impl)));
}

struct TlsStream::Impl {
  Impl(tcp::socket s, std::shared_ptr<const TlsContext> ctx) : socket(std::move(s)), context(std::move(ctx)) {
    mbedtls_ssl_init(&ssl);
    mbedtls_ssl_config_init(&config);
  }
  ~Impl() {
    mbedtls_ssl_free(&ssl);
    mbedtls_ssl_config_free(&config);
    mbedtls_platform_zeroize(master.data(), master.size());
  }
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;

  // The transport callbacks: ciphertext goes through `in` and `out`, which the
  // coroutines below fill from and drain to the socket.
  // noexcept, as every callback (random_for_tls).
  static int send(void* self, const unsigned char* data, std::size_t size) noexcept {
    auto& out = static_cast<Impl*>(self)->out;
    try {
      out.insert(out.end(), data, data + size);
    } catch (...) {  // std::bad_alloc
      return MBEDTLS_ERR_SSL_ALLOC_FAILED;
    }
    return static_cast<int>(size);
  }
  static int receive(void* self, unsigned char* data, std::size_t size) noexcept {
    auto& s = *static_cast<Impl*>(self);
    std::size_t available = s.in.size() - s.in_used;
    if (available == 0) return MBEDTLS_ERR_SSL_WANT_READ;
    std::size_t n = std::min(available, size);
    std::memcpy(data, s.in.data() + s.in_used, n);
    s.in_used += n;
    return static_cast<int>(n);
  }
  // Called while the keys are derived: keeps what the exporter needs, and whether the
  // extended master secret was negotiated.
  static int export_keys(void* self, const unsigned char* master_secret, const unsigned char*, std::size_t, std::size_t,
                         std::size_t, const unsigned char client_random[32], const unsigned char server_random[32],
                         mbedtls_tls_prf_types prf_type) noexcept {
    auto& s = *static_cast<Impl*>(self);
    std::memcpy(s.master.data(), master_secret, s.master.size());
    std::memcpy(s.randoms.data(), client_random, 32);
    std::memcpy(s.randoms.data() + 32, server_random, 32);
    s.prf = prf_type;
    s.have_keys = true;
    s.extended_master_secret =
        s.ssl.handshake != nullptr && s.ssl.handshake->extended_ms == MBEDTLS_SSL_EXTENDED_MS_ENABLED;
    return 0;
  }

  // Appends what the socket has (at least one byte) to `in`.
  awaitable<std::error_code> fill() {
    if (in_used > 0) {
      in.erase(in.begin(), in.begin() + static_cast<std::ptrdiff_t>(in_used));
      in_used = 0;
    }
    std::size_t old = in.size();
    in.resize(old + kReadChunk);
    auto [ec, n] = co_await socket.async_read_some(asio::buffer(in.data() + old, kReadChunk), use_nothrow);
    in.resize(old + n);
    co_return ec;
  }
  // Sends what mbedTLS has written to `out`.
  awaitable<std::error_code> flush() {
    while (!out.empty()) {
      std::vector<std::uint8_t> pending;
      pending.swap(out);
      auto [ec, n] = co_await asio::async_write(socket, asio::buffer(pending), use_nothrow);
      if (ec) co_return ec;
    }
    co_return std::error_code();
  }

  tcp::socket socket;
  std::shared_ptr<const TlsContext> context;  // keeps the CA chain alive
  mbedtls_ssl_config config;
  mbedtls_ssl_context ssl;
  std::vector<std::uint8_t> in;  // received, the first in_used bytes consumed
  std::size_t in_used = 0;
  std::vector<std::uint8_t> out;  // to send
  std::array<unsigned char, 48> master{};
  std::array<unsigned char, 64> randoms{};
  mbedtls_tls_prf_types prf = MBEDTLS_SSL_TLS_PRF_NONE;
  bool have_keys = false;
  bool extended_master_secret = false;
  bool verify_failed = false;
};

TlsStream::TlsStream(tcp::socket socket, std::shared_ptr<const TlsContext> context)
    : impl_(std::make_unique<Impl>(std::move(socket), std::move(context))) {
  Impl& s = *impl_;
  mbedtls_ssl_config& c = s.config;
  int ret = mbedtls_ssl_config_defaults(&c, MBEDTLS_SSL_IS_CLIENT, MBEDTLS_SSL_TRANSPORT_STREAM,
                                        MBEDTLS_SSL_PRESET_DEFAULT);
  if (ret != 0) throw RpcError(ErrorCode::protocol_error, str("TLS set-up failed: ", mbedtls_error(ret).message()));
  mbedtls_ssl_conf_min_version(&c, MBEDTLS_SSL_MAJOR_VERSION_3, MBEDTLS_SSL_MINOR_VERSION_3);  // TLS 1.2
  mbedtls_ssl_conf_ciphersuites(&c, kCipherSuites);
  mbedtls_ssl_conf_curves(&c, kCurves);
  mbedtls_ssl_conf_rng(&c, random_for_tls, nullptr);
  mbedtls_ssl_conf_extended_master_secret(&c, MBEDTLS_SSL_EXTENDED_MS_ENABLED);
  // Off; the boards' mbedTLS (scripts/build-mbedtls.sh) has neither compiled in.
#if defined(MBEDTLS_SSL_RENEGOTIATION)
  mbedtls_ssl_conf_renegotiation(&c, MBEDTLS_SSL_RENEGOTIATION_DISABLED);
#endif
#if defined(MBEDTLS_SSL_SESSION_TICKETS)
  mbedtls_ssl_conf_session_tickets(&c, MBEDTLS_SSL_SESSION_TICKETS_DISABLED);
#endif
  mbedtls_ssl_conf_export_keys_ext_cb(&c, &Impl::export_keys, &s);
  if (s.context->impl_->verifies) {
    // The chain is checked, the name is not (as with OpenSSL on the host: see tls.h).
    mbedtls_ssl_conf_authmode(&c, MBEDTLS_SSL_VERIFY_REQUIRED);
    mbedtls_ssl_conf_ca_chain(&c, &s.context->impl_->ca, nullptr);
  } else {
    mbedtls_ssl_conf_authmode(&c, MBEDTLS_SSL_VERIFY_NONE);
  }
  ret = mbedtls_ssl_setup(&s.ssl, &c);
  if (ret != 0) throw RpcError(ErrorCode::protocol_error, str("TLS set-up failed: ", mbedtls_error(ret).message()));
  mbedtls_ssl_set_bio(&s.ssl, &s, &Impl::send, &Impl::receive, nullptr);
}

TlsStream::~TlsStream() = default;

tcp::socket& TlsStream::socket() { return impl_->socket; }

awaitable<std::error_code> TlsStream::handshake() {
  Impl& s = *impl_;
  for (;;) {
    int ret = mbedtls_ssl_handshake(&s.ssl);
    if (auto ec = co_await s.flush()) co_return ec;
    if (ret == 0) break;
    if (ret == MBEDTLS_ERR_SSL_WANT_WRITE) continue;
    if (ret == MBEDTLS_ERR_SSL_WANT_READ) {
      if (auto ec = co_await s.fill()) co_return ec;
      continue;
    }
    s.verify_failed = ret == MBEDTLS_ERR_X509_CERT_VERIFY_FAILED;
    co_return mbedtls_error(ret);
  }
  if (!s.have_keys || !s.extended_master_secret) {
    // Without it the token binding could be synchronised across two sessions.
    co_return mbedtls_error(MBEDTLS_ERR_SSL_BAD_HS_SERVER_HELLO);
  }
  co_return std::error_code();
}

std::string TlsStream::verify_failure() const {
  if (!impl_->verify_failed) return {};
  std::array<char, 512> text{};
  int n = mbedtls_x509_crt_verify_info(text.data(), text.size(), "", mbedtls_ssl_get_verify_result(&impl_->ssl));
  std::string why(text.data(), n > 0 ? static_cast<std::size_t>(n) : 0);
  for (auto& c : why) {
    if (c == '\n') c = ';';
  }
  while (!why.empty() && (why.back() == ';' || why.back() == ' ')) why.pop_back();
  return why.empty() ? std::string("certificate verification failed") : why;
}

awaitable<std::tuple<std::error_code, std::size_t>> TlsStream::read(asio::mutable_buffer buffer) {
  Impl& s = *impl_;
  auto* data = static_cast<unsigned char*>(buffer.data());
  std::size_t got = 0;
  while (got < buffer.size()) {
    int ret = mbedtls_ssl_read(&s.ssl, data + got, buffer.size() - got);
    if (ret > 0) {
      got += static_cast<std::size_t>(ret);
    } else if (ret == MBEDTLS_ERR_SSL_WANT_READ) {
      if (auto ec = co_await s.fill()) co_return std::tuple(ec, got);
    } else if (ret == 0 || ret == MBEDTLS_ERR_SSL_PEER_CLOSE_NOTIFY) {
      co_return std::tuple(std::error_code(asio::error::eof), got);
    } else {
      co_return std::tuple(mbedtls_error(ret), got);
    }
  }
  co_return std::tuple(std::error_code(), got);
}

awaitable<std::tuple<std::error_code, std::size_t>> TlsStream::write(asio::const_buffer buffer) {
  Impl& s = *impl_;
  const auto* data = static_cast<const unsigned char*>(buffer.data());
  std::size_t sent = 0;
  while (sent < buffer.size()) {
    int ret = mbedtls_ssl_write(&s.ssl, data + sent, buffer.size() - sent);
    // The transport callback takes every byte, so nothing is ever pending (WANT_WRITE),
    // and without renegotiation a write never waits for a read.
    if (ret < 0) co_return std::tuple(mbedtls_error(ret), sent);
    sent += static_cast<std::size_t>(ret);
    if (auto ec = co_await s.flush()) co_return std::tuple(ec, sent);
  }
  co_return std::tuple(std::error_code(), sent);
}

std::vector<std::uint8_t> TlsStream::exporter(std::string_view label) const {
  const Impl& s = *impl_;
  if (!s.have_keys) return {};
  std::vector<std::uint8_t> out(32);
  std::string label_text(label);
  if (mbedtls_ssl_tls_prf(s.prf, s.master.data(), s.master.size(), label_text.c_str(), s.randoms.data(),
                          s.randoms.size(), out.data(), out.size()) != 0) {
    return {};
  }
  return out;
}

}  // namespace kestrel::rpc
