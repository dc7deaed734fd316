// The tracker's dashboard server: the page (assets embedded in the binary), the JSON
// API, the live stream of snapshots (server-sent events) and Prometheus /metrics, over
// HTTP/1.1 (Boost.Beast) on its own thread, serving what the tracker publishes into a
// DashboardFeed. With tokens, every request must prove one (a bearer token, or the
// cookie the login page sets) and the server speaks HTTPS only. See docs/dashboard.md.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kestrel/rpc/auth.h"
#include "kestrel/tracker/dashboard_feed.h"

// Declared, not included: the server is built on Boost.Asio, which cannot share a
// translation unit with the tracker's standalone Asio (kestrel/rpc/tls.h).
namespace kestrel::rpc {
class TlsContext;
}

namespace kestrel::tracker {

struct HttpOptions {
  std::string host = "127.0.0.1";
  std::uint16_t port = 0;  // 0: any free port (see HttpServer::port())
  // While someone looks, the tracker publishes a snapshot this often (the live pages'
  // cadence).
  std::chrono::milliseconds interval{1000};
  std::size_t max_request_bytes = 8192;  // request line + headers + body

  // Caps against floods of connections (docs/dashboard.md, "Limits"). Connections other
  // than open streams: at most max_connections in all and max_connections_per_address
  // from one remote address (IPv6: one /64). Past either cap the server makes room by
  // closing the connection that has waited on its client longest (one that has not sent
  // a whole request, is idle between requests, or is not taking its answer; that
  // address's own first, for the per-address cap) rather than refusing the newcomer; a
  // newcomer is closed at once only when every counted connection is busy on the
  // server's side. Open /api/stream connections are counted apart and never closed to
  // make room: at most max_streams, max_streams_per_address from one address; past
  // those a stream request gets 503. 0 in any cap: 1.
  std::size_t max_connections = 512;
  std::size_t max_connections_per_address = 32;
  std::size_t max_streams = 64;
  std::size_t max_streams_per_address = 16;
  // A request's line and headers must arrive within header_timeout (the first request's
  // of the connection's start, so the TLS handshake counts too; a later one's of its
  // first byte), and the whole request within request_timeout; a kept-alive connection
  // idle for idle_timeout is closed; an open /api/stream gets a comment line every
  // stream_keepalive.
  std::chrono::milliseconds header_timeout{5000};
  std::chrono::milliseconds request_timeout{10000};
  std::chrono::milliseconds idle_timeout{60000};
  std::chrono::milliseconds stream_keepalive{15000};
};

class HttpServer {
 public:
  // Binds and listens now; throws rpc::RpcError(bad_request) with the address and the
  // reason when it cannot. `tokens`: a request must prove one of them (empty: no
  // authentication). `tls`: HTTPS with this server context (null: plain HTTP).
  HttpServer(HttpOptions options, std::shared_ptr<DashboardFeed> feed, std::vector<rpc::Token> tokens,
             std::shared_ptr<const rpc::TlsContext> tls);
  ~HttpServer();  // stop()
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Starts serving on the server's own thread.
  void start();
  // Closes the listener and every connection, and joins the thread. Idempotent.
  void stop();

  std::uint16_t port() const;
  // "http://127.0.0.1:9191/" or "https://..."
  std::string url() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kestrel::tracker
