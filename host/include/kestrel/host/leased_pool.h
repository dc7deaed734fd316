// A leased pool of devices: the devices of a key leased through a tracker, or, without a
// tracker, through the embedded local pool (a tracker in this process and a local
// kestrel-device child). The one place a command sets up its devices.
//
// Coroutine API on the io_context it is given; not thread-safe.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "kestrel/host/local_pool.h"
#include "kestrel/host/measure_client.h"
#include "kestrel/rpc/auth.h"
#include "kestrel/rpc/connection.h"
#include "kestrel/rpc/device_info.h"
#include "kestrel/rpc/tls.h"

namespace kestrel::host {

struct PoolOptions {
  std::optional<rpc::Endpoint> tracker;  // none: start the embedded local pool
  std::string key = "local";
  std::optional<rpc::Token> token;  // the client token
  rpc::PeerTls tls;                 // TLS on by default with a token
  unsigned devices = 1;                                // leases to hold in parallel
  std::chrono::milliseconds wait{30'000};              // for the first device
  // When every leased device is lost, how long to wait for one to come back (0: until
  // interrupted): MeasureClientOptions::replacement_wait.
  std::chrono::milliseconds replacement_wait{300'000};
  std::chrono::milliseconds reconnect_window{120'000};  // keep reconnecting to a lost tracker; 0: never
  std::string client_name = "kestrel";                  // shown as the lease holder
  std::int32_t priority = 0;  // of the lease requests: a higher one is granted first (-1000..1000)
  // The embedded pool only: its tracker serves the dashboard on 127.0.0.1:http_port for
  // as long as the pool lives (0: any free port). Ignored with a tracker.
  std::optional<std::uint16_t> http_port;
};

class LeasedPool {
 public:
  // Starts the local pool when there is no tracker (throws std::runtime_error when
  // kestrel-device cannot be started); connects nothing yet.
  explicit LeasedPool(PoolOptions options);
  ~LeasedPool();
  LeasedPool(const LeasedPool&) = delete;
  LeasedPool& operator=(const LeasedPool&) = delete;

  // Connects to the tracker and leases the first device (waiting up to `wait`); the
  // others are asked for without waiting. Throws rpc::RpcError with the tracker's
  // message (unreachable, refused token, no device of the key).
  rpc::awaitable<void> open();
  // Releases the leases and closes the tracker connection; idempotent, never throws.
  rpc::awaitable<void> close();

  // After open(): the measurement client and the first lease's device.
  MeasureClient& measurer();
  const rpc::DeviceInfo& device() const { return device_; }
  const PoolOptions& options() const { return options_; }

 private:
  PoolOptions options_;
  std::unique_ptr<LocalPool> local_;
  std::unique_ptr<MeasureClient> measurer_;
  rpc::DeviceInfo device_;
  bool open_ = false;
};

// Blocks while `body` runs on a pool made from `options`, on an io_context of its own:
// opens the pool, awaits body(pool), then closes the pool whatever happened and rethrows
// the first exception (open's or body's). One device's measurement: `kestrel profile`
// and the Python package's profile().
void run_leased(PoolOptions options, const std::function<rpc::awaitable<void>(LeasedPool&)>& body);

}  // namespace kestrel::host
