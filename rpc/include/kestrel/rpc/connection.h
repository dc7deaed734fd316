// One framed connection: owns a TCP socket (plain, or inside a TLS stream), reads one
// frame at a time, and queues outgoing frames behind a single writer so that any
// coroutine may send at any time. Before the handshake has authenticated the peer, frames
// are capped at preauth_max_frame_bytes; a body buffer grows as bytes arrive, never sized
// from the header alone. Without TLS, frame_keys() adds a MAC to every frame after the
// handshake (see docs/architecture.md, "Frame authentication").
// Single-threaded: all calls must come from the executor the socket belongs to.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "kestrel/rpc/asio.h"
#include "kestrel/rpc/framing.h"

namespace kestrel::rpc {

inline constexpr std::size_t kDefaultPreauthMaxFrameBytes = 64u << 10;
inline constexpr std::size_t kFrameMacBytes = 32;

struct ConnectionOptions {
  // Largest frame accepted once the peer is authenticated (mark_authenticated()).
  std::size_t max_frame_bytes = kDefaultMaxFrameBytes;
  // Largest frame accepted before that: the handshake's frames are small.
  std::size_t preauth_max_frame_bytes = kDefaultPreauthMaxFrameBytes;
  // Once a frame header has arrived, its body must follow within this time.
  std::chrono::milliseconds body_timeout{60'000};
  // Outgoing bytes a slow reader may leave queued before the connection is dropped.
  std::size_t max_queued_bytes = 512u << 20;
};

struct ReadResult {
  std::unique_ptr<InFrame> frame;  // set when error == none
  FrameError error = FrameError::none;
  std::string detail;              // for a person: what exactly was wrong
};

// Per-direction keys for frame MACs (derived by the handshake, see handshake.h).
struct FrameKeys {
  std::array<std::uint8_t, 32> send{};
  std::array<std::uint8_t, 32> receive{};
  std::uint8_t send_direction = 0;     // byte that names the direction in each MAC
  std::uint8_t receive_direction = 0;
};

// A TLS stream whose handshake has completed (tls.h makes one); opaque here so that
// this header does not pull in the TLS library (OpenSSL or mbedTLS).
class TlsStream;

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  // Takes ownership of a connected socket and starts the writer.
  static std::shared_ptr<Connection> create(tcp::socket socket, ConnectionOptions options = {});
  // Takes ownership of a TLS stream (handshake done) and starts the writer.
  static std::shared_ptr<Connection> create(std::unique_ptr<TlsStream> tls, ConnectionOptions options = {});
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Reads the next frame. Errors are values; after any error other than `none` the
  // connection is unusable and should be closed. At most one read at a time.
  awaitable<ReadResult> read();
  // Like read(), but gives up after `timeout`: the connection is then closed and the
  // result is FrameError::timeout. For handshakes and replies that must be prompt.
  awaitable<ReadResult> read_within(std::chrono::milliseconds timeout);

  // Queues a frame for sending. Returns false (and drops the frame) when the
  // connection is closed or closing; closes the connection when the queue exceeds
  // max_queued_bytes.
  bool send(FrameBytes frame);
  bool send(capnp::MessageBuilder& message);

  // Completes once at most `bytes` are queued for sending, or the connection is closed
  // (flow control: a relay waits here before reading more from the sender).
  awaitable<void> drained(std::size_t bytes);

  // Sends what is queued, then closes; closes anyway after `grace`.
  void close_after_flush(std::chrono::milliseconds grace = std::chrono::milliseconds(2000));
  // Closes now; pending reads complete with FrameError::closed.
  void close();

  // The handshake authenticated the peer: from now on frames up to max_frame_bytes
  // are accepted (before: preauth_max_frame_bytes).
  void mark_authenticated() { authenticated_ = true; }
  bool is_authenticated() const { return authenticated_; }
  // Whether an authenticated peer may send frames up to max_frame_bytes (the default);
  // false keeps it at preauth_max_frame_bytes, e.g. a client that holds no lease and so
  // has nothing large to send. Takes effect from the next frame header.
  void allow_large_frames(bool allow) { large_frames_ = allow; }
  std::size_t frame_limit() const {
    return authenticated_ && large_frames_ ? options_.max_frame_bytes : options_.preauth_max_frame_bytes;
  }

  // From now on every frame sent carries HMAC-SHA256(keys.send, direction | seq | frame)
  // after its body, and every frame read must carry a valid one for keys.receive with
  // the next expected sequence number; otherwise the read fails (FrameError::malformed,
  // "frame authentication failed") and the connection closes. For connections without
  // TLS; call between the last handshake frame and the first frame after it.
  void set_frame_keys(const FrameKeys& keys);
  bool frames_authenticated() const { return keys_.has_value(); }

  bool uses_tls() const { return tls_ != nullptr; }
  // 32 bytes of TLS exported keying material under `label` (RFC 8446 7.5): equal on
  // both ends of one TLS session, different across a TLS-terminating proxy. Empty
  // without TLS.
  std::vector<std::uint8_t> tls_exporter(std::string_view label) const;

  bool is_open() const { return !closed_; }
  bool is_closing() const { return closing_ || closed_; }
  const std::string& peer() const { return peer_; }
  std::size_t queued_bytes() const { return queued_bytes_; }
  const ConnectionOptions& options() const { return options_; }
  asio::any_io_executor get_executor() { return socket().get_executor(); }

 private:
  Connection(tcp::socket socket, std::unique_ptr<TlsStream> tls, ConnectionOptions options);
  awaitable<void> write_loop();
  tcp::socket& socket();
  // Reads exactly `buffer.size()` bytes from the plain or TLS stream.
  awaitable<std::tuple<std::error_code, std::size_t>> read_exactly(asio::mutable_buffer buffer);

  tcp::socket socket_;           // the TCP socket when plain (unused with TLS)
  std::unique_ptr<TlsStream> tls_;
  ConnectionOptions options_;
  std::string peer_;
  std::deque<FrameBytes> queue_;
  std::size_t queued_bytes_ = 0;
  asio::steady_timer wake_;
  asio::steady_timer body_deadline_;
  asio::steady_timer grace_;
  asio::steady_timer drain_;  // never expires: cancelled whenever the queue shrinks
  bool closing_ = false;
  bool closed_ = false;
  bool body_timed_out_ = false;
  bool authenticated_ = false;
  bool large_frames_ = true;
  std::optional<FrameKeys> keys_;
  std::uint64_t send_seq_ = 0;
  std::uint64_t receive_seq_ = 0;
};

// Connects to host:port, resolving the name; throws RpcError(connection_lost) with a
// message naming the address when it cannot.
awaitable<tcp::socket> connect_to(std::string host, std::uint16_t port,
                                  std::chrono::milliseconds timeout);

// Splits "HOST:PORT" (or "[v6]:PORT"); throws RpcError(bad_request) on malformed input.
struct Endpoint {
  std::string host;
  std::uint16_t port = 0;
  std::string to_string() const;
};
Endpoint parse_endpoint(std::string_view text);

}  // namespace kestrel::rpc
