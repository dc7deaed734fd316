// Shared measuring options.
#include "measure_args.h"

#include "kestrel/base/log.h"

namespace kestrel::tools {

void add_pool_options(Args& args) {
  args.option("tracker", "HOST:PORT", "tracker to lease devices from; without it, a local tracker and device are started");
  args.option("key", "KEY", "device key to lease", "local");
  args.option("token-file", "FILE", "the client token (the tracker's --client-token-file, or its --token-file)");
  args.option("tls-ca", "FILE", "PEM certificate (the tracker's own, or its CA) the tracker must present");
  args.flag("no-tls", "plain TCP to the tracker: frames carry per-frame MACs instead (the tracker needs --no-tls too)");
  args.option("wait-ms", "MS", "how long to wait for a free device", "30000");
  args.option("device-wait-s", "S",
              "when every leased device is lost (stopped, rebooting, unreachable), how long to wait for one of the key "
              "to come back before stopping with an error; 0 = until interrupted", "300");
  args.option("priority", "N",
              "priority of the lease requests, -1000..1000: while clients wait for a busy key, the tracker grants the "
              "highest priority first (equal ones in arrival order)", "0");
  args.option("target", "TARGET",
              "auto (the device's CPU, from its registered triple), native, a triple (x86_64-linux-gnu, "
              "aarch64-linux-gnu, armv7a-linux-gnueabihf, riscv64-linux-gnu), cuda (the sm_XX of the device's "
              "CUDA GPU), cuda:sm_XX (cubin), cuda:compute_XX (PTX), or opencl; #N picks the device's Nth GPU "
              "(opencl#1)", "auto");
  args.option("mcpu", "CPU", "CPU to tune the code for, e.g. cortex-a72 (with a triple)");
  args.option("features", "FEATURES", "extra target features, e.g. +avx2");
}

host::PoolOptions pool_options(const Args& args, std::string client_name) {
  host::PoolOptions pool;
  if (args.has("tracker")) pool.tracker = rpc::parse_endpoint(args.get("tracker"));
  pool.key = args.get("key", "local");
  if (!pool.tracker && args.has("key") && pool.key != "local") {
    throw UsageError("--key " + pool.key + " needs --tracker HOST:PORT (without --tracker a local device is used)");
  }
  if (args.has("token-file")) pool.token = rpc::Token::from_file(args.get("token-file"));
  pool.tls.disabled = args.has("no-tls");
  pool.tls.ca_file = args.get("tls-ca");
  if (pool.tls.disabled && !pool.tls.ca_file.empty()) throw UsageError("--tls-ca and --no-tls contradict each other: drop one");
  if (!pool.tracker && (pool.tls.disabled || !pool.tls.ca_file.empty())) {
    throw UsageError("--no-tls and --tls-ca apply to a tracker: add --tracker HOST:PORT");
  }
  rpc::peer_tls_context(pool.tls, pool.token.has_value());  // a bad --tls-ca fails here, with its reason
  pool.wait = std::chrono::milliseconds(args.get_int("wait-ms", 30'000, 1, 24 * 3'600'000));
  pool.replacement_wait = std::chrono::seconds(args.get_int("device-wait-s", 300, 0, 7 * 24 * 3600));
  pool.priority = static_cast<std::int32_t>(args.get_int("priority", 0, -1000, 1000));
  pool.client_name = std::move(client_name);
  return pool;
}

void add_measure_options(Args& args) {
  args.option("number", "N", "calls per timed round; 0 grows it until a round lasts --min-repeat-ms", "0");
  args.option("repeat", "N", "timed rounds", "5");
  args.option("min-repeat-ms", "MS", "minimum length of a round when --number is 0", "100");
  args.option("cooldown-ms", "MS", "pause between rounds", "0");
  args.flag("flush-cache", "overwrite the CPU caches before every round");
  args.option("timeout-ms", "MS", "time limit per candidate on the device", "10000");
  args.option("threads", "N", "threads the kernel may use; 0 = all cores", "0");
  args.option("data-seed", "N", "seed of the random input data", "1");
}

rpc::MeasureSettings measure_options(const Args& args) {
  rpc::MeasureSettings m;
  m.number = static_cast<std::uint32_t>(args.get_int("number", 0, 0, 100'000'000));
  m.repeat = static_cast<std::uint32_t>(args.get_int("repeat", 5, 1, 10'000));
  m.min_repeat_ms = static_cast<std::uint32_t>(args.get_int("min-repeat-ms", 100, 0, 600'000));
  m.cooldown_ms = static_cast<std::uint32_t>(args.get_int("cooldown-ms", 0, 0, 600'000));
  m.flush_cache = args.has("flush-cache");
  m.timeout_ms = static_cast<std::uint32_t>(args.get_int("timeout-ms", 10'000, 1, 3'600'000));
  m.threads = static_cast<std::uint32_t>(args.get_int("threads", 0, 0, 1024));
  m.seed = static_cast<std::uint64_t>(args.get_int("data-seed", 1, 0, INT64_MAX));
  return m;
}

host::Target resolve_target(const Args& args, const rpc::DeviceInfo& device) {
  std::string triple = args.get("target", "auto");
  try {
    if (host::is_gpu_target_spec(triple)) {
      host::Target target = host::gpu_target_for_device(triple, device);
      if (args.has("mcpu")) target.cpu = args.get("mcpu");  // of the reference kernel
      if (args.has("features")) target.features = args.get("features");
      return target;
    }
    if (triple == "auto") {
      host::Target target = host::target_for_device(device);
      if (args.has("mcpu")) target.cpu = args.get("mcpu");
      if (args.has("features")) target.features = args.get("features");
      return target;
    }
    return host::parse_target(triple, args.get("mcpu"), args.get("features"));
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
}

void set_log_level(const Args& args, const std::string& fallback) {
  log::Level level;
  if (!log::parse_level(args.get("log-level", fallback), level)) {
    throw UsageError("--log-level must be debug, info, warn, error or off");
  }
  log::set_level(level);
}

}  // namespace kestrel::tools
