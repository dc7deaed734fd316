// LeasedPool: connect, lease, close.
#include "kestrel/host/leased_pool.h"

#include <stdexcept>

#include "kestrel/base/log.h"
#include "kestrel/rpc/tracker_client.h"

namespace kestrel::host {

LeasedPool::LeasedPool(PoolOptions options) : options_(std::move(options)) {
  if (!options_.tracker) local_ = std::make_unique<LocalPool>(1, options_.key, options_.http_port);
}

LeasedPool::~LeasedPool() = default;

rpc::awaitable<void> LeasedPool::open() {
  const rpc::Endpoint endpoint = options_.tracker ? *options_.tracker : local_->endpoint();
  rpc::ClientOptions client_options;
  client_options.name = options_.client_name;
  client_options.token = options_.token;
  client_options.tls = options_.tls;
  auto client = co_await rpc::TrackerClient::connect(endpoint, client_options);
  MeasureClientOptions measure;
  measure.key = options_.key;
  measure.devices = options_.devices;
  measure.priority = options_.priority;
  measure.request_timeout = options_.wait;
  measure.replacement_wait = options_.replacement_wait;
  measure.reconnect_timeout = options_.reconnect_window;
  if (options_.reconnect_window.count() > 0) {
    // An overnight session outlives a tracker restart: reconnect and lease again.
    measure.reconnect = [endpoint, client_options]() { return rpc::TrackerClient::connect(endpoint, client_options); };
  }
  measurer_ = std::make_unique<MeasureClient>(client, measure);
  open_ = true;
  co_await measurer_->open();
  device_ = measurer_->leases().front().info;
}

rpc::awaitable<void> LeasedPool::close() {
  if (!open_) co_return;
  open_ = false;
  try {
    co_await measurer_->close();
  } catch (const std::exception& e) {
    log::warn("pool", "releasing the leases: ", e.what());
  }
  measurer_->tracker()->close();
}

MeasureClient& LeasedPool::measurer() {
  if (!measurer_) throw std::logic_error("LeasedPool::measurer() before open()");
  return *measurer_;
}

void run_leased(PoolOptions options, const std::function<rpc::awaitable<void>(LeasedPool&)>& body) {
  LeasedPool pool(std::move(options));
  asio::io_context io;
  std::exception_ptr failure;
  asio::co_spawn(
      io,
      [&]() -> rpc::awaitable<void> {
        try {
          co_await pool.open();
          co_await body(pool);
        } catch (...) {
          failure = std::current_exception();
        }
        co_await pool.close();
      },
      [&](std::exception_ptr e) {
        if (e && !failure) failure = e;
      });
  io.run();
  if (failure) std::rethrow_exception(failure);
}

}  // namespace kestrel::host
