// The tracker: a broker for a pool of devices. Devices connect out to it, register
// under a key and stay connected; clients request a device of a key, get a lease, and
// exchange session traffic with it through the tracker. See docs/architecture.md.
// The scheduling state and rules are the Pool (pool.h); this is the network server
// around it: connections, handshakes, heartbeats, relaying and the request deadlines'
// timer.
//
// Runs on one io_context thread; all methods must be called from that thread (or
// before io_context::run starts).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "kestrel/rpc/asio.h"
#include "kestrel/rpc/auth.h"
#include "kestrel/rpc/connection.h"
#include "kestrel/rpc/tls.h"
#include "kestrel/tracker/http_server.h"
#include "kestrel/tracker/pool.h"

namespace kestrel::tracker {

// Caps that keep one peer, or a flood of them, from exhausting the tracker. A connection
// past max_connections gets a `failure {overloaded}` frame and is closed at once, before
// anything is allocated for it. Past a handshake cap, the oldest connection still in the
// handshake (of that address, for the per-address cap) gets that failure and is closed
// instead, so stalled handshakes cannot lock real peers out. A request past a queue cap
// gets `requestFailed {overloaded}`.
struct TrackerLimits {
  // Open connections in all, handshaking or not. Never more than the process's open-file
  // limit minus kFdMargin (the tracker raises its soft limit to the hard one at start).
  std::size_t max_connections = 1000;
  // Connections still in the handshake, in all and per remote address.
  std::size_t max_pending_connections = 64;
  std::size_t max_pending_per_address = 16;
  // Authenticated client connections, in all (0: three quarters of max_connections; the
  // rest stay free for devices) and per remote address. A client past either gets
  // `failure {overloaded}` in place of its welcome.
  std::size_t max_client_connections = 0;
  std::size_t max_client_connections_per_address = 64;
  // Flow control of relayed traffic: once this many bytes wait to be sent to the other
  // end of a lease, the tracker stops reading from the sender until half of them are
  // out. So what one lease holds in the tracker is bounded by this plus one frame in
  // each direction (docs/security.md states the bound).
  std::size_t relay_window_bytes = 16u << 20;
  // Queued device requests (PoolLimits).
  PoolLimits queue;
  static constexpr std::size_t kFdMargin = 64;
};

struct TrackerOptions {
  std::string host = "127.0.0.1";
  std::uint16_t port = 9190;  // 0: any free port (see Tracker::port())
  // Tokens: a peer proves the one of the role it announces (device_token, client_token),
  // or `token` for a role without its own. A role with no token is not authenticated.
  std::optional<rpc::Token> token;
  std::optional<rpc::Token> device_token;
  std::optional<rpc::Token> client_token;
  // TLS on every connection whenever a token is set (or a certificate is given), unless
  // no_tls: then frames after the handshake carry MACs. Without tls_cert/tls_key a
  // self-signed certificate is generated at start (its fingerprint is logged).
  bool no_tls = false;
  std::string tls_cert;
  std::string tls_key;
  // Every connection gets a heartbeat each interval; one silent for
  // interval * misses is closed, so a dead peer is noticed within
  // interval * (misses + 1).
  std::chrono::milliseconds heartbeat_interval{1000};
  std::uint32_t heartbeat_misses = 3;
  std::chrono::milliseconds handshake_timeout{5000};
  rpc::ConnectionOptions connection;
  TrackerLimits limits;
  // The dashboard (HttpServer): off when unset. Its requests must prove the client token
  // or the any-role token when one is set (never the device token), and it then speaks
  // HTTPS with the tracker's certificate, or a self-signed one made at start under
  // no_tls; without those tokens, plain HTTP (`kestrel tracker` keeps that on loopback
  // unless --insecure-no-token). With it, clients are offered to report their sessions.
  std::optional<HttpOptions> http;
};

struct TrackerStats {
  std::size_t devices = 0;
  std::size_t clients = 0;
  std::size_t leases = 0;
  std::size_t queued = 0;
  std::uint64_t grants = 0;
  std::uint64_t rejected_connections = 0;  // failed handshakes and protocol errors
  std::uint64_t refused_connections = 0;   // closed at once: a connection cap was reached
  std::size_t connections = 0;             // open now, handshaking or not
  std::size_t pending_connections = 0;     // open now and still in the handshake
  std::uint64_t held_back = 0;             // times a relay stopped reading its sender (flow control)
};

class Tracker {
 public:
  // Binds and listens (the dashboard too, when options.http is set). Throws
  // rpc::RpcError(bad_request) with the address and the reason when it cannot.
  Tracker(asio::io_context& io, TrackerOptions options);
  ~Tracker();
  Tracker(const Tracker&) = delete;
  Tracker& operator=(const Tracker&) = delete;

  // Starts accepting connections and the heartbeat clock.
  void start();
  // Stops accepting, tells every peer the tracker is shutting down, and closes all
  // connections; io_context::run returns once they are gone. Idempotent.
  void stop();

  std::uint16_t port() const;
  std::string address() const;
  // Upper bound on the time to notice a silent peer: interval * (misses + 1).
  std::chrono::milliseconds loss_bound() const;
  // The TLS context connections are accepted with; null when plain.
  std::shared_ptr<const rpc::TlsContext> tls() const;
  TrackerStats stats() const;
  // The connection cap in force: TrackerLimits::max_connections, lowered to fit the
  // open-file limit.
  std::size_t max_connections() const;
  // The cap on client connections in force (the rest of max_connections is for devices).
  std::size_t max_client_connections() const;
  // The dashboard's port and address ("http(s)://HOST:PORT/"); 0 and "" when it is off.
  std::uint16_t http_port() const;
  std::string http_url() const;
  // The feed the dashboard's snapshots are published into; null when it is off.
  std::shared_ptr<DashboardFeed> dashboard_feed() const;
  // Builds a snapshot of the dashboard now (with or without the HTTP server), without
  // publishing it. On the tracker's thread only, like every other call but the feed's.
  DashboardSnapshot dashboard_snapshot();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kestrel::tracker
