// The device's side of a session: answers what a lease holder asks (ping, info, module
// query and upload) and runs its measurement batches one at a time per lease, streaming
// each candidate's result as it ends and a batchDone after the last. Modules belong to
// the lease that uploaded them (one ModuleStore per lease, freed when it ends), and an
// upload whose hash is not the SHA-256 of its image is refused: a lease holder can
// neither plant code for another lease nor name code by someone else's hash. Knows nothing of
// the tracker: the agent hands it each relayed payload with its lease and sends what it
// returns through the callback, so tests drive it over an in-memory pipe.
#pragma once

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <span>

#include "kestrel/base/ids.h"
#include "kestrel/device_runtime/measure.h"
#include "kestrel/device_runtime/module_store.h"
#include "kestrel/rpc/asio.h"
#include "kestrel/rpc/device_info.h"
#include "kestrel/rpc/session.h"

namespace kestrel::device {

class SessionServer {
 public:
  // Sends one encoded SessionMessage to the holder of `lease`; may drop it when the
  // connection is gone.
  using SendFn = std::function<void(LeaseId lease, const rpc::Payload& payload)>;

  // Batches run on `executor`; `send` is called from it.
  SessionServer(asio::any_io_executor executor, rpc::DeviceInfo info, SendFn send);
  ~SessionServer();
  SessionServer(const SessionServer&) = delete;
  SessionServer& operator=(const SessionServer&) = delete;

  // Handles one payload from the holder of `lease`. A payload that does not decode, a
  // batch that fails its checks and a message kind this runtime does not serve are
  // answered with a SessionError naming the problem.
  void handle(LeaseId lease, std::span<const std::uint8_t> payload);
  void handle(LeaseId lease, wire::SessionMessage::Reader message);

  // The lease ended: its running batch is cancelled (no more replies) and its queue dropped.
  void end_lease(LeaseId lease);
  // Every lease ended (the tracker connection was lost).
  void end_all();

  // Batches running or waiting, over all leases.
  std::size_t pending_batches() const;
  // The modules uploaded in `lease` (an empty store for a lease that uploaded none).
  ModuleStore& modules(LeaseId lease) { return modules_[lease]; }
  // Leases holding modules now.
  std::size_t module_leases() const { return modules_.size(); }

 private:
  struct LeaseWork {
    std::shared_ptr<BatchRunner> running;
    std::deque<BatchSpec> waiting;
  };
  void start_next(LeaseId lease);
  void send_error(LeaseId lease, std::uint64_t seq, const std::string& message);

  asio::any_io_executor executor_;
  rpc::DeviceInfo info_;
  SendFn send_;
  std::map<LeaseId, ModuleStore> modules_;
  std::map<LeaseId, LeaseWork> work_;
};

}  // namespace kestrel::device
