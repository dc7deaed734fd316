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
  std::size_t max_connections = 64;   // open HTTP connections; past it new ones are closed at once
  std::size_t max_request_bytes = 8192;  // request line + headers + body
  // A request must arrive whole within request_timeout of its first byte (of the
  // connection, for the first one); a kept-alive connection idle for idle_timeout is
  // closed; an open /api/stream gets a comment line every stream_keepalive.
  std::chrono::milliseconds request_timeout{30000};
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
