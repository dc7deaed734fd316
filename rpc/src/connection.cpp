// Framed connection over TCP or TLS: a reader with a body deadline, growing buffers
// and optional frame MACs, and a queued writer.
#include "kestrel/rpc/connection.h"

#include <charconv>

#include "kestrel/base/log.h"
#include "kestrel/rpc/errors.h"
#include "crypto.h"
#include "tls_stream.h"

namespace kestrel::rpc {
namespace {

// The body buffer starts at this size (or the frame's, if smaller) and doubles as
// bytes arrive, so a header alone never makes the receiver allocate much.
constexpr std::size_t kFirstBodyChunk = 64u << 10;

// HMAC-SHA256(key, direction | seq (u64 little-endian) | frame bytes), the frame being
// `head` followed by `tail` (header and body on receipt; one span when sending).
std::array<std::uint8_t, kFrameMacBytes> frame_mac(const std::array<std::uint8_t, 32>& key, std::uint8_t direction,
                                                   std::uint64_t seq, std::span<const std::uint8_t> head,
                                                   std::span<const std::uint8_t> tail = {}) {
  std::array<std::uint8_t, 9> prefix{};
  prefix[0] = direction;
  for (int i = 0; i < 8; ++i) prefix[1 + i] = static_cast<std::uint8_t>(seq >> (8 * i));
  static_assert(kFrameMacBytes == crypto::Digest().size());
  return crypto::hmac_sha256(key, {prefix, head, tail});
}

}  // namespace

std::shared_ptr<Connection> Connection::create(tcp::socket socket, ConnectionOptions options) {
  auto executor = socket.get_executor();
  std::shared_ptr<Connection> conn(new Connection(std::move(socket), nullptr, options));
  asio::co_spawn(executor, [conn]() { return conn->write_loop(); }, asio::detached);
  return conn;
}

std::shared_ptr<Connection> Connection::create(std::unique_ptr<TlsStream> tls, ConnectionOptions options) {
  auto executor = tls->socket().get_executor();
  tcp::socket unused(executor);
  std::shared_ptr<Connection> conn(new Connection(std::move(unused), std::move(tls), options));
  asio::co_spawn(executor, [conn]() { return conn->write_loop(); }, asio::detached);
  return conn;
}

Connection::Connection(tcp::socket socket, std::unique_ptr<TlsStream> tls, ConnectionOptions options)
    : socket_(std::move(socket)),
      tls_(std::move(tls)),
      options_(options),
      wake_(socket_.get_executor(), asio::steady_timer::time_point::max()),
      body_deadline_(socket_.get_executor()),
      grace_(socket_.get_executor()),
      drain_(socket_.get_executor()) {
  std::error_code ec;
  auto remote = this->socket().remote_endpoint(ec);
  peer_ = ec ? std::string("?") : str(remote.address().to_string(), ":", remote.port());
  this->socket().set_option(tcp::no_delay(true), ec);
}

Connection::~Connection() {
  std::error_code ec;
  socket().close(ec);
}

tcp::socket& Connection::socket() { return tls_ ? tls_->socket() : socket_; }

awaitable<std::tuple<std::error_code, std::size_t>> Connection::read_exactly(asio::mutable_buffer buffer) {
  if (tls_) co_return co_await tls_->read(buffer);
  co_return co_await asio::async_read(socket_, buffer, use_nothrow);
}

void Connection::set_frame_keys(const FrameKeys& keys) {
  keys_ = keys;
  send_seq_ = 0;
  receive_seq_ = 0;
}

std::vector<std::uint8_t> Connection::tls_exporter(std::string_view label) const {
  if (!tls_) return {};
  return tls_->exporter(label);
}

awaitable<ReadResult> Connection::read() {
  ReadResult result;
  std::array<std::uint8_t, kFrameHeaderBytes> header{};
  auto [ec, n] = co_await read_exactly(asio::buffer(header));
  if (ec) {
    // A TLS peer that closes without close_notify between frames is an orderly end too
    // (TlsStream reports it as eof): frames are whole units, so truncation inside one is
    // still caught below.
    if (closed_ || ec == asio::error::operation_aborted || (ec == asio::error::eof && n == 0) ||
        ec == asio::error::connection_reset) {
      result.error = FrameError::closed;
      result.detail = closed_ ? "closed locally" : ec.message();
    } else if (ec == asio::error::eof) {
      result.error = FrameError::truncated;
      result.detail = str("stream ended inside a frame header (", n, " of 4 bytes)");
    } else {
      result.error = FrameError::io;
      result.detail = ec.message();
    }
    co_return result;
  }
  HeaderCheck check = check_header(header, frame_limit());
  if (check.error != FrameError::none) {
    result.error = check.error;
    result.detail = check.detail;
    if (!authenticated_ && check.error == FrameError::oversized) {
      result.detail += " (before authentication)";
    }
    co_return result;
  }

  std::vector<capnp::word> words;
  std::array<std::uint8_t, kFrameMacBytes> mac{};
  body_timed_out_ = false;
  body_deadline_.expires_after(options_.body_timeout);
  std::weak_ptr<Connection> weak = weak_from_this();
  body_deadline_.async_wait([weak](std::error_code timer_ec) {
    if (timer_ec) return;
    if (auto self = weak.lock()) {
      self->body_timed_out_ = true;
      std::error_code ignored;
      self->socket().cancel(ignored);
    }
  });
  // The buffer grows as bytes arrive: a header announcing a large frame costs nothing
  // until its bytes do.
  std::error_code body_ec;
  std::size_t got = 0;
  while (got < check.length) {
    std::size_t size = std::min<std::size_t>(check.length, std::max(kFirstBodyChunk, got * 2));
    words.resize(size / sizeof(capnp::word));
    auto [chunk_ec, chunk] =
        co_await read_exactly(asio::buffer(reinterpret_cast<std::uint8_t*>(words.data()) + got, size - got));
    got += chunk;
    if (chunk_ec) {
      body_ec = chunk_ec;
      break;
    }
  }
  if (!body_ec && keys_) {
    auto [mac_ec, mac_got] = co_await read_exactly(asio::buffer(mac));
    if (mac_ec) body_ec = mac_ec;
  }
  body_deadline_.cancel();
  if (body_ec) {
    if (body_timed_out_) {
      result.error = FrameError::timeout;
      result.detail = str("frame body of ", check.length, " bytes not received within ",
                          options_.body_timeout.count(), " ms (got ", got, ")");
    } else if (closed_) {
      result.error = FrameError::closed;
      result.detail = "closed locally";
    } else if (body_ec == asio::error::eof || body_ec == asio::error::connection_reset) {
      result.error = FrameError::truncated;
      result.detail = str("stream ended after ", got, " of ", check.length, " frame bytes");
    } else {
      result.error = FrameError::io;
      result.detail = body_ec.message();
    }
    co_return result;
  }
  if (keys_) {
    // The MAC covers the header and the body: checked before anything is decoded.
    std::span<const std::uint8_t> body(reinterpret_cast<const std::uint8_t*>(words.data()), check.length);
    auto expected = frame_mac(keys_->receive, keys_->receive_direction, receive_seq_, header, body);
    if (!crypto::equal_32(expected.data(), mac.data())) {
      result.error = FrameError::malformed;
      result.detail = str("frame authentication failed: frame ", receive_seq_,
                          " carries a wrong MAC (injected, replayed, reordered or altered on the way)");
      co_return result;
    }
    ++receive_seq_;
  }
  std::string error;
  result.frame = InFrame::decode(std::move(words), error);
  if (!result.frame) {
    result.error = FrameError::malformed;
    result.detail = std::move(error);
  }
  co_return result;
}

awaitable<ReadResult> Connection::read_within(std::chrono::milliseconds timeout) {
  auto expired = std::make_shared<bool>(false);
  asio::steady_timer timer(socket().get_executor());
  timer.expires_after(timeout);
  std::weak_ptr<Connection> weak = weak_from_this();
  timer.async_wait([weak, expired](std::error_code ec) {
    if (ec) return;
    *expired = true;
    if (auto self = weak.lock()) self->close();
  });
  ReadResult result = co_await read();
  timer.cancel();
  if (*expired) {
    result.frame.reset();
    result.error = FrameError::timeout;
    result.detail = str("no frame within ", timeout.count(), " ms");
  }
  co_return result;
}

bool Connection::send(FrameBytes frame) {
  if (closing_ || closed_) return false;
  if (keys_) {
    auto mac = frame_mac(keys_->send, keys_->send_direction, send_seq_++, frame);
    frame.insert(frame.end(), mac.begin(), mac.end());
  }
  queued_bytes_ += frame.size();
  queue_.push_back(std::move(frame));
  if (queued_bytes_ > options_.max_queued_bytes) {
    log::warn("conn", peer_, ": peer is not reading (", queued_bytes_, " bytes queued); closing");
    close();
    return false;
  }
  wake_.cancel_one();
  return true;
}

bool Connection::send(capnp::MessageBuilder& message) { return send(encode_frame(message)); }

awaitable<void> Connection::drained(std::size_t bytes) {
  auto self = shared_from_this();
  while (!closed_ && queued_bytes_ > bytes) {
    drain_.expires_at(asio::steady_timer::time_point::max());
    co_await drain_.async_wait(use_nothrow);
  }
}

void Connection::close_after_flush(std::chrono::milliseconds grace) {
  if (closing_ || closed_) return;
  closing_ = true;
  wake_.cancel_one();
  grace_.expires_after(grace);
  std::weak_ptr<Connection> weak = weak_from_this();
  grace_.async_wait([weak](std::error_code ec) {
    if (ec) return;
    if (auto self = weak.lock()) self->close();
  });
}

void Connection::close() {
  if (closed_) return;
  closed_ = true;
  closing_ = true;
  std::error_code ec;
  socket().shutdown(tcp::socket::shutdown_both, ec);
  socket().close(ec);
  wake_.cancel();
  body_deadline_.cancel();
  grace_.cancel();
  queue_.clear();
  queued_bytes_ = 0;
  drain_.cancel();
}

awaitable<void> Connection::write_loop() {
  auto self = shared_from_this();
  while (!closed_) {
    if (queue_.empty()) {
      if (closing_) {
        close();
        break;
      }
      co_await wake_.async_wait(use_nothrow);
      continue;
    }
    // Take the frame out of the queue before writing: close() may clear the queue
    // while the write is in flight.
    FrameBytes frame = std::move(queue_.front());
    queue_.pop_front();
    queued_bytes_ -= frame.size();
    drain_.cancel();  // whoever waits in drained() looks again
    std::error_code ec;
    if (tls_) {
      std::tie(ec, std::ignore) = co_await tls_->write(asio::buffer(frame));
    } else {
      std::tie(ec, std::ignore) = co_await asio::async_write(socket_, asio::buffer(frame), use_nothrow);
    }
    if (ec) {
      if (!closed_) log::debug("conn", peer_, ": write failed: ", ec.message());
      close();
      break;
    }
  }
}

awaitable<tcp::socket> connect_to(std::string host, std::uint16_t port, std::chrono::milliseconds timeout) {
  auto executor = co_await asio::this_coro::executor;
  // A numeric address needs no resolver (Asio resolves on a helper thread, which some
  // emulators and minimal boards handle badly).
  std::vector<tcp::endpoint> results;
  std::error_code numeric_error;
  auto address = asio::ip::make_address(host, numeric_error);
  if (!numeric_error) {
    results.emplace_back(address, port);
  } else {
    tcp::resolver resolver(executor);
    auto [rec, resolved] = co_await resolver.async_resolve(host, std::to_string(port), use_nothrow);
    if (rec) {
      throw RpcError(ErrorCode::connection_lost, str("cannot resolve tracker host '", host, "': ", rec.message()));
    }
    for (const auto& entry : resolved) results.push_back(entry.endpoint());
  }
  // Shared with the deadline handler, which may run after this coroutine has returned.
  struct State {
    explicit State(asio::any_io_executor ex) : socket(ex), deadline(ex) {}
    tcp::socket socket;
    asio::steady_timer deadline;
    bool timed_out = false;
  };
  auto state = std::make_shared<State>(executor);
  state->deadline.expires_after(timeout);
  state->deadline.async_wait([state](std::error_code ec) {
    if (!ec) {
      state->timed_out = true;
      std::error_code ignored;
      state->socket.cancel(ignored);
    }
  });
  auto [cec, ep] = co_await asio::async_connect(state->socket, results, use_nothrow);
  state->deadline.cancel();
  if (cec) {
    std::string why = state->timed_out ? str("no answer within ", timeout.count(), " ms") : cec.message();
    throw RpcError(ErrorCode::connection_lost, str("cannot connect to tracker ", host, ":", port, ": ", why));
  }
  tcp::socket socket = std::move(state->socket);
  co_return socket;
}

std::string Endpoint::to_string() const {
  if (host.find(':') != std::string::npos) return str("[", host, "]:", port);
  return str(host, ":", port);
}

Endpoint parse_endpoint(std::string_view text) {
  Endpoint ep;
  std::string_view port_text;
  if (!text.empty() && text.front() == '[') {
    auto close = text.find(']');
    if (close == std::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':') {
      throw RpcError(ErrorCode::bad_request, str("malformed address '", text, "': expected [IPv6]:PORT"));
    }
    ep.host = std::string(text.substr(1, close - 1));
    port_text = text.substr(close + 2);
  } else {
    auto colon = text.rfind(':');
    if (colon == std::string_view::npos || colon == 0) {
      throw RpcError(ErrorCode::bad_request, str("malformed address '", text, "': expected HOST:PORT"));
    }
    ep.host = std::string(text.substr(0, colon));
    port_text = text.substr(colon + 1);
  }
  unsigned value = 0;
  auto [ptr, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), value);
  if (ec != std::errc() || ptr != port_text.data() + port_text.size() || value == 0 || value > 65535) {
    throw RpcError(ErrorCode::bad_request, str("malformed port in '", text, "': expected 1-65535"));
  }
  ep.port = static_cast<std::uint16_t>(value);
  return ep;
}

}  // namespace kestrel::rpc
