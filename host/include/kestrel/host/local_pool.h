// The embedded default: with no --tracker, a command starts a tracker inside this
// process (loopback, a free port, on its own thread) and local kestrel-device
// children, and shuts them down when done.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "kestrel/rpc/connection.h"

namespace kestrel::host {

class LocalPool {
 public:
  // Starts the tracker and `devices` runtimes under `key`; with `http_port`, the tracker
  // also serves its dashboard on 127.0.0.1:http_port (0: any free port). Throws
  // std::runtime_error with what to do when kestrel-device cannot be found or started,
  // and rpc::RpcError when the dashboard's port cannot be bound.
  explicit LocalPool(unsigned devices = 1, std::string key = "local", std::optional<std::uint16_t> http_port = {});
  ~LocalPool();
  LocalPool(const LocalPool&) = delete;
  LocalPool& operator=(const LocalPool&) = delete;

  rpc::Endpoint endpoint() const { return {"127.0.0.1", port_}; }
  const std::string& key() const { return key_; }

 private:
  void shutdown();  // stops the children and the tracker; idempotent

  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::uint16_t port_ = 0;
  std::string key_;
};

// kestrel-device next to this executable (or $KESTREL_DEVICE_BIN).
std::string device_binary_path();

}  // namespace kestrel::host
