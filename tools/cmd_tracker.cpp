// `kestrel tracker`: runs the tracker until SIGINT/SIGTERM.
#include <csignal>
#include <fstream>
#include <iostream>

#include "args.h"
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
  args.option("token-file", "FILE", "shared token that devices and clients must prove they know");
  args.flag("insecure-no-token", "allow listening on a non-loopback address without a token");
  args.option("heartbeat-ms", "MS", "heartbeat interval", "1000");
  args.option("heartbeat-misses", "N", "silent intervals before a peer is declared dead", "3");
  args.option("max-connections", "N",
              "open connections at most (lowered to fit the open-file limit, which is raised to its hard limit)",
              "1000");
  args.option("max-pending-connections", "N", "connections still in the handshake at most", "64");
  args.option("max-pending-per-address", "N", "connections in the handshake from one address at most", "16");
  args.option("max-queued-per-client", "N", "queued device requests per client at most", "64");
  args.option("max-queued-total", "N", "queued device requests in all at most", "10000");
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
      "milliseconds). A request past --max-queued-per-client or --max-queued-total fails as\n"
      "\"overloaded\".\n"
      "\n"
      "Without --token-file, anyone who can reach the port may use the pool, so the tracker\n"
      "listens on loopback only unless --insecure-no-token is given.");
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
    options.host = args.get("host", options.token ? "0.0.0.0" : "127.0.0.1");
    options.port = static_cast<std::uint16_t>(args.get_int("port", 9190, 0, 65535));
    options.heartbeat_interval = std::chrono::milliseconds(args.get_int("heartbeat-ms", 1000, 10, 600'000));
    options.heartbeat_misses = static_cast<std::uint32_t>(args.get_int("heartbeat-misses", 3, 1, 1000));
    tracker::TrackerLimits& limits = options.limits;
    limits.max_connections = static_cast<std::size_t>(args.get_int("max-connections", 1000, 1, 1'000'000));
    limits.max_pending_connections = static_cast<std::size_t>(args.get_int("max-pending-connections", 64, 1, 100'000));
    limits.max_pending_per_address = static_cast<std::size_t>(args.get_int("max-pending-per-address", 16, 1, 100'000));
    limits.queue.max_queued_per_client = static_cast<std::size_t>(args.get_int("max-queued-per-client", 64, 1, 1'000'000));
    limits.queue.max_queued_total = static_cast<std::size_t>(args.get_int("max-queued-total", 10'000, 1, 10'000'000));
    if (!options.token) {
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
  } catch (const UsageError& e) {
    std::cerr << "kestrel tracker: " << e.what() << "\n(see kestrel tracker --help)\n";
    return 2;
  } catch (const rpc::RpcError& e) {
    std::cerr << "kestrel tracker: " << e.what() << "\n";
    return 1;
  }
}

}  // namespace kestrel::tools
