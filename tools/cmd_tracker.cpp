// `kestrel tracker`: runs the tracker until SIGINT/SIGTERM.
#include <csignal>
#include <fstream>
#include <iostream>

#include "args.h"
#include "report_error.h"
#include "commands.h"
#include "kestrel/rpc/errors.h"
#include "kestrel/base/log.h"
#include "kestrel/tracker/tracker.h"

namespace kestrel::tools {
namespace {

bool is_loopback(const std::string& host) {
  if (host == "localhost") return true;
  std::error_code ec;
  auto address = asio::ip::make_address(host, ec);
  return !ec && address.is_loopback();
}

}  // namespace

int run_tracker(int argc, char** argv) {
  Args args("kestrel tracker",
            "Runs a tracker: devices (kestrel-device) connect to it and register under a key;\n"
            "clients (kestrel tune, kestrel query) request a device of a key and get a lease.\n"
            "Requests wait in one queue per key: higher --priority first, first come first\n"
            "served within a priority.");
  args.option("host", "ADDR", "address to listen on", "0.0.0.0 with a token, 127.0.0.1 without");
  args.option("port", "PORT", "port to listen on; 0 picks a free one", "9190");
  args.option("token-file", "FILE", "shared token that devices and clients must prove they know (any role without its own)");
  args.option("device-token-file", "FILE", "token devices must prove (a client token then cannot register a device)");
  args.option("client-token-file", "FILE", "token clients must prove (a device token then cannot lease)");
  args.option("tls-cert", "FILE", "PEM certificate (chain) to present; default with a token: a self-signed one made at start");
  args.option("tls-key", "FILE", "PEM private key of --tls-cert (unencrypted)");
  args.flag("no-tls", "plain TCP even with a token: every frame after the handshake carries an HMAC instead");
  args.option("preauth-max-frame-bytes", "N", "largest frame accepted before a peer has authenticated", "65536");
  args.flag("insecure-no-token", "allow listening on a non-loopback address without a token");
  args.option("heartbeat-ms", "MS", "heartbeat interval", "1000");
  args.option("heartbeat-misses", "N", "silent intervals before a peer is declared dead", "3");
  args.option("max-connections", "N",
              "open connections at most (lowered to fit the open-file limit, which is raised to its hard limit)",
              "1000");
  args.option("max-pending-connections", "N", "connections still in the handshake at most", "64");
  args.option("max-pending-per-address", "N", "connections in the handshake from one address at most", "16");
  args.option("max-client-connections", "N",
              "authenticated client connections at most; the rest of --max-connections is kept for devices",
              "3/4 of --max-connections");
  args.option("max-client-connections-per-address", "N", "authenticated client connections from one address at most",
              "64");
  args.option("relay-window-mb", "MB",
              "relayed bytes queued toward one peer before the tracker stops reading from the sender", "16");
  args.option("max-queued-per-client", "N", "queued device requests per client at most", "64");
  args.option("max-queued-total", "N", "queued device requests in all at most", "10000");
  args.option("http", "PORT", "serve the dashboard (page, JSON API, /metrics) on PORT; 0 picks a free one; off by default");
  args.option("http-host", "ADDR", "address the dashboard listens on", "--host with a token, 127.0.0.1 without");
  args.option("http-interval-ms", "MS", "how often live dashboard pages get a new snapshot", "1000");
  args.option("http-max-connections", "N",
              "dashboard connections at most (open streams apart); past it the one waiting longest on its client "
              "is closed",
              "512");
  args.option("http-max-connections-per-address", "N", "dashboard connections from one address (IPv6: /64) at most",
              "32");
  args.option("http-max-streams", "N", "open live streams (/api/stream) at most; past it 503", "64");
  args.option("http-max-streams-per-address", "N", "open live streams from one address at most", "16");
  args.option("http-header-timeout-ms", "MS",
              "a dashboard request's line and headers must arrive within this (the first's of the connection's start)",
              "5000");
  args.option("port-file", "FILE", "write the bound port to FILE once listening (for scripts)");
  args.option("log-level", "LEVEL", "debug, info, warn, error or off", "info");
  args.epilog(
      "Liveness: every connection gets a heartbeat each --heartbeat-ms. A device or client\n"
      "that stays silent for heartbeat-ms * heartbeat-misses is dropped, so a dead or\n"
      "unreachable device is detected within heartbeat-ms * (heartbeat-misses + 1)\n"
      "(4 s with the defaults); a killed process is noticed at once when its socket closes.\n"
      "The holder of a lease on a lost device gets a \"device lost\" error.\n"
      "\n"
      "Caps: a connection past --max-connections gets an \"overloaded\" failure and is closed\n"
      "at once; past --max-pending-connections or --max-pending-per-address, the oldest\n"
      "connection still in the handshake is closed so (a stalled one: real peers finish in\n"
      "milliseconds). A client past --max-client-connections or\n"
      "--max-client-connections-per-address gets \"overloaded\" in place of its welcome, so\n"
      "one client token cannot take the connections devices need. A request past\n"
      "--max-queued-per-client or --max-queued-total fails as \"overloaded\". Relayed\n"
      "traffic is flow-controlled: once --relay-window-mb wait for a peer, the tracker stops\n"
      "reading from whoever sends to it until half of that is out.\n"
      "\n"
      "Without --token-file, anyone who can reach the port may use the pool, so the tracker\n"
      "listens on loopback only unless --insecure-no-token is given.\n"
      "\n"
      "Security: with a token every connection is TLS 1.3 (peers use TLS when given a token).\n"
      "The token proof is bound to the TLS session (an exported key), so a proxy terminating\n"
      "TLS on each side cannot complete it; peers may also pin the certificate (--tls-ca).\n"
      "Without --tls-cert the tracker makes a self-signed certificate at start and logs its\n"
      "SHA-256 fingerprint; make a lasting one with\n"
      "  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 3650 \\\n"
      "    -subj /CN=kestrel-tracker -keyout tracker.key -out tracker.pem\n"
      "and give peers tracker.pem as --tls-ca. --no-tls (on both sides) keeps plain TCP; each\n"
      "frame then carries an HMAC-SHA256 under per-direction keys derived from the token and\n"
      "the handshake, so frames cannot be injected, replayed, reordered or dropped unnoticed.\n"
      "With --device-token-file and --client-token-file, each role proves its own token.\n"
      "\n"
      "Dashboard: --http PORT serves a live page of the pool (devices, queues, leases), the\n"
      "tuning sessions that report to this tracker (best-so-far curves, failures) and recent\n"
      "events, a JSON API (/api/state, /api/pool, /api/sessions, /api/events, /api/stream)\n"
      "and Prometheus metrics (/metrics); docs/dashboard.md lists them. The tracker builds a\n"
      "snapshot every --http-interval-ms while someone looks, and none otherwise. With a\n"
      "token the dashboard is HTTPS only (the tracker's certificate, or a self-signed one\n"
      "under --no-tls) and every request must carry the client token or the shared token\n"
      "(never the device token): `Authorization: Bearer TOKEN`, or log in on the page once.\n"
      "Without a token it is plain HTTP on loopback unless --insecure-no-token.");
  try {
    if (!args.parse(argc, argv, 2)) {
      std::cout << args.help();
      return 0;
    }
    log::Level level;
    if (!log::parse_level(args.get("log-level", "info"), level)) {
      throw UsageError("--log-level must be debug, info, warn, error or off");
    }
    log::set_level(level);

    tracker::TrackerOptions options;
    if (args.has("token-file")) options.token = rpc::Token::from_file(args.get("token-file"));
    if (args.has("device-token-file")) options.device_token = rpc::Token::from_file(args.get("device-token-file"));
    if (args.has("client-token-file")) options.client_token = rpc::Token::from_file(args.get("client-token-file"));
    if ((options.device_token && !options.client_token && !options.token) ||
        (options.client_token && !options.device_token && !options.token)) {
      throw UsageError(std::string("--") + (options.device_token ? "device" : "client") +
                       "-token-file alone would leave the other role unauthenticated: also pass --" +
                       (options.device_token ? "client" : "device") + "-token-file or --token-file");
    }
    const bool any_token = options.token || options.device_token || options.client_token;
    options.no_tls = args.has("no-tls");
    options.tls_cert = args.get("tls-cert");
    options.tls_key = args.get("tls-key");
    if (options.no_tls && (args.has("tls-cert") || args.has("tls-key"))) {
      throw UsageError("--tls-cert/--tls-key and --no-tls contradict each other: drop one");
    }
    if (args.has("tls-cert") != args.has("tls-key")) throw UsageError("--tls-cert and --tls-key go together");
    options.connection.preauth_max_frame_bytes =
        static_cast<std::size_t>(args.get_int("preauth-max-frame-bytes", 65536, 256, 64 << 20));
    options.host = args.get("host", any_token ? "0.0.0.0" : "127.0.0.1");
    options.port = static_cast<std::uint16_t>(args.get_int("port", 9190, 0, 65535));
    options.heartbeat_interval = std::chrono::milliseconds(args.get_int("heartbeat-ms", 1000, 10, 600'000));
    options.heartbeat_misses = static_cast<std::uint32_t>(args.get_int("heartbeat-misses", 3, 1, 1000));
    tracker::TrackerLimits& limits = options.limits;
    limits.max_connections = static_cast<std::size_t>(args.get_int("max-connections", 1000, 1, 1'000'000));
    limits.max_pending_connections = static_cast<std::size_t>(args.get_int("max-pending-connections", 64, 1, 100'000));
    limits.max_pending_per_address = static_cast<std::size_t>(args.get_int("max-pending-per-address", 16, 1, 100'000));
    if (args.has("max-client-connections")) {
      limits.max_client_connections = static_cast<std::size_t>(args.get_int("max-client-connections", 750, 1, 1'000'000));
    }
    limits.max_client_connections_per_address =
        static_cast<std::size_t>(args.get_int("max-client-connections-per-address", 64, 1, 1'000'000));
    limits.relay_window_bytes = static_cast<std::size_t>(args.get_int("relay-window-mb", 16, 1, 4096)) << 20;
    limits.queue.max_queued_per_client = static_cast<std::size_t>(args.get_int("max-queued-per-client", 64, 1, 1'000'000));
    limits.queue.max_queued_total = static_cast<std::size_t>(args.get_int("max-queued-total", 10'000, 1, 10'000'000));
    if (args.has("http")) {
      tracker::HttpOptions http;
      http.port = static_cast<std::uint16_t>(args.get_int("http", 0, 0, 65535));
      http.host = args.get("http-host", any_token ? options.host : std::string("127.0.0.1"));
      http.interval = std::chrono::milliseconds(args.get_int("http-interval-ms", 1000, 50, 600'000));
      http.max_connections = static_cast<std::size_t>(args.get_int("http-max-connections", 512, 1, 1'000'000));
      http.max_connections_per_address =
          static_cast<std::size_t>(args.get_int("http-max-connections-per-address", 32, 1, 1'000'000));
      http.max_streams = static_cast<std::size_t>(args.get_int("http-max-streams", 64, 1, 1'000'000));
      http.max_streams_per_address =
          static_cast<std::size_t>(args.get_int("http-max-streams-per-address", 16, 1, 1'000'000));
      http.header_timeout = std::chrono::milliseconds(args.get_int("http-header-timeout-ms", 5000, 100, 600'000));
      const bool dashboard_token = options.token || options.client_token;
      if (!dashboard_token && !is_loopback(http.host) && !args.has("insecure-no-token")) {
        throw UsageError("refusing to serve the dashboard on " + http.host +
                         " without a token: anyone who can reach it could watch your pool and sessions. "
                         "Pass --token-file FILE (or --client-token-file), or --insecure-no-token to accept the risk");
      }
      options.http = std::move(http);
    } else {
      for (const char* name : {"http-host", "http-interval-ms", "http-max-connections", "http-max-connections-per-address",
                               "http-max-streams", "http-max-streams-per-address", "http-header-timeout-ms"}) {
        if (args.has(name)) {
          throw UsageError(std::string("--") + name + " needs --http PORT (the dashboard is off without it)");
        }
      }
    }

    if (!any_token) {
      if (!is_loopback(options.host) && !args.has("insecure-no-token")) {
        throw UsageError("refusing to listen on " + options.host +
                         " without a token: anyone who can reach it could use your devices. "
                         "Pass --token-file FILE, or --insecure-no-token to accept the risk");
      }
      if (is_loopback(options.host)) {
        log::info("tracker", "no token configured: listening on loopback only; to accept remote devices, "
                             "pass --token-file FILE (the address then defaults to 0.0.0.0)");
      } else {
        log::warn("tracker", "no token configured and listening on ", options.host,
                  ": anyone who can reach this port can use the pool");
      }
    }

    asio::io_context io;
    tracker::Tracker tracker(io, options);
    tracker.start();
    if (args.has("port-file")) {
      std::string path = args.get("port-file");
      std::string tmp = path + ".tmp";
      {
        std::ofstream out(tmp);
        out << tracker.port() << "\n";
      }
      std::rename(tmp.c_str(), path.c_str());
    }
    asio::signal_set signals(io, SIGINT, SIGTERM);
    signals.async_wait([&](std::error_code ec, int signo) {
      if (ec) return;
      log::info("tracker", "signal ", signo, ": stopping");
      tracker.stop();
    });
    io.run();
    log::info("tracker", "stopped");
    return 0;
  } catch (...) {
    return report_error("kestrel tracker", std::current_exception());
  }
}

}  // namespace kestrel::tools
