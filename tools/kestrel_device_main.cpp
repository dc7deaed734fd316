// kestrel-device: the runtime started on every board. Wiring only; the logic lives in
// device_runtime/.
#include <sys/prctl.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>

#include "device_args.h"
#include "kestrel/device_runtime/agent.h"
#include "kestrel/device_runtime/capabilities.h"
#include "kestrel/device_runtime/measure.h"
#include "kestrel/rpc/errors.h"
#include "kestrel/rpc/handshake.h"
#include "kestrel/base/log.h"

using namespace kestrel;

namespace {

// Output with stdio: the runtime carries no iostreams (see rpc/log.h).
void out(const std::string& text) { std::fputs(text.c_str(), stdout); }
void err(const std::string& text) { std::fputs(text.c_str(), stderr); }

void print_info(const rpc::DeviceInfo& info) {
  out(str("name:       ", info.name, "\n", "hostname:   ", info.hostname, "\n", "os:         ", info.os, "\n",
          "arch:       ", info.arch, "\n", "triple:     ", info.triple, "\n", "cpu:        ", info.cpu_model, "\n",
          "cores:      ", info.cores, "\n", "memory:     ", info.memory_bytes >> 20, " MiB\n"));
  for (const auto& c : info.caches) {
    out(str("cache:      L", c.level, " ", c.kind, " ", c.size_bytes >> 10, " KiB, ", c.line_bytes, " B lines\n"));
  }
  std::string features = "features:  ";
  for (const auto& f : info.cpu_features) features += " " + f;
  out(features + "\nruntime:    " + info.runtime_version + "\n");
  for (const auto& g : info.gpus) {
    out(str("gpu:        ", g.backend, " ", g.index, ": ", g.name, " (", g.version, "), ", g.compute_units, " units, ",
            g.memory_bytes >> 20, " MiB, max group ", g.max_threads_per_group, ", shared ", g.max_shared_bytes >> 10,
            " KiB; ", g.driver, "\n"));
  }
  for (const auto& note : info.gpu_notes) out("gpu:        " + note + "\n");
}

}  // namespace

int main(int argc, char** argv) {
  // A measurement worker this runtime exec'd (measure.h): before anything else, so it
  // starts with nothing of the runtime's.
  if (device::is_worker_invocation(argc, argv)) device::run_worker_image(argc, argv);
  // Other processes of this user cannot read this one's memory, environment or fds
  // (/proc/<pid>/mem, environ; ptrace): the token and TLS keys live here.
  ::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
  // Workers exec this very program, so they start without the token in their memory.
  device::set_worker_image(device::own_executable());
  tools::DeviceArgs args("kestrel-device",
                   "Kestrel device runtime: connects out to a tracker, registers this machine under a key,\n"
                   "and serves the sessions of whoever leases it. Devices only ever connect outward, so\n"
                   "boards behind NAT or a firewall need no open port.");
  args.option("tracker", "HOST:PORT", "tracker to connect to (required)");
  args.option("key", "KEY", "pool key this device serves, e.g. rpi4 (required)");
  args.option("token-file", "FILE", "file holding the device token (the tracker's --device-token-file, or its --token-file)");
  args.option("tls-ca", "FILE", "PEM certificate (the tracker's own, or its CA) the tracker must present");
  args.flag("no-tls", "plain TCP: frames carry per-frame MACs instead (the tracker needs --no-tls too)");
  args.option("name", "NAME", "name of this device in the pool", "<hostname>-<pid>");
  args.option("max-backoff-ms", "MS", "cap of the exponential reconnect backoff", "5000");
  args.option("log-level", "LEVEL", "debug, info, warn, error or off", "info");
  args.option("cpus", "LIST",
              "run kernels on these CPUs only, e.g. 2,3 or 0-3 (a dedicated board: keeps the runtime's other work "
              "and the system's off the cores being timed; \"all cores\" then means these)");
  args.flag("print-info", "print the detected capabilities and exit");
  args.flag("exit-with-parent", "exit when the process that started this one dies (for embedded pools)");
  args.epilog(
      "When the tracker goes away or restarts, the runtime reconnects with capped exponential\n"
      "backoff (200 ms doubling to --max-backoff-ms) and registers again by itself. It exits\n"
      "with status 3 when the tracker rejects it for good (wrong token, other protocol version)\n"
      "through TLS checked against --tls-ca; without that check anyone on the path could have\n"
      "sent the rejection, so it is logged as not authenticated and retried, as is a\n"
      "certificate --tls-ca does not vouch for. SIGINT/SIGTERM stop it cleanly.\n"
      "\n"
      "Security: with --token-file the connection is TLS 1.3, and the token proof is bound to\n"
      "the TLS session, so a proxy in between cannot complete it even when the certificate is\n"
      "not checked; --tls-ca also checks the certificate. With --no-tls (on both sides) every\n"
      "frame carries an HMAC under keys derived from the token and the handshake's nonces.");
  try {
    if (!args.parse(argc, argv, 1)) {
      out(args.help());
      return 0;
    }
    log::Level level;
    if (!log::parse_level(args.get("log-level", "info"), level)) {
      throw kestrel::UsageError("--log-level must be debug, info, warn, error or off");
    }
    log::set_level(level);
    if (args.has("exit-with-parent")) {
      // The embedded pool of a `kestrel tune` that was killed must not leave its device
      // runtime reconnecting to a tracker that no longer exists.
      pid_t parent = ::getppid();
      ::prctl(PR_SET_PDEATHSIG, SIGTERM);
      if (::getppid() != parent || parent == 1) return 0;
    }
    if (args.has("cpus")) {
      std::string refused = device::pin_to_cpus(args.get("cpus"));
      if (!refused.empty()) throw kestrel::UsageError("--cpus: " + refused);
    }
    rpc::DeviceInfo info = device::detect_device_info(args.get("name"));
    if (args.has("print-info")) {
      print_info(info);
      return 0;
    }
    if (!args.has("tracker")) throw kestrel::UsageError("--tracker HOST:PORT is required");
    if (!args.has("key")) throw kestrel::UsageError("--key KEY is required");

    device::AgentOptions options;
    options.tracker = rpc::parse_endpoint(args.get("tracker"));
    options.key = args.get("key");
    if (args.has("token-file")) options.token = rpc::Token::from_file(args.get("token-file"));
    options.tls.disabled = args.has("no-tls");
    options.tls.ca_file = args.get("tls-ca");
    if (options.tls.disabled && !options.tls.ca_file.empty()) {
      throw kestrel::UsageError("--tls-ca and --no-tls contradict each other: drop one");
    }
    rpc::peer_tls_context(options.tls, options.token.has_value());  // a bad --tls-ca fails here, with its reason
    options.max_backoff = std::chrono::milliseconds(args.get_int("max-backoff-ms", 5000, 100, 3'600'000));

    asio::io_context io;
    device::DeviceAgent agent(io.get_executor(), options, info);
    asio::signal_set signals(io, SIGINT, SIGTERM);
    signals.async_wait([&](std::error_code ec, int signo) {
      if (ec) return;
      log::info("device", "signal ", signo, ": stopping");
      agent.stop();
    });
    int status = 0;
    asio::co_spawn(io, agent.run(), [&](std::exception_ptr e) {
      signals.cancel();
      if (!e) return;
      try {
        std::rethrow_exception(e);
      } catch (const rpc::RpcError& err) {
        status = 3;
      } catch (const std::exception& err) {
        log::error("device", "internal error: ", err.what());
        status = 1;
      }
    });
    log::info("device", "kestrel-device ", software_version(), " '", info.name, "' (", info.triple, ", ",
              info.cores, " cores) serving key '", options.key, "' via ", options.tracker.to_string());
    io.run();
    return status;
  } catch (const kestrel::UsageError& e) {
    err(str("kestrel-device: ", e.what(), "\n(see kestrel-device --help)\n"));
    return 2;
  } catch (const rpc::RpcError& e) {
    err(str("kestrel-device: ", e.what(), "\n"));
    return 2;
  }
}
