// The dashboard's HTTP/1.1 server on Boost.Beast: one io_context on the server's own
// thread, one session object per connection (plain TCP or TLS), request caps against
// slow or oversized requests, caps on connections in all and per remote address (room
// made by closing the connection that has waited on its client longest, so a flood of
// idle connections cannot lock anyone out), and the live stream of snapshots (counted
// apart). It reads only the DashboardFeed: never the tracker's pool (see
// http_server.h, http_routes.h for what each request gets).
#include "kestrel/tracker/http_server.h"

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/write.hpp>
#include <boost/beast/ssl/ssl_stream.hpp>
#include <algorithm>
#include <array>
#include <atomic>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>
#include <type_traits>

#include "http_routes.h"
#include "http_tls.h"
#include "kestrel/base/log.h"
#include "kestrel/base/str.h"
#include "kestrel/rpc/errors.h"

namespace kestrel::tracker {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;
using Clock = std::chrono::steady_clock;
using PlainStream = beast::tcp_stream;
using TlsStream = beast::ssl_stream<beast::tcp_stream>;

constexpr std::string_view kLog = "dashboard";
constexpr std::chrono::seconds kWriteTime{30};     // for the client to take a response
constexpr std::chrono::seconds kSnapshotWait{2};   // for a fresh snapshot

// Whom a connection is counted against: its remote IPv4 address, or the /64 of its IPv6
// address (one host commonly holds a whole /64). The first byte is the family.
using PeerKey = std::array<std::uint8_t, 9>;

PeerKey peer_key(const tcp::socket& socket) {
  PeerKey key{};
  beast::error_code ec;
  auto address = socket.remote_endpoint(ec).address();
  if (ec) return key;  // already gone: all such count as one
  if (address.is_v6() && address.to_v6().is_v4_mapped()) {
    address = net::ip::make_address_v4(net::ip::v4_mapped, address.to_v6());
  }
  if (address.is_v4()) {
    const auto bytes = address.to_v4().to_bytes();
    key[0] = 4;
    std::copy(bytes.begin(), bytes.end(), key.begin() + 1);
  } else {
    const auto bytes = address.to_v6().to_bytes();
    key[0] = 6;
    std::copy(bytes.begin(), bytes.begin() + 8, key.begin() + 1);
  }
  return key;
}

std::size_t at_least_one(std::size_t cap) { return std::max<std::size_t>(cap, 1); }

// A connection, as the server sees it: closed on stop() or to make room, told of each
// new snapshot, counted in a slot (HttpCore::count).
class Connection {
 public:
  enum class Slot { none, request, stream };

  virtual ~Connection() = default;
  virtual void close() = 0;
  virtual void on_publish() = 0;

  PeerKey peer{};
  Slot slot = Slot::none;
  // Since when it has waited on its client (for a whole request, or to take its answer);
  // empty while the server is busy with it (waiting for a snapshot). A connection of the
  // request slot that waits may be closed to make room, the longest waiting first.
  std::optional<Clock::time_point> waiting_since;
};

}  // namespace

// Everything the server's thread uses; the feed's listener reaches it through a weak
// pointer, so a publish after the server is gone does nothing.
struct HttpCore {
  HttpCore(HttpOptions opts, std::shared_ptr<DashboardFeed> f, const std::vector<rpc::Token>& tokens,
           std::shared_ptr<const rpc::TlsContext> t)
      : options(std::move(opts)), feed(std::move(f)), routes(HttpAuth(tokens)), tls(std::move(t)) {}

  HttpOptions options;
  std::shared_ptr<DashboardFeed> feed;
  HttpRoutes routes;
  std::shared_ptr<const rpc::TlsContext> tls;
  // Declared before io: sessions still held by io's handlers erase themselves from
  // `connections` when io is destroyed (after a run() that ended by an exception).
  bool stopping = false;  // server thread only
  std::atomic<bool> closed{false};  // close_all() ran: the feed's listener posts nothing more
  std::uint64_t next_id = 0;
  std::map<std::uint64_t, std::weak_ptr<Connection>> connections;
  // Counted connections: in all and per remote address, streams apart.
  struct Counts {
    std::size_t requests = 0;
    std::size_t streams = 0;
  };
  Counts counted;
  std::map<PeerKey, Counts> peers;
  std::size_t refused = 0;  // newcomers closed at once (every counted connection busy)
  std::size_t evicted = 0;  // connections closed to make room
  Clock::time_point warned{};  // the last warning about either (at most one per 10 s)

  bool time_to_warn() {
    const auto now = Clock::now();
    if (warned != Clock::time_point{} && now - warned < std::chrono::seconds(10)) return false;
    warned = now;
    return true;
  }
  net::io_context io{1};
  std::optional<net::ssl::context> ssl;  // wraps tls's SSL_CTX (its own reference)
  tcp::acceptor acceptor{io};
  net::steady_timer accept_pause{io};
  std::optional<net::executor_work_guard<net::io_context::executor_type>> work;
  std::thread thread;
  std::mutex stop_mutex;

  bool fresh(const std::shared_ptr<const DashboardSnapshot>& s) const {
    return s && Clock::now() - s->made_at <= 2 * options.interval;
  }

  void on_publish() {
    auto open = connections;  // a stream whose write fails closes (and erases itself)
    for (auto& [id, weak] : open) {
      if (auto c = weak.lock()) c->on_publish();
    }
  }

  // Moves `c` to `slot` in the counts (Slot::none: uncounted). Idempotent.
  void count(Connection& c, Connection::Slot slot) {
    if (c.slot == slot) return;
    auto& peer = peers[c.peer];
    auto field = [](Counts& n, Connection::Slot s) -> std::size_t& {
      return s == Connection::Slot::stream ? n.streams : n.requests;
    };
    if (c.slot != Connection::Slot::none) {
      --field(counted, c.slot);
      --field(peer, c.slot);
    }
    if (slot != Connection::Slot::none) {
      ++field(counted, slot);
      ++field(peer, slot);
    }
    c.slot = slot;
    if (peer.requests == 0 && peer.streams == 0) peers.erase(c.peer);
  }

  // Makes room for one more request-slot connection from `peer` (closing the longest
  // waiting one of that address past its cap, of all past the total cap); false when
  // every candidate is busy.
  bool make_room(const PeerKey& peer) {
    auto it = peers.find(peer);
    if (it != peers.end() && it->second.requests >= at_least_one(options.max_connections_per_address) &&
        !evict(&peer)) {
      return false;
    }
    return counted.requests < at_least_one(options.max_connections) || evict(nullptr);
  }

  bool evict(const PeerKey* peer) {
    std::shared_ptr<Connection> victim;
    for (auto& [id, weak] : connections) {
      auto c = weak.lock();
      if (!c || c->slot != Connection::Slot::request || !c->waiting_since || (peer && c->peer != *peer)) continue;
      if (!victim || *c->waiting_since < *victim->waiting_since) victim = std::move(c);
    }
    if (!victim) return false;
    ++evicted;
    if (time_to_warn()) {
      log::warn(kLog, "connections at a cap (", counted.requests, " open, ", options.max_connections, " in all, ",
                options.max_connections_per_address,
                " per address): closing the one that waited longest on its client (", evicted, " so far)");
    }
    count(*victim, Connection::Slot::none);
    victim->close();
    return true;
  }

  // Counts `c` as an open stream when the stream caps allow it.
  bool admit_stream(Connection& c) {
    auto it = peers.find(c.peer);
    const std::size_t from_peer = it == peers.end() ? 0 : it->second.streams;
    if (counted.streams >= at_least_one(options.max_streams) ||
        from_peer >= at_least_one(options.max_streams_per_address)) {
      return false;
    }
    count(c, Connection::Slot::stream);
    return true;
  }

  void accept();
  void on_accept(tcp::socket socket);
  void close_all() {
    stopping = true;
    closed = true;
    beast::error_code ec;
    acceptor.close(ec);
    accept_pause.cancel();
    auto open = connections;  // close() may end a session, which erases itself
    for (auto& [id, weak] : open) {
      if (auto c = weak.lock()) c->close();
    }
    work.reset();
  }
};

namespace {

template <class Stream>
class Session : public Connection, public std::enable_shared_from_this<Session<Stream>> {
 public:
  template <class... Args>
  Session(HttpCore& core, std::uint64_t id, Args&&... args)
      : core_(core), id_(id), stream_(std::forward<Args>(args)...), buffer_(core.options.max_request_bytes),
        timer_(core.io) {}

  ~Session() override {
    if (viewer_) core_.feed->viewer_closed();
    core_.count(*this, Slot::none);
    core_.connections.erase(id_);
  }

  void start() {
    // The TLS handshake and the first request's headers: within header_timeout of now.
    set_deadlines();
    if constexpr (std::is_same_v<Stream, TlsStream>) {
      // The first bytes tell TLS (a handshake record starts with 0x16) from plain HTTP,
      // which gets a 400 saying to use https:// rather than a reset connection.
      lowest().expires_at(header_deadline());
      lowest().async_read_some(buffer_.prepare(std::min<std::size_t>(buffer_.max_size(), 4096)),
                               [self = this->shared_from_this()](beast::error_code ec, std::size_t n) {
                                 if (self->closed_) return;
                                 if (ec) {
                                   self->close();
                                   return;
                                 }
                                 self->buffer_.commit(n);
                                 self->handshake();
                               });
    } else {
      read_request(true);
    }
  }

  void close() override {
    if (closed_) return;
    closed_ = true;
    core_.count(*this, Slot::none);
    timer_.cancel();
    if (viewer_) {
      viewer_ = false;
      core_.feed->viewer_closed();
    }
    beast::error_code ec;
    lowest().socket().shutdown(tcp::socket::shutdown_both, ec);
    lowest().close();
  }

  void on_publish() override {
    if (closed_) return;
    if (streaming_) {
      send_latest_event();
    } else if (waiting_) {
      timer_.cancel();  // wakes the request that waits for a fresh snapshot
    }
  }

 private:
  beast::tcp_stream& lowest() { return beast::get_lowest_layer(stream_); }

  // ---- TLS ---------------------------------------------------------------------

  void handshake() {
    const auto* first = static_cast<const unsigned char*>(buffer_.data().data());
    if (first[0] != 0x16) {
      refuse_plain_http();
      return;
    }
    lowest().expires_at(header_deadline());
    stream_.async_handshake(net::ssl::stream_base::server, buffer_.data(),
                            [self = this->shared_from_this()](beast::error_code ec, std::size_t used) {
                              if (self->closed_) return;
                              if (ec) {
                                log::debug(kLog, "TLS handshake failed: ", ec.message());
                                self->close();
                                return;
                              }
                              // The client waits for the server's answer before it sends
                              // anything else: the bytes read first were all handshake.
                              const bool all_used = used == self->buffer_.size();
                              self->buffer_.consume(self->buffer_.size());
                              if (!all_used) {
                                self->close();
                                return;
                              }
                              self->read_request(true);
                            });
  }

  // A plain HTTP request to the HTTPS-only server: a 400 in plain text, then close.
  void refuse_plain_http() {
    HttpResponse res = json_error(11, http::status::bad_request,
                                  "this dashboard speaks HTTPS only: use https:// with the same host and port");
    res.keep_alive(false);
    res.prepare_payload();
    std::ostringstream text;
    text << res;
    out_.push_back(text.str());
    lowest().expires_after(kWriteTime);
    net::async_write(lowest(), net::buffer(out_.front()), [self = this->shared_from_this()](beast::error_code, std::size_t) {
      if (self->closed_) return;
      beast::error_code ignored;
      self->lowest().socket().shutdown(tcp::socket::shutdown_send, ignored);
      self->lowest().expires_after(std::chrono::seconds(2));
      self->drain();
    });
  }

  // Reads what the client still sends until it closes (a close with unread bytes would
  // reset the connection and could lose the answer), then closes.
  void drain() {
    lowest().async_read_some(net::buffer(sink_), [self = this->shared_from_this()](beast::error_code ec, std::size_t) {
      if (self->closed_) return;
      if (ec) {
        self->close();
        return;
      }
      self->drain();
    });
  }

  // ---- reading a request -------------------------------------------------------

  void read_request(bool first) {
    parser_.emplace();
    parser_->header_limit(static_cast<std::uint32_t>(core_.options.max_request_bytes));
    parser_->body_limit(core_.options.max_request_bytes);
    request_bytes_ = 0;
    // The clocks for the request start at its first byte (at accept for the first: set
    // by start()).
    if (first) {
      read_some();
      return;
    }
    waiting_since = Clock::now();
    if (buffer_.size() > 0) {  // pipelined
      set_deadlines();
      read_some();
    } else {
      wait_for_first_byte();
    }
  }

  // A kept-alive connection between requests: the parser would wait for the whole header
  // before it reports anything, so the first byte is read here, under the idle timeout.
  void wait_for_first_byte() {
    lowest().expires_after(core_.options.idle_timeout);
    stream_.async_read_some(buffer_.prepare(std::min<std::size_t>(buffer_.max_size(), 4096)),
                            [self = this->shared_from_this()](beast::error_code ec, std::size_t n) {
                              if (self->closed_) return;
                              if (ec) {  // closed, idle too long, reset
                                self->close();
                                return;
                              }
                              self->buffer_.commit(n);
                              self->set_deadlines();
                              self->read_some();
                            });
  }

  void set_deadlines() {
    const auto now = Clock::now();
    header_deadline_ = now + core_.options.header_timeout;
    request_deadline_ = now + core_.options.request_timeout;
  }
  Clock::time_point header_deadline() const { return std::min(header_deadline_, request_deadline_); }

  void read_some() {
    lowest().expires_at(parser_->is_header_done() ? request_deadline_ : header_deadline());
    http::async_read_some(stream_, buffer_, *parser_,
                          [self = this->shared_from_this()](beast::error_code ec, std::size_t n) {
                            self->on_read_some(ec, n);
                          });
  }

  void on_read_some(beast::error_code ec, std::size_t n) {
    if (closed_) return;
    request_bytes_ += n;
    if (ec == http::error::header_limit || ec == http::error::buffer_overflow) {
      refuse(http::status::request_header_fields_too_large, "request too large");
      return;
    }
    if (ec == http::error::body_limit || request_bytes_ > core_.options.max_request_bytes) {
      refuse(http::status::payload_too_large, "request too large");
      return;
    }
    if (ec && ec.category() == http::make_error_code(http::error::bad_target).category() &&
        ec != http::error::end_of_stream && ec != http::error::partial_message) {
      refuse(http::status::bad_request, "malformed request");
      return;
    }
    if (ec) {  // closed, timed out, reset
      close();
      return;
    }
    if (!parser_->is_done()) {
      read_some();
      return;
    }
    request_ = parser_->release();
    parser_.reset();
    handle();
  }

  // ---- answering it --------------------------------------------------------------

  void handle() {
    waiting_since.reset();  // the server's turn
    auto plan = core_.routes.plan(request_);
    if (plan.response) {
      send(std::move(*plan.response));
      return;
    }
    core_.feed->mark_wanted();
    if (plan.stream) {
      start_stream();
      return;
    }
    document_ = *plan.document;
    auto latest = core_.feed->latest();
    if (core_.fresh(latest)) {
      send(core_.routes.from_snapshot(request_, document_, latest));
      return;
    }
    // None yet, or stale: ask the tracker for one and wait a little for it.
    core_.feed->request_refresh();
    waiting_ = true;
    timer_.expires_after(kSnapshotWait);
    timer_.async_wait([self = this->shared_from_this()](beast::error_code) {
      if (self->closed_) return;
      self->waiting_ = false;
      self->send(self->core_.routes.from_snapshot(self->request_, self->document_, self->core_.feed->latest()));
    });
  }

  void send(HttpResponse res) {
    res.version(11);  // an HTTP/1.1 server answers HTTP/1.0 clients as HTTP/1.1 too
    res.keep_alive(request_.keep_alive() && !core_.stopping);
    res.prepare_payload();
    if (request_.method() == http::verb::head) res.body().clear();  // Content-Length stays
    response_ = std::move(res);
    waiting_since = Clock::now();  // for the client to take the answer
    lowest().expires_after(kWriteTime);
    http::async_write(stream_, response_, [self = this->shared_from_this()](beast::error_code ec, std::size_t) {
      if (self->closed_) return;
      if (ec) {
        self->close();
      } else if (self->response_.need_eof()) {
        self->finish();
      } else {
        self->read_request(false);
      }
    });
  }

  // A request the server will not read to its end: say why, then close.
  void refuse(http::status status, std::string_view message) {
    request_ = {};
    request_.version(11);
    request_.keep_alive(false);
    send(json_error(11, status, message));
  }

  // Ends the connection after a response that asked for it (TLS: close_notify first).
  void finish() {
    if constexpr (std::is_same_v<Stream, TlsStream>) {
      lowest().expires_after(std::chrono::seconds(5));
      stream_.async_shutdown([self = this->shared_from_this()](beast::error_code) { self->close(); });
    } else {
      beast::error_code ec;
      lowest().socket().shutdown(tcp::socket::shutdown_send, ec);
      close();
    }
  }

  // ---- the live stream -----------------------------------------------------------

  void start_stream() {
    if (!core_.admit_stream(*this)) {
      HttpResponse res = json_error(request_.version(), http::status::service_unavailable,
                                    "too many open streams: try again later");
      res.set(http::field::retry_after, "10");
      send(std::move(res));
      return;
    }
    streaming_ = true;
    viewer_ = true;
    core_.feed->viewer_opened();
    queue(core_.routes.stream_head());
    if (request_.method() == http::verb::head) {
      streaming_ = false;
      writing_done_close_ = true;
      return;
    }
    auto latest = core_.feed->latest();
    if (core_.fresh(latest)) {
      send_latest_event();
    } else {
      core_.feed->request_refresh();  // its publish arrives as on_publish()
    }
    keepalive();
    watch_for_close();
  }

  void send_latest_event() {
    auto latest = core_.feed->latest();
    if (!latest || latest->version <= sent_version_) return;
    sent_version_ = latest->version;
    auto event = sse_event("state", latest->state_json);
    // A reader slower than the snapshots gets the newest state next, not a backlog: at
    // most the write in flight and one waiting event per stream (a reader that takes
    // nothing is closed by the write timeout).
    if (writing_ && out_.size() >= 2) {
      out_.back() = std::move(event);
      return;
    }
    queue(std::move(event));
  }

  void keepalive() {
    timer_.expires_after(core_.options.stream_keepalive);
    timer_.async_wait([self = this->shared_from_this()](beast::error_code) {
      if (self->closed_ || !self->streaming_) return;
      self->core_.feed->mark_wanted();
      if (self->out_.empty()) self->queue(": keepalive\n\n");
      self->keepalive();
    });
  }

  // A stream's client sends nothing more; a read that ends means it left.
  void watch_for_close() {
    lowest().expires_never();
    stream_.async_read_some(net::buffer(sink_), [self = this->shared_from_this()](beast::error_code ec, std::size_t) {
      if (self->closed_) return;
      if (ec) {
        self->close();
        return;
      }
      self->watch_for_close();
    });
  }

  void queue(std::string data) {
    out_.push_back(std::move(data));
    if (!writing_) write_next();
  }

  void write_next() {
    if (out_.empty()) {
      writing_ = false;
      if (writing_done_close_) finish();
      return;
    }
    writing_ = true;
    lowest().expires_after(kWriteTime);
    net::async_write(stream_, net::buffer(out_.front()),
                     [self = this->shared_from_this()](beast::error_code ec, std::size_t) {
                       if (self->closed_) return;
                       if (ec) {
                         self->close();
                         return;
                       }
                       self->out_.pop_front();
                       self->write_next();
                     });
  }

  HttpCore& core_;
  std::uint64_t id_;
  Stream stream_;
  beast::flat_buffer buffer_;  // at most max_request_bytes
  net::steady_timer timer_;    // the wait for a snapshot, or the stream's keepalive
  std::optional<http::request_parser<http::string_body>> parser_;
  HttpRequest request_;
  HttpResponse response_;
  SnapshotDocument document_ = SnapshotDocument::state;
  Clock::time_point header_deadline_{};   // for the request line and headers
  Clock::time_point request_deadline_{};  // for the whole request
  std::size_t request_bytes_ = 0;
  bool closed_ = false;
  bool waiting_ = false;
  bool streaming_ = false;
  bool viewer_ = false;
  bool writing_ = false;
  bool writing_done_close_ = false;
  std::uint64_t sent_version_ = 0;
  std::deque<std::string> out_;
  char sink_[512];
};

}  // namespace

void HttpCore::accept() {
  acceptor.async_accept([this](beast::error_code ec, tcp::socket socket) {
    if (stopping) return;
    if (ec) {
      // Out of descriptors, or the like: pause rather than spin.
      log::warn(kLog, "accept failed: ", ec.message());
      accept_pause.expires_after(std::chrono::milliseconds(100));
      accept_pause.async_wait([this](beast::error_code wait_ec) {
        if (!wait_ec && !stopping) accept();
      });
      return;
    }
    on_accept(std::move(socket));
    accept();
  });
}

void HttpCore::on_accept(tcp::socket socket) {
  const auto peer = peer_key(socket);
  if (!make_room(peer)) {
    ++refused;
    if (time_to_warn()) {
      log::warn(kLog, counted.requests, " connections open and all busy: closing new ones (", refused, " so far)");
    }
    beast::error_code ec;
    socket.close(ec);
    return;
  }
  const auto id = next_id++;
  auto admit = [&](auto session) {
    session->peer = peer;
    session->waiting_since = Clock::now();
    count(*session, Connection::Slot::request);
    connections.emplace(id, session);
    session->start();
  };
  if (ssl) {
    admit(std::make_shared<Session<TlsStream>>(*this, id, std::move(socket), *ssl));
  } else {
    admit(std::make_shared<Session<PlainStream>>(*this, id, std::move(socket)));
  }
}

struct HttpServer::Impl {
  std::shared_ptr<HttpCore> core;
  std::uint16_t port = 0;
};

HttpServer::HttpServer(HttpOptions options, std::shared_ptr<DashboardFeed> feed, std::vector<rpc::Token> tokens,
                       std::shared_ptr<const rpc::TlsContext> tls)
    : impl_(std::make_unique<Impl>()) {
  auto core = std::make_shared<HttpCore>(std::move(options), std::move(feed), tokens, std::move(tls));
  auto& opts = core->options;
  if (core->tls) {
    core->ssl.emplace(share_ssl_context(*core->tls));  // takes that reference
  }
  const auto where = str(opts.host, ":", opts.port);
  beast::error_code ec;
  tcp::resolver resolver(core->io);
  auto endpoints = resolver.resolve(opts.host, std::to_string(opts.port), tcp::resolver::passive, ec);
  if (ec || endpoints.empty()) {
    throw rpc::RpcError(rpc::ErrorCode::bad_request,
                        str("cannot resolve the dashboard's address '", opts.host, "': ", ec.message()));
  }
  const tcp::endpoint endpoint = endpoints.begin()->endpoint();
  auto fail = [&](std::string_view step) {
    throw rpc::RpcError(rpc::ErrorCode::bad_request,
                        str("cannot serve the dashboard on ", where, ": ", step, ": ", ec.message()));
  };
  core->acceptor.open(endpoint.protocol(), ec);
  if (ec) fail("socket");
  core->acceptor.set_option(net::socket_base::reuse_address(true), ec);
  core->acceptor.bind(endpoint, ec);
  if (ec) fail("bind");
  core->acceptor.listen(net::socket_base::max_listen_connections, ec);
  if (ec) fail("listen");
  impl_->port = core->acceptor.local_endpoint().port();
  impl_->core = std::move(core);
}

HttpServer::~HttpServer() { stop(); }

void HttpServer::start() {
  auto& core = impl_->core;
  std::lock_guard lock(core->stop_mutex);
  if (core->thread.joinable() || core->stopping) return;
  core->feed->add_listener([weak = std::weak_ptr<HttpCore>(core)] {
    auto c = weak.lock();
    if (c && !c->closed) net::post(c->io, [raw = c.get()] { raw->on_publish(); });
  });
  core->work.emplace(core->io.get_executor());
  core->accept();
  // A handler that throws is logged and the server goes on (run() may be called again
  // after an exception); run() returns normally once close_all() has closed everything.
  core->thread = std::thread([c = core.get()] {
    while (true) {
      try {
        c->io.run();
        return;
      } catch (const std::exception& ex) {
        log::error(kLog, "internal error (the server goes on): ", ex.what());
      } catch (...) {
        log::error(kLog, "internal error (the server goes on): unknown exception");
      }
    }
  });
}

void HttpServer::stop() {
  auto& core = impl_->core;
  std::lock_guard lock(core->stop_mutex);
  if (core->thread.joinable()) {
    net::post(core->io, [c = core.get()] { c->close_all(); });
    core->thread.join();
  } else {
    core->stopping = true;
    beast::error_code ec;
    core->acceptor.close(ec);
  }
}

std::uint16_t HttpServer::port() const { return impl_->port; }

std::string HttpServer::url() const {
  const auto& host = impl_->core->options.host;
  const bool v6 = host.find(':') != std::string::npos;
  return str(impl_->core->tls ? "https://" : "http://", v6 ? "[" : "", host, v6 ? "]" : "", ":", impl_->port, "/");
}

}  // namespace kestrel::tracker
