// Tracker server: connections, handshakes, heartbeats and relaying. The registry,
// queues and leases are the Pool (pool.cpp); this file feeds it what arrives on the
// connections and turns what it returns into frames.
#include "kestrel/tracker/tracker.h"

#include <kj/exception.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <unordered_map>

#include "kestrel/base/log.h"
#include "kestrel/base/version.h"
#include "kestrel/rpc/device_info.h"
#include "kestrel/rpc/errors.h"
#include "kestrel/rpc/handshake.h"
#include "kestrel/rpc/messages.h"
#include "kestrel/rpc/session_report.h"
#include "kestrel/tracker/dashboard_state.h"
#include "kestrel/tracker/pool.h"

namespace kestrel::tracker {
using namespace kestrel::rpc;
namespace {

constexpr std::string_view kLog = "tracker";

std::uint64_t ms_between(Clock::time_point from, Clock::time_point to) {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(to - from).count());
}

// A protocol violation by one peer: that peer's connection is closed.
struct Violation : RpcError {
  using RpcError::RpcError;
};

ErrorCode code_of(RequestFailed::Reason reason) {
  switch (reason) {
    case RequestFailed::Reason::bad_request: return ErrorCode::bad_request;
    case RequestFailed::Reason::cancelled: return ErrorCode::cancelled;
    case RequestFailed::Reason::timeout: return ErrorCode::timeout;
    case RequestFailed::Reason::client_gone: return ErrorCode::connection_lost;
    case RequestFailed::Reason::overloaded: return ErrorCode::overloaded;
  }
  return ErrorCode::bad_request;
}

ErrorCode code_of(LeaseEnded::Reason reason) {
  switch (reason) {
    case LeaseEnded::Reason::released: return ErrorCode::cancelled;
    case LeaseEnded::Reason::device_lost: return ErrorCode::device_lost;
    case LeaseEnded::Reason::holder_gone: return ErrorCode::cancelled;
    case LeaseEnded::Reason::not_held: return ErrorCode::no_such_lease;
  }
  return ErrorCode::cancelled;
}

}  // namespace

struct Tracker::Impl {
  struct Peer {
    ConnectionId id;
    std::shared_ptr<Connection> conn;
    wire::Role role = wire::Role::CLIENT;
    std::string name;
    Clock::time_point last_seen;
    std::string close_reason;   // set when the tracker decides to drop the peer
    DeviceId device;            // device role, once registered
    asio::ip::address remote;
    // Not read from while the other end of its relay catches up (flow control); its
    // silence is then the tracker's doing, not a sign of a dead peer.
    bool held_back = false;
    // A client: when it last held a lease (it may send large frames until a grace
    // period after that; kLargeFrameGrace).
    std::optional<Clock::time_point> last_lease;
    std::string describe() const {
      return str(role == wire::Role::DEVICE ? "device" : "client", " ", name.empty() ? "?" : name, " (",
                 conn->peer(), ")");
    }
  };

  Impl(asio::io_context& io_, TrackerOptions options_)
      : io(io_),
        options(std::move(options_)),
        acceptor(io_),
        heartbeat_timer(io_),
        deadline_timer(io_),
        started_at(Clock::now()),
        pool(options.limits.queue),
        overloaded_frame(failure_frame(ErrorCode::overloaded, "the tracker is at its connection limit; try again later")) {}

  asio::io_context& io;
  TrackerOptions options;
  std::shared_ptr<const TlsContext> tls;  // null: plain frames
  tcp::acceptor acceptor;
  asio::steady_timer heartbeat_timer;
  asio::steady_timer deadline_timer;       // armed for the pool's next request deadline
  std::optional<Clock::time_point> armed;  // what deadline_timer waits for, if anything
  Clock::time_point started_at;
  bool stopping = false;

  std::uint64_t next_connection = 1;
  std::uint64_t heartbeat_seq = 0;
  std::uint64_t rejected = 0;

  std::unordered_map<ConnectionId, Peer> peers;
  Pool pool;

  // Connection caps (TrackerLimits). Every accepted socket counts in `open` until its
  // serve() ends, and in `pending` (in all and by address) until its handshake ends;
  // both are counted when it is accepted, before its coroutine runs.
  std::size_t max_connections = 0;  // the cap in force (fitted to the open-file limit)
  std::size_t open = 0;
  std::size_t pending = 0;
  std::map<asio::ip::address, std::size_t> pending_by_address;
  // Authenticated clients, in all and by address (the rest of the cap is for devices).
  std::size_t client_cap = 0;
  std::size_t clients_open = 0;
  std::map<asio::ip::address, std::size_t> clients_by_address;
  std::uint64_t held_back = 0;  // TrackerStats::held_back
  // Connections in the handshake whose coroutine runs, oldest first (ids increase).
  struct Handshaking {
    std::shared_ptr<Connection> conn;  // null while TLS is being set up
    asio::ip::address remote;
    int fd = -1;                       // the socket's descriptor, for dropping it before then
    // Ends this handshake from outside its coroutine, which then fails and cleans up.
    // `why` is sent first: through the connection, or straight to the socket while the
    // transport is plain (a TLS peer would read it as garbage).
    void abort(const FrameBytes* why, bool plain) const {
      if (conn) {
        if (why) conn->send(*why);
        conn->close_after_flush(std::chrono::milliseconds(200));
      } else if (fd >= 0) {
        if (why && plain) (void)!::send(fd, why->data(), why->size(), MSG_NOSIGNAL | MSG_DONTWAIT);
        ::shutdown(fd, SHUT_RDWR);
      }
    }
  };
  std::map<ConnectionId, Handshaking> handshaking;
  std::uint64_t refused = 0;
  std::uint64_t refused_since_log = 0;
  Clock::time_point refusal_logged_at{};
  const char* refusal_logged_cap = nullptr;
  const FrameBytes overloaded_frame;  // sent as is to a connection past a cap
  std::unordered_map<DeviceId, DeviceInfo> infos;  // what each registered device reported

  // The dashboard: its state is kept always (cheap); the feed, the HTTP server and the
  // publishing timer exist when options.http is set. Snapshots are built on this thread,
  // each interval while someone looks, or at once when the HTTP side asks (refresher).
  DashboardState dashboard;
  std::shared_ptr<DashboardFeed> feed;
  asio::steady_timer publish_timer{io};
  // Set while a refresh is posted and not yet run, so a burst of requests builds once.
  std::shared_ptr<std::atomic<bool>> refresh_posted = std::make_shared<std::atomic<bool>>(false);
  // Handlers posted from the HTTP thread check this before touching the tracker.
  std::shared_ptr<char> alive = std::make_shared<char>(0);
  std::unique_ptr<HttpServer> http;  // declared last: stopped (its thread joined) first

  ~Impl() {
    if (http) http->stop();
  }

  // ---- lifecycle -------------------------------------------------------------

  // Raises the soft open-file limit to the hard one and fits the connection cap under it.
  void fit_connection_cap() {
    max_connections = options.limits.max_connections;
    rlimit limit{};
    if (::getrlimit(RLIMIT_NOFILE, &limit) != 0) {
      log::warn(kLog, "cannot read the open-file limit (", std::strerror(errno), "); keeping --max-connections ",
                max_connections);
      return;
    }
    if (limit.rlim_cur < limit.rlim_max) {
      rlimit raised = limit;
      raised.rlim_cur = limit.rlim_max;
      if (::setrlimit(RLIMIT_NOFILE, &raised) == 0) {
        limit = raised;
      } else {
        log::warn(kLog, "cannot raise the open-file limit from ", limit.rlim_cur, " to ", limit.rlim_max, ": ",
                  std::strerror(errno));
      }
    }
    if (limit.rlim_cur == RLIM_INFINITY) return;
    const auto limit_fds = static_cast<std::size_t>(limit.rlim_cur);
    auto fds = limit_fds;
    std::size_t dashboard_fds = 0;
    if (options.http) {
      // The dashboard's connections share the process's descriptors.
      dashboard_fds = options.http->max_connections + options.http->max_streams;
      fds = fds > dashboard_fds + TrackerLimits::kFdMargin * 2 ? fds - dashboard_fds : fds / 2;
    }
    std::size_t fit = fds > TrackerLimits::kFdMargin * 2 ? fds - TrackerLimits::kFdMargin : fds / 2;
    if (fit < max_connections) {
      log::warn(kLog, "--max-connections ", max_connections, " lowered to ", fit, " to fit the open-file limit of ",
                limit_fds, dashboard_fds ? str(" (", dashboard_fds, " kept for the dashboard)") : std::string());
      max_connections = fit;
    }
  }

  void bind() {
    fit_connection_cap();
    const auto& limits = options.limits;
    client_cap = limits.max_client_connections != 0 ? std::min(limits.max_client_connections, max_connections)
                                                    : std::max<std::size_t>(1, max_connections * 3 / 4);
    std::error_code ec;
    auto address = asio::ip::make_address(options.host, ec);
    if (ec) {
      tcp::resolver resolver(io);
      auto results = resolver.resolve(options.host, std::to_string(options.port), ec);
      if (ec || results.empty()) {
        throw RpcError(ErrorCode::bad_request, str("cannot resolve listen address '", options.host, "'"));
      }
      address = results.begin()->endpoint().address();
    }
    tcp::endpoint endpoint(address, options.port);
    acceptor.open(endpoint.protocol(), ec);
    if (!ec) acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
    if (!ec) acceptor.bind(endpoint, ec);
    if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) {
      throw RpcError(ErrorCode::bad_request,
                     str("cannot listen on ", options.host, ":", options.port, ": ", ec.message()));
    }
  }

  void start() {
    asio::co_spawn(io, accept_loop(), log_exceptions("accept loop"));
    asio::co_spawn(io, heartbeat_loop(), log_exceptions("heartbeat loop"));
    if (http) {
      http->start();
      asio::post(io, [this, weak = std::weak_ptr<char>(alive)] {
        if (weak.lock() && !stopping) publish();
      });
      asio::co_spawn(io, publish_loop(), log_exceptions("dashboard publishing"));
    }
  }

  static std::function<void(std::exception_ptr)> log_exceptions(std::string what) {
    return [what](std::exception_ptr e) {
      if (!e) return;
      try {
        std::rethrow_exception(e);
      } catch (const std::exception& ex) {
        log::error(kLog, "internal error in ", what, ": ", ex.what());
      }
    };
  }

  void stop() {
    if (stopping) return;
    stopping = true;
    log::info(kLog, "shutting down: closing ", peers.size(), " connections");
    std::error_code ec;
    acceptor.close(ec);
    heartbeat_timer.cancel();
    deadline_timer.cancel();
    publish_timer.cancel();
    armed.reset();
    if (http) http->stop();
    for (auto& [id, peer] : peers) {
      peer.conn->send(failure_frame(ErrorCode::shutting_down, "tracker is shutting down"));
      peer.conn->close_after_flush(std::chrono::milliseconds(500));
    }
    for (auto& [id, entry] : handshaking) entry.abort(nullptr, !tls);
  }

  awaitable<void> accept_loop() {
    while (!stopping) {
      auto [ec, socket] = co_await acceptor.async_accept(use_nothrow);
      if (ec) {
        if (stopping || ec == asio::error::operation_aborted) break;
        log::warn(kLog, "accept failed: ", ec.message());
        if (ec == asio::error::no_descriptors) {
          asio::steady_timer pause(io, std::chrono::milliseconds(100));
          co_await pause.async_wait(use_nothrow);
        }
        continue;
      }
      std::error_code address_error;
      auto remote = socket.remote_endpoint(address_error).address();
      if (const char* cap = admit(remote)) {
        refuse(socket, cap);
        continue;
      }
      ++open;
      ++pending;
      ++pending_by_address[remote];
      asio::co_spawn(io, serve(std::move(socket), remote), log_exceptions("connection"));
    }
  }

  // Makes room for a new connection from `remote`, or says which cap refuses it. Past
  // --max-connections the new connection is refused. Past a handshake cap, the oldest
  // connection still in the handshake (from `remote` for the per-address cap) is dropped
  // instead: a peer that completes its handshake takes milliseconds, so the oldest is
  // one that stalls, and a flood of stalled handshakes cannot lock real peers out. When
  // none can be dropped yet (all just accepted), the new one is refused.
  const char* admit(const asio::ip::address& remote) {
    if (open >= max_connections) return "--max-connections";
    auto it = pending_by_address.find(remote);
    if (it != pending_by_address.end() && it->second >= options.limits.max_pending_per_address) {
      if (!drop_oldest_handshake(&remote, "--max-pending-per-address")) return "--max-pending-per-address";
    }
    if (pending >= options.limits.max_pending_connections) {
      if (!drop_oldest_handshake(nullptr, "--max-pending-connections")) return "--max-pending-connections";
    }
    return nullptr;
  }

  bool drop_oldest_handshake(const asio::ip::address* from, const char* cap) {
    for (auto it = handshaking.begin(); it != handshaking.end(); ++it) {
      if (from && it->second.remote != *from) continue;
      Handshaking oldest = std::move(it->second);
      handshaking.erase(it);
      release_pending(oldest.remote);
      oldest.abort(&overloaded_frame, !tls);
      log_refusal(cap, "dropped the oldest connection in the handshake");
      return true;
    }
    return false;
  }

  // Tells a connection past a cap why (one small frame the kernel buffers at once) and
  // closes it, without allocating anything for it. Logged at most once a second per cap.
  void refuse(tcp::socket& socket, const char* cap) {
    std::error_code ignored;
    socket.non_blocking(true, ignored);
    socket.write_some(asio::buffer(overloaded_frame), ignored);
    socket.shutdown(tcp::socket::shutdown_send, ignored);
    // Read what already arrived (e.g. a hello) so that closing does not reset the
    // connection before the peer reads the failure frame.
    static std::array<std::uint8_t, 4096> sink;
    for (int i = 0; i < 4 && socket.read_some(asio::buffer(sink), ignored) > 0;) ++i;
    socket.close(ignored);
    log_refusal(cap, "refused new connections");
  }

  void log_refusal(const char* cap, const char* action) {
    ++refused;
    ++refused_since_log;
    auto now = Clock::now();
    if (cap != refusal_logged_cap || now - refusal_logged_at >= std::chrono::seconds(1)) {
      log::warn(kLog, cap, " reached: ", action, " (", refused_since_log, " since the last report; ", open, " open of ",
                max_connections, ", ", pending, " in the handshake of ",
                options.limits.max_pending_connections, ", at most ", options.limits.max_pending_per_address,
                " per address)");
      refused_since_log = 0;
      refusal_logged_at = now;
      refusal_logged_cap = cap;
    }
  }

  awaitable<void> heartbeat_loop() {
    const auto silence_limit = options.heartbeat_interval * options.heartbeat_misses;
    while (!stopping) {
      heartbeat_timer.expires_after(options.heartbeat_interval);
      auto [ec] = co_await heartbeat_timer.async_wait(use_nothrow);
      if (ec || stopping) break;
      auto now = Clock::now();
      ++heartbeat_seq;
      FrameBytes beat = heartbeat_frame(false, heartbeat_seq);
      for (auto& [id, peer] : peers) {
        if (!peer.conn->is_open()) continue;
        if (!peer.held_back && now - peer.last_seen > silence_limit) {
          peer.close_reason = str("no heartbeat for ", ms_between(peer.last_seen, now), " ms");
          log::warn(kLog, peer.describe(), ": ", peer.close_reason, "; dropping it");
          peer.conn->close();
        } else {
          peer.conn->send(beat);
        }
      }
    }
  }

  // Keeps deadline_timer armed for the pool's earliest request deadline; when it fires,
  // the pool fails what has expired. Called after every pool change that can add or
  // remove a deadline.
  void schedule_expiry() {
    if (stopping) return;
    std::optional<Clock::time_point> next = pool.next_deadline();
    if (next == armed) return;
    armed = next;
    if (!next) {
      deadline_timer.cancel();
      return;
    }
    deadline_timer.expires_at(*next);  // cancels the previous wait
    deadline_timer.async_wait([this](std::error_code ec) {
      if (ec) return;
      armed.reset();
      deliver(pool.expire(Clock::now()));
      schedule_expiry();
    });
  }

  // ---- the dashboard -------------------------------------------------------------

  // Creates the feed and the HTTP server (bound now) when options.http is set. Its
  // requests must prove the client token or the any-role token (never the device
  // token); with one, it speaks HTTPS with the tracker's certificate, or with a
  // certificate of its own when the tracker runs without TLS (--no-tls).
  void make_http() {
    if (!options.http) return;
    std::vector<Token> tokens;
    if (options.client_token) tokens.push_back(*options.client_token);
    if (options.token) tokens.push_back(*options.token);
    std::shared_ptr<const TlsContext> http_tls;
    if (!tokens.empty()) {
      http_tls = tls;
      if (!http_tls) {
        http_tls = TlsContext::server(options.tls_cert, options.tls_key);
        if (http_tls->generated_certificate()) {
          log::info(kLog, "dashboard: HTTPS with a self-signed certificate generated at start, SHA-256 fingerprint ",
                    http_tls->fingerprint());
        }
      }
    }
    feed = std::make_shared<DashboardFeed>();
    feed->set_refresher([&io = io, posted = refresh_posted, weak = std::weak_ptr<char>(alive), self = this] {
      if (posted->exchange(true)) return;  // one is on its way
      asio::post(io, [posted, weak, self] {
        posted->store(false);
        if (weak.lock() && !self->stopping) self->publish();
      });
    });
    http = std::make_unique<HttpServer>(*options.http, feed, std::move(tokens), std::move(http_tls));
  }

  TrackerFacts facts() {
    TrackerFacts f;
    f.version = std::string(software_version());
    std::error_code ec;
    auto endpoint = acceptor.local_endpoint(ec);
    f.address = ec ? std::string("?") : Endpoint{endpoint.address().to_string(), endpoint.port()}.to_string();
    f.tls = static_cast<bool>(tls);
    f.auth = any_token();
    f.started_at = started_at;
    for (const auto& [id, peer] : peers) {
      (peer.role == wire::Role::DEVICE ? f.device_connections : f.client_connections) += 1;
    }
    f.handshaking = pending;
    f.refused_connections = refused;
    f.rejected_connections = rejected;
    f.last_seen = [this](ConnectionId id) -> std::optional<Clock::time_point> {
      auto it = peers.find(id);
      if (it == peers.end()) return std::nullopt;
      return it->second.last_seen;
    };
    return f;
  }

  DashboardSnapshot build_snapshot() { return dashboard.snapshot(pool, facts(), Clock::now()); }

  void publish() {
    if (feed) feed->publish(build_snapshot());
  }

  awaitable<void> publish_loop() {
    while (!stopping) {
      publish_timer.expires_after(options.http->interval);
      auto [ec] = co_await publish_timer.async_wait(use_nothrow);
      if (ec || stopping) break;
      if (feed->wanted(Clock::now())) publish();
    }
  }

  // ---- one connection ----------------------------------------------------------

  bool any_token() const { return options.token || options.device_token || options.client_token; }

  void make_tls_context() {
    if (options.no_tls || (!any_token() && options.tls_cert.empty())) return;
    tls = TlsContext::server(options.tls_cert, options.tls_key);
    if (tls->generated_certificate()) {
      log::info(kLog, "TLS with a self-signed certificate generated at start, SHA-256 fingerprint ",
                tls->fingerprint(), " (pass --tls-cert/--tls-key for one peers can pin with --tls-ca)");
    } else {
      log::info(kLog, "TLS with certificate '", options.tls_cert, "', SHA-256 fingerprint ", tls->fingerprint());
    }
  }

  // Serves one connection until it ends. Whatever ends it (an orderly close, a protocol
  // violation, any exception from the transport, the handshake or a handler), the socket
  // is closed and the peer dropped here, so no connection can outlive its coroutine.
  awaitable<void> serve(tcp::socket socket, asio::ip::address remote) {
    ConnectionId id(next_connection++);
    // Until TLS (or the plain transport) is set up there is no Connection; the socket's
    // descriptor lets a cap drop this handshake meanwhile (shutdown, not close: the socket
    // still owns it).
    handshaking.emplace(id, Handshaking{nullptr, remote, socket.native_handle()});
    std::shared_ptr<Connection> conn;
    std::string failure;
    try {
      co_await serve_peer(std::move(socket), conn, id, remote);
    } catch (const RpcError& e) {
      failure = e.what();
    } catch (const kj::Exception& e) {
      failure = str("malformed input: ", e.getDescription().cStr());
    } catch (const std::exception& e) {
      failure = e.what();
    } catch (...) {
      failure = "unknown error";
    }
    end_handshake(id, remote);
    Peer* peer = find_peer(id);
    if (!failure.empty()) {
      ++rejected;
      log::warn(kLog, peer ? peer->describe() : str(remote.to_string()), ": ", failure, "; closing this connection");
      if (peer && peer->close_reason.empty()) peer->close_reason = failure;
      if (conn && !conn->is_closing()) conn->send(failure_frame(ErrorCode::protocol_error, failure));
    }
    drop_peer(id);
    if (conn) conn->close_after_flush(std::chrono::milliseconds(200));
    --open;
  }

  // The connection left the handshake (authenticated, refused or gone).
  void end_handshake(ConnectionId id, const asio::ip::address& remote) {
    if (handshaking.erase(id) != 0) release_pending(remote);
  }

  void release_pending(const asio::ip::address& remote) {
    --pending;
    auto it = pending_by_address.find(remote);
    if (it != pending_by_address.end() && --it->second == 0) pending_by_address.erase(it);
  }

  awaitable<void> serve_peer(tcp::socket socket, std::shared_ptr<Connection>& conn, ConnectionId id,
                             asio::ip::address remote) {
    TrackerHandshakeOptions hs;
    hs.token = options.token ? &*options.token : nullptr;
    hs.device_token = options.device_token ? &*options.device_token : nullptr;
    hs.client_token = options.client_token ? &*options.client_token : nullptr;
    hs.connection_id = id;
    hs.timeout = options.handshake_timeout;
    hs.heartbeat_interval = options.heartbeat_interval;
    hs.heartbeat_misses = options.heartbeat_misses;
    // Clients may report their sessions when there is a dashboard to show them on (a
    // device that sends one anyway breaks the protocol: on_device_frame).
    hs.accepts_reports = options.http.has_value();
    hs.admit = [this, remote](wire::Role role) { return admit_role(role, remote); };
    PeerHello hello;
    try {
      conn = co_await accept_transport(std::move(socket), tls, options.connection, options.handshake_timeout);
      auto pending_entry = handshaking.find(id);
      if (pending_entry == handshaking.end()) co_return;  // dropped by a cap meanwhile
      pending_entry->second.conn = conn;
      hello = co_await accept_handshake(conn, hs);
    } catch (const RpcError& e) {
      ++rejected;
      log::warn(kLog, "rejected connection from ", remote.to_string(), ": ", e.what());
      co_return;
    }
    end_handshake(id, remote);
    if (stopping) {
      conn->send(failure_frame(ErrorCode::shutting_down, "tracker is shutting down"));
      conn->close_after_flush();
      co_return;
    }
    Peer& peer = peers[id];
    peer.id = id;
    peer.conn = conn;
    peer.role = hello.role;
    peer.name = hello.name;
    peer.last_seen = Clock::now();
    peer.remote = remote;
    if (peer.role == wire::Role::CLIENT) {
      ++clients_open;
      ++clients_by_address[remote];
      // Nothing large to send before it holds a lease (see kLargeFrameGrace).
      conn->allow_large_frames(false);
    }
    log::info(kLog, "accepted ", peer.describe(), " as connection ", id.value);
    if (peer.role == wire::Role::CLIENT) dashboard.client_connected(id, peer.name, conn->peer(), peer.last_seen);

    while (true) {
      if (peer.role == wire::Role::CLIENT) update_frame_allowance(peer);
      ReadResult r = co_await conn->read();
      if (r.error != FrameError::none) {
        if (r.error != FrameError::closed) {
          ++rejected;
          log::warn(kLog, peer.describe(), ": ", to_string(r.error), ": ", r.detail, "; closing this connection");
          if (peer.close_reason.empty()) peer.close_reason = str(to_string(r.error), ": ", r.detail);
          conn->send(failure_frame(ErrorCode::protocol_error, str(to_string(r.error), ": ", r.detail)));
          conn->close_after_flush();
        } else if (peer.close_reason.empty()) {
          peer.close_reason = "disconnected";
        }
        break;
      }
      peer.last_seen = Clock::now();
      std::shared_ptr<Connection> relayed_to;  // the other end, when the frame was relayed
      try {
        if (peer.role == wire::Role::DEVICE) {
          relayed_to = on_device_frame(peer, *r.frame);
        } else {
          relayed_to = on_client_frame(peer, *r.frame);
        }
      } catch (const Violation& e) {
        ++rejected;
        peer.close_reason = e.what();
        log::warn(kLog, peer.describe(), ": ", e.what(), "; closing this connection");
        conn->send(failure_frame(e.code(), e.what()));
        conn->close_after_flush();
        break;
      } catch (const kj::Exception& e) {
        ++rejected;
        peer.close_reason = str("malformed frame: ", e.getDescription().cStr());
        log::warn(kLog, peer.describe(), ": ", peer.close_reason, "; closing this connection");
        conn->send(failure_frame(ErrorCode::protocol_error, peer.close_reason));
        conn->close_after_flush();
        break;
      }
      if (conn->is_closing()) break;
      r.frame.reset();
      if (relayed_to && relayed_to->queued_bytes() > options.limits.relay_window_bytes) {
        // Flow control: the other end is behind. Read nothing more from this sender
        // (TCP pushes back on it) until half the window is out.
        ++held_back;
        peer.held_back = true;
        co_await relayed_to->drained(options.limits.relay_window_bytes / 2);
        Peer* still = find_peer(id);
        if (!still) break;
        still->held_back = false;
        still->last_seen = Clock::now();
        if (conn->is_closing()) break;
      }
    }
  }

  // Whether a client passes the connection caps of clients (checked once it has proved
  // its token, before its welcome); devices always may, up to --max-connections, which
  // keeps the rest of that cap for them. Empty: admitted.
  std::string admit_role(wire::Role role, const asio::ip::address& remote) {
    if (role != wire::Role::CLIENT) return {};
    const auto& limits = options.limits;
    const char* cap = nullptr;
    std::string why;
    auto it = clients_by_address.find(remote);
    if (it != clients_by_address.end() && it->second >= limits.max_client_connections_per_address) {
      cap = "--max-client-connections-per-address";
      why = str("this address already has ", it->second, " client connections open, the most the tracker allows ",
                "(--max-client-connections-per-address); try again later");
    } else if (clients_open >= client_cap) {
      cap = "--max-client-connections";
      why = str("the tracker's ", client_cap, " connections for clients are all taken (the rest of --max-connections ",
                "is kept for devices); try again later");
    }
    if (cap) log_refusal(cap, "refused an authenticated client");
    return why;
  }

  // A client may send frames up to the authenticated limit (uploads) while it holds a
  // lease and for kLargeFrameGrace after its last one ended (its uploads in flight);
  // otherwise the pre-authentication limit, so connections that hold no device cannot
  // make the tracker buffer large frames.
  static constexpr std::chrono::seconds kLargeFrameGrace{30};
  void update_frame_allowance(Peer& peer) {
    bool holds = pool.leases_held(peer.id) > 0;
    if (holds) peer.last_lease = Clock::now();
    peer.conn->allow_large_frames(holds || (peer.last_lease && Clock::now() - *peer.last_lease < kLargeFrameGrace));
  }

  void drop_peer(ConnectionId id) {
    auto it = peers.find(id);
    if (it == peers.end()) return;
    Peer& peer = it->second;
    log::info(kLog, peer.describe(), " gone: ", peer.close_reason);
    if (peer.device) {
      std::string key = pool.device(peer.device)->key;
      dashboard.device_lost(*pool.device(peer.device), peer.close_reason, Clock::now());
      deliver(pool.remove_device(peer.device, peer.close_reason));
      log::info(kLog, "removed device ", peer.device.value, " '", peer.name, "' (key '", key, "'): ", peer.close_reason);
      infos.erase(peer.device);
    }
    if (peer.role == wire::Role::CLIENT) {
      --clients_open;
      auto counted = clients_by_address.find(peer.remote);
      if (counted != clients_by_address.end() && --counted->second == 0) clients_by_address.erase(counted);
      deliver(pool.remove_client(id));
      schedule_expiry();
      dashboard.client_left(id, peer.close_reason, Clock::now());
    }
    peer.conn->close_after_flush(std::chrono::milliseconds(200));
    peers.erase(it);
  }

  // ---- pool events -> frames ---------------------------------------------------

  Peer* find_peer(ConnectionId id) {
    auto it = peers.find(id);
    return it == peers.end() ? nullptr : &it->second;
  }

  void deliver(const Events& events) {
    if (events.empty()) return;
    dashboard.observe(events, pool, Clock::now());
    for (const Event& event : events) std::visit([this](const auto& e) { on_event(e); }, event);
  }

  void on_event(const Granted& granted) {
    Peer* client = find_peer(granted.client);
    Peer* device_peer = find_peer(granted.device_connection);
    const DeviceInfo& info = infos.at(granted.device);
    if (device_peer) {
      capnp::MallocMessageBuilder builder;
      auto started = builder.initRoot<wire::Frame>().initLeaseStarted();
      started.setLeaseId(granted.lease.value);
      started.setHolder(client ? client->describe() : std::string("?"));
      device_peer->conn->send(builder);
    }
    if (client) {
      client->last_lease = Clock::now();
      client->conn->allow_large_frames(true);
      capnp::MallocMessageBuilder builder;
      auto grant = builder.initRoot<wire::Frame>().initGrant();
      grant.setRequestId(granted.request_id);
      grant.setLeaseId(granted.lease.value);
      grant.setDeviceId(granted.device.value);
      to_wire(info, grant.initInfo());
      client->conn->send(builder);
      log::debug(kLog, "lease ", granted.lease.value, ": device '", info.name, "' to ", client->describe());
    }
  }

  void on_event(const RequestFailed& failed) {
    Peer* client = find_peer(failed.client);
    std::string who = client ? client->describe() : str("connection ", failed.client.value);
    if (failed.reason == RequestFailed::Reason::client_gone) {
      log::info(kLog, "dropped queued request ", failed.request_id, " for key '", failed.key, "' of ", who);
      return;
    }
    if (failed.reason == RequestFailed::Reason::timeout) {
      log::info(kLog, "request ", failed.request_id, " of ", who, " timed out: ", failed.message);
    }
    if (!client) return;
    capnp::MallocMessageBuilder builder;
    auto frame = builder.initRoot<wire::Frame>().initRequestFailed();
    frame.setRequestId(failed.request_id);
    frame.getFailure().setCode(to_wire(code_of(failed.reason)));
    frame.getFailure().setMessage(failed.message);
    client->conn->send(builder);
  }

  void on_event(const LeaseEnded& ended) {
    Peer* peer = find_peer(ended.to);
    switch (ended.reason) {
      case LeaseEnded::Reason::device_lost:
        log::warn(kLog, "lease ", ended.lease.value, " of ", peer ? peer->describe() : std::string("?"),
                  " failed: ", ended.message);
        break;
      case LeaseEnded::Reason::holder_gone:
        log::info(kLog, "lease ", ended.lease.value, " reclaimed: its holder disconnected");
        break;
      case LeaseEnded::Reason::released:
      case LeaseEnded::Reason::not_held: break;
    }
    if (!peer) return;
    if (peer->role == wire::Role::CLIENT && ended.reason != LeaseEnded::Reason::not_held) {
      peer->last_lease = Clock::now();
    }
    send_lease_ended(*peer, ended.lease, ended.reason == LeaseEnded::Reason::released, code_of(ended.reason),
                     ended.message);
  }

  static void send_lease_ended(Peer& peer, LeaseId lease, bool released, ErrorCode code, const std::string& message) {
    capnp::MallocMessageBuilder builder;
    auto ended = builder.initRoot<wire::Frame>().initLeaseEnded();
    ended.setLeaseId(lease.value);
    ended.setReleased(released);
    if (!released) {
      ended.getFailure().setCode(to_wire(code));
      ended.getFailure().setMessage(message);
    }
    peer.conn->send(builder);
  }

  // ---- devices -------------------------------------------------------------------

  // Returns the connection a relayed frame was queued on (null for anything else).
  std::shared_ptr<Connection> on_device_frame(Peer& peer, const InFrame& frame) {
    auto root = frame.root();
    switch (root.which()) {
      case wire::Frame::REGISTER: on_register(peer, root.getRegister()); break;
      case wire::Frame::HEARTBEAT: peer.conn->send(heartbeat_frame(true, root.getHeartbeat().getSeq())); break;
      case wire::Frame::HEARTBEAT_ACK: break;
      case wire::Frame::RELAY: return relay_from_device(peer, frame);
      case wire::Frame::FAILURE:
        log::warn(kLog, peer.describe(), " reports: ", root.getFailure().getMessage().cStr());
        break;
      default:
        throw Violation(ErrorCode::protocol_error, str("unexpected frame '", frame_kind(root), "' from a device"));
    }
    return nullptr;
  }

  void on_register(Peer& peer, wire::Register::Reader reg) {
    if (peer.device) throw Violation(ErrorCode::protocol_error, "device registered twice on one connection");
    std::string key = reg.getKey().cStr();
    DeviceInfo info = from_wire(reg.getInfo());
    if (info.name.empty()) info.name = peer.conn->peer();
    Registration registration = pool.add_device(peer.id, key, info.name, peer.conn->peer(), Clock::now());
    if (!registration.device) throw Violation(ErrorCode::bad_request, registration.refusal);
    peer.device = registration.device;
    peer.name = info.name;
    log::info(kLog, "registered device ", peer.device.value, " '", info.name, "' under key '", key, "' (",
              info.triple, ", ", info.cores, " cores)");
    dashboard.device_joined(*pool.device(peer.device), info, Clock::now());
    infos.emplace(peer.device, std::move(info));

    capnp::MallocMessageBuilder builder;
    builder.initRoot<wire::Frame>().initRegistered().setDeviceId(peer.device.value);
    peer.conn->send(builder);
    deliver(registration.events);
    schedule_expiry();
  }

  std::shared_ptr<Connection> relay_from_device(Peer& peer, const InFrame& frame) {
    LeaseId lease_id(frame.root().getRelay().getLeaseId());
    const PoolLease* lease = pool.lease(lease_id);
    if (!lease || lease->device != peer.device) {
      log::debug(kLog, peer.describe(), " relayed for lease ", lease_id.value, " which it does not hold; dropped");
      return nullptr;
    }
    Peer* client = find_peer(lease->client);
    if (!client) return nullptr;
    client->conn->send(encode_raw(frame.bytes()));
    return client->conn;
  }

  // ---- clients -------------------------------------------------------------------

  // Returns the connection a relayed frame was queued on (null for anything else).
  std::shared_ptr<Connection> on_client_frame(Peer& peer, const InFrame& frame) {
    auto root = frame.root();
    switch (root.which()) {
      case wire::Frame::REQUEST_DEVICE: on_request(peer, root.getRequestDevice()); break;
      case wire::Frame::CANCEL_REQUEST:
        deliver(pool.cancel(peer.id, root.getCancelRequest().getRequestId()));
        schedule_expiry();
        break;
      case wire::Frame::RELEASE:
        deliver(pool.release(peer.id, LeaseId(root.getRelease().getLeaseId())));
        schedule_expiry();
        break;
      case wire::Frame::RELAY: return relay_from_client(peer, frame);
      case wire::Frame::SUMMARY_REQUEST: send_summary(peer, root.getSummaryRequest().getRequestId()); break;
      case wire::Frame::SESSION_REPORT:
        if (!dashboard.report(peer.id, from_wire(root.getSessionReport()), Clock::now())) {
          log::debug(kLog, peer.describe(), ": session report dropped (the dashboard's session caps are reached)");
        }
        break;
      case wire::Frame::HEARTBEAT: peer.conn->send(heartbeat_frame(true, root.getHeartbeat().getSeq())); break;
      case wire::Frame::HEARTBEAT_ACK: break;
      default:
        throw Violation(ErrorCode::protocol_error, str("unexpected frame '", frame_kind(root), "' from a client"));
    }
    return nullptr;
  }

  void on_request(Peer& peer, wire::RequestDevice::Reader request) {
    std::string key = request.getKey().cStr();
    dashboard.request_submitted(peer.id, key, Clock::now());
    log::debug(kLog, peer.describe(), " requests key '", key, "' priority ", request.getPriority(), " (request ",
               request.getRequestId(), ")");
    deliver(pool.submit(peer.id, request.getRequestId(), key, request.getPriority(),
                        std::chrono::milliseconds(request.getTimeoutMs()), Clock::now()));
    schedule_expiry();
  }

  std::shared_ptr<Connection> relay_from_client(Peer& peer, const InFrame& frame) {
    LeaseId lease_id(frame.root().getRelay().getLeaseId());
    const PoolLease* lease = pool.lease_of(peer.id, lease_id);
    if (!lease) {
      send_lease_ended(peer, lease_id, false, ErrorCode::no_such_lease, lease_not_held_message(lease_id));
      return nullptr;
    }
    const PoolDevice* device = pool.device(lease->device);
    Peer* device_peer = device ? find_peer(device->connection) : nullptr;
    if (!device_peer) return nullptr;
    device_peer->conn->send(encode_raw(frame.bytes()));
    return device_peer->conn;
  }

  void send_summary(Peer& peer, std::uint64_t request_id) {
    auto now = Clock::now();
    PoolSummary state = pool.summary();
    capnp::MallocMessageBuilder builder;
    auto summary = builder.initRoot<wire::Frame>().initSummary();
    summary.setRequestId(request_id);
    summary.setTrackerVersion(std::string(software_version()));
    summary.setUptimeMs(ms_between(started_at, now));
    unsigned clients = 0;
    for (const auto& [id, p] : peers) clients += p.role == wire::Role::CLIENT ? 1 : 0;
    summary.setClients(clients);

    auto key_list = summary.initKeys(static_cast<unsigned>(state.keys.size()));
    unsigned i = 0;
    for (const PoolKeySummary& key : state.keys) {
      key_list[i].setKey(key.key);
      key_list[i].setFree(key.free);
      key_list[i].setBusy(key.busy);
      key_list[i].setQueued(key.queued);
      ++i;
    }

    auto device_list = summary.initDevices(static_cast<unsigned>(state.devices.size()));
    i = 0;
    for (const PoolDevice* device : state.devices) {
      auto d = device_list[i++];
      d.setDeviceId(device->id.value);
      d.setKey(device->key);
      to_wire(infos.at(device->id), d.initInfo());
      d.setAddress(device->address);
      d.setBusy(static_cast<bool>(device->lease));
      d.setConnectedMs(ms_between(device->registered_at, now));
      if (device->lease) {
        d.setLeaseId(device->lease.value);
        if (Peer* holder = find_peer(pool.lease(device->lease)->client)) d.setLeaseHolder(holder->describe());
      }
    }
    peer.conn->send(builder);
  }
};

Tracker::Tracker(asio::io_context& io, TrackerOptions options)
    : impl_(std::make_unique<Impl>(io, std::move(options))) {
  impl_->make_tls_context();
  impl_->bind();
  impl_->make_http();
}

Tracker::~Tracker() = default;

void Tracker::start() {
  const auto& o = impl_->options;
  const char* auth = o.device_token || o.client_token ? " (device and client tokens required"
                     : o.token                        ? " (token required"
                                                      : " (no token";
  const char* transport = impl_->tls ? ", TLS)" : o.token || o.device_token || o.client_token ? ", frame MACs without TLS)" : ")";
  log::info(kLog, "listening on ", address(), auth, transport,
            "; dead peers are dropped within ", loss_bound().count(), " ms");
  const TrackerLimits& limits = impl_->options.limits;
  log::info(kLog, "caps: ", impl_->max_connections, " connections (", impl_->client_cap, " for clients, ",
            limits.max_client_connections_per_address, " clients per address), ", limits.max_pending_connections,
            " in the handshake (", limits.max_pending_per_address, " per address), ",
            limits.queue.max_queued_per_client, " queued requests per client, ", limits.queue.max_queued_total,
            " in all; relays pause their sender past ", limits.relay_window_bytes >> 20, " MiB queued");
  impl_->start();
  if (impl_->http) {
    const HttpOptions& http = *impl_->options.http;
    log::info(kLog, "dashboard at ", impl_->http->url(),
              impl_->options.client_token || impl_->options.token
                  ? " (requests must carry the client token or the shared token)"
                  : "",
              "; caps: ", http.max_connections, " connections (", http.max_connections_per_address,
              " per address), ", http.max_streams, " streams (", http.max_streams_per_address,
              " per address), headers within ", http.header_timeout.count(), " ms");
  }
}

void Tracker::stop() { impl_->stop(); }

std::uint16_t Tracker::port() const {
  std::error_code ec;
  auto endpoint = impl_->acceptor.local_endpoint(ec);
  return ec ? 0 : endpoint.port();
}

std::string Tracker::address() const {
  std::error_code ec;
  auto endpoint = impl_->acceptor.local_endpoint(ec);
  if (ec) return "?";
  return Endpoint{endpoint.address().to_string(), endpoint.port()}.to_string();
}

std::shared_ptr<const rpc::TlsContext> Tracker::tls() const { return impl_->tls; }

std::chrono::milliseconds Tracker::loss_bound() const {
  return impl_->options.heartbeat_interval * (impl_->options.heartbeat_misses + 1);
}

TrackerStats Tracker::stats() const {
  TrackerStats s;
  PoolCounts counts = impl_->pool.counts();
  s.devices = counts.devices;
  for (const auto& [id, peer] : impl_->peers) s.clients += peer.role == wire::Role::CLIENT ? 1 : 0;
  s.leases = counts.leases;
  s.queued = counts.queued;
  s.grants = counts.grants;
  s.rejected_connections = impl_->rejected;
  s.refused_connections = impl_->refused;
  s.connections = impl_->open;
  s.pending_connections = impl_->pending;
  s.held_back = impl_->held_back;
  return s;
}

std::size_t Tracker::max_connections() const { return impl_->max_connections; }

std::size_t Tracker::max_client_connections() const { return impl_->client_cap; }

std::uint16_t Tracker::http_port() const { return impl_->http ? impl_->http->port() : 0; }

std::string Tracker::http_url() const { return impl_->http ? impl_->http->url() : std::string(); }

std::shared_ptr<DashboardFeed> Tracker::dashboard_feed() const { return impl_->feed; }

DashboardSnapshot Tracker::dashboard_snapshot() { return impl_->build_snapshot(); }

}  // namespace kestrel::tracker
