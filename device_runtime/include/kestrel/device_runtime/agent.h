// The device agent: connects out to a tracker, registers, answers heartbeats and
// session requests, and reconnects with capped exponential backoff when the tracker
// goes away, re-registering by itself.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "kestrel/rpc/asio.h"
#include "kestrel/rpc/auth.h"
#include "kestrel/rpc/connection.h"
#include "kestrel/rpc/device_info.h"
#include "kestrel/base/ids.h"
#include "kestrel/rpc/tls.h"

namespace kestrel::device {

struct AgentOptions {
  rpc::Endpoint tracker;
  std::string key;
  std::optional<rpc::Token> token;  // the device token (or the tracker's any-role token)
  rpc::PeerTls tls;                 // TLS on by default with a token
  std::chrono::milliseconds initial_backoff{200};
  std::chrono::milliseconds max_backoff{5000};
  std::chrono::milliseconds connect_timeout{5000};
  rpc::ConnectionOptions connection;
};

struct AgentStats {
  std::uint64_t registrations = 0;  // successful registrations since start
  std::uint64_t sessions = 0;       // leases served
  bool registered = false;          // registered right now
  DeviceId device_id;          // as assigned by the tracker at the last registration
};

class DeviceAgent {
 public:
  // `info` is what the device registers; it must outlive nothing (copied).
  DeviceAgent(asio::any_io_executor executor, AgentOptions options, rpc::DeviceInfo info);
  ~DeviceAgent();
  DeviceAgent(const DeviceAgent&) = delete;
  DeviceAgent& operator=(const DeviceAgent&) = delete;

  // Serves until stop(). Transient failures (tracker unreachable, restarted, silent)
  // are retried with backoff, and so are rejections (wrong token, wrong protocol
  // version, a certificate --tls-ca does not vouch for) that are not authenticated.
  // A rejection that came through TLS checked against --tls-ca ends the run with
  // RpcError.
  rpc::awaitable<void> run();
  // Ends run() soon; safe to call from the agent's executor only.
  void stop();

  const AgentStats& stats() const { return stats_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  AgentStats stats_;
};

}  // namespace kestrel::device
