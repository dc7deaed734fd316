// Test support: an in-process tracker with device agents, all on one io_context.
#pragma once

#include <memory>
#include <vector>

#include "kestrel/device_runtime/agent.h"
#include "kestrel/device_runtime/capabilities.h"
#include "kestrel/tracker/tracker.h"
#include "kestrel/rpc/tracker_client.h"

namespace kestrel::test {

class Pool {
 public:
  explicit Pool(asio::io_context& io, tracker::TrackerOptions options = fast_options()) : io_(io) {
    options.port = 0;
    tracker_ = std::make_unique<tracker::Tracker>(io, options);
    tracker_->start();
  }

  static tracker::TrackerOptions fast_options() {
    tracker::TrackerOptions options;
    options.heartbeat_interval = std::chrono::milliseconds(100);
    options.heartbeat_misses = 3;
    return options;
  }

  rpc::Endpoint endpoint() const { return {"127.0.0.1", tracker_->port()}; }
  tracker::Tracker& tracker() { return *tracker_; }

  device::DeviceAgent& add_device(const std::string& key, const std::string& name,
                                  std::optional<rpc::Token> token = {}) {
    device::AgentOptions options;
    options.tracker = endpoint();
    options.key = key;
    options.token = std::move(token);
    options.initial_backoff = std::chrono::milliseconds(50);
    options.max_backoff = std::chrono::milliseconds(200);
    agents_.push_back(std::make_unique<device::DeviceAgent>(io_.get_executor(), options,
                                                            device::detect_device_info(name)));
    auto* agent = agents_.back().get();
    asio::co_spawn(io_, agent->run(), asio::detached);
    return *agent;
  }

  rpc::awaitable<std::shared_ptr<rpc::TrackerClient>> client(const std::string& name = "test-client",
                                                             std::optional<rpc::Token> token = {}) {
    rpc::ClientOptions options;
    options.name = name;
    options.token = std::move(token);
    auto c = co_await rpc::TrackerClient::connect(endpoint(), options);
    clients_.push_back(c);
    co_return c;
  }

  // Stops agents, clients and the tracker.
  void shutdown() {
    for (auto& agent : agents_) agent->stop();
    for (auto& c : clients_) c->close();
    tracker_->stop();
  }

 private:
  asio::io_context& io_;
  std::unique_ptr<tracker::Tracker> tracker_;
  std::vector<std::unique_ptr<device::DeviceAgent>> agents_;
  std::vector<std::shared_ptr<rpc::TrackerClient>> clients_;
};

}  // namespace kestrel::test
