// The transport set-up of a connection before its handshake: TLS or plain frames. The
// TLS library's side (contexts, streams) is in tls_openssl.cpp or tls_mbedtls.cpp.
#include "kestrel/rpc/tls.h"

#include "kestrel/base/log.h"
#include "kestrel/rpc/errors.h"
#include "kestrel/rpc/messages.h"
#include "tls_stream.h"

namespace kestrel::rpc {
namespace {

// The first byte of a TLS record carrying a handshake message. A frame header is a
// little-endian length that is a multiple of 8, so its first byte never is 0x16.
constexpr std::uint8_t kTlsHandshakeRecord = 0x16;

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

}  // namespace

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
  deadline.watch(&stream->socket());
  std::error_code hec = co_await stream->handshake();
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
  Deadline deadline(stream->socket().get_executor(), timeout, &stream->socket());
  std::error_code ec = co_await stream->handshake();
  if (ec) {
    if (deadline.expired()) {
      throw RpcError(ErrorCode::timeout,
                     str("TLS handshake with the tracker at ", tracker, " not completed within ", timeout.count(), " ms"));
    }
    if (std::string why = stream->verify_failure(); !why.empty()) {
      throw RpcError(ErrorCode::auth_failed,
                     str("the tracker at ", tracker, " presented a certificate that --tls-ca does not vouch for (", why,
                         "); refusing"));
    }
    // A tracker without TLS answers a ClientHello with a frame (or closes): the TLS
    // library then reports a record-layer error. Retried like any other transient failure.
    throw RpcError(ErrorCode::protocol_error,
                   str("TLS handshake with the tracker at ", tracker, " failed (", ec.message(),
                       "); if the tracker runs with --no-tls, pass --no-tls here too"));
  }
  deadline.disarm();
  co_return Connection::create(std::move(stream), options);
}

}  // namespace kestrel::rpc
