// One framed connection: owns a TCP socket, reads one frame at a time, and queues
// outgoing frames behind a single writer so that any coroutine may send at any time.
// Single-threaded: all calls must come from the executor the socket belongs to.
#pragma once

#include <chrono>
#include <deque>
#include <memory>
#include <string>

#include "kestrel/rpc/asio.h"
#include "kestrel/rpc/framing.h"

namespace kestrel::rpc {

struct ConnectionOptions {
  std::size_t max_frame_bytes = kDefaultMaxFrameBytes;
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

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  // Takes ownership of a connected socket and starts the writer.
  static std::shared_ptr<Connection> create(tcp::socket socket, ConnectionOptions options = {});
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

  // Sends what is queued, then closes; closes anyway after `grace`.
  void close_after_flush(std::chrono::milliseconds grace = std::chrono::milliseconds(2000));
  // Closes now; pending reads complete with FrameError::closed.
  void close();

  bool is_open() const { return !closed_; }
  bool is_closing() const { return closing_ || closed_; }
  const std::string& peer() const { return peer_; }
  std::size_t queued_bytes() const { return queued_bytes_; }
  const ConnectionOptions& options() const { return options_; }
  asio::any_io_executor get_executor() { return socket_.get_executor(); }

 private:
  Connection(tcp::socket socket, ConnectionOptions options);
  awaitable<void> write_loop();

  tcp::socket socket_;
  ConnectionOptions options_;
  std::string peer_;
  std::deque<FrameBytes> queue_;
  std::size_t queued_bytes_ = 0;
  asio::steady_timer wake_;
  asio::steady_timer body_deadline_;
  asio::steady_timer grace_;
  bool closing_ = false;
  bool closed_ = false;
  bool body_timed_out_ = false;
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
