// Client side of the tracker protocol: request devices of a key, hold leases, talk to
// the leased device, read the pool summary.
//
// Coroutine API on one executor; not thread-safe. The client keeps itself alive while
// its connection is open: call close() when done.
#pragma once

#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include "kestrel/rpc/asio.h"
#include "kestrel/rpc/auth.h"
#include "kestrel/rpc/connection.h"
#include "kestrel/rpc/device_info.h"
#include "kestrel/rpc/errors.h"
#include "kestrel/base/ids.h"
#include "kestrel/rpc/session.h"
#include "kestrel/rpc/session_report.h"
#include "kestrel/rpc/tls.h"

namespace kestrel::rpc {

struct ClientOptions {
  std::string name = "kestrel-client";  // shown as the lease holder in `kestrel query`
  std::optional<Token> token;  // the client token (or the tracker's any-role token)
  PeerTls tls;                 // TLS on by default with a token
  std::chrono::milliseconds connect_timeout{5000};
  ConnectionOptions connection;
};

struct RequestOptions {
  std::int32_t priority = 0;             // higher is served first
  std::chrono::milliseconds timeout{0};  // 0: wait until granted or cancelled
};

struct Lease {
  LeaseId id;
  DeviceId device;
  DeviceInfo info;
};

class TrackerClient : public std::enable_shared_from_this<TrackerClient> {
 public:
  // Connects and completes the handshake; a tracker that ends the handshake early (busy,
  // at a cap) is tried again until connect_timeout. Throws RpcError: connection_lost (with
  // the address), auth_failed / version_mismatch (with what to change), timeout,
  // overloaded.
  static awaitable<std::shared_ptr<TrackerClient>> connect(Endpoint tracker, ClientOptions options);

  // Queues a request for a device of `key`; the grant is collected with wait_grant.
  RequestId submit(const std::string& key, RequestOptions options = {});
  // Waits for a submitted request. Throws RpcError: timeout (the tracker's message says
  // whether anyone serves the key), cancelled, bad_request, connection_lost.
  awaitable<Lease> wait_grant(RequestId request);
  // submit + wait_grant.
  awaitable<Lease> request(const std::string& key, RequestOptions options = {});
  // Withdraws a queued request; its wait_grant throws RpcError(cancelled). If the grant
  // was already on its way, the lease is released as soon as it arrives.
  void cancel(RequestId request);

  // Returns the device to the pool and waits for the tracker to confirm. A lease that
  // already ended (device lost) returns at once.
  awaitable<void> release(LeaseId lease, std::chrono::milliseconds timeout = std::chrono::seconds(10));

  // The pool: keys with free/busy/queued counts, devices with capabilities and holders.
  awaitable<TrackerSummary> summary(std::chrono::milliseconds timeout = std::chrono::seconds(10));

  // Session traffic with the device of a lease (payloads are session.capnp messages).
  void send(LeaseId lease, std::span<const std::uint8_t> payload);
  // The next payload from the device. Throws RpcError: device_lost (the tracker's
  // message names the device), no_such_lease, timeout, connection_lost.
  awaitable<Payload> receive(LeaseId lease, std::chrono::milliseconds timeout);

  // Round trip through the tracker to the device and back.
  awaitable<std::chrono::nanoseconds> ping(LeaseId lease, std::chrono::milliseconds timeout = std::chrono::seconds(10));
  // The device's capabilities as it reports them now.
  awaitable<DeviceInfo> device_info(LeaseId lease, std::chrono::milliseconds timeout = std::chrono::seconds(10));

  // Tells the tracker how a tuning session's job is going (shown on its dashboard).
  // Fire and forget; returns false, sending nothing, when the tracker did not offer to
  // take reports (an older tracker) or the connection is gone.
  bool report(const SessionReport& report);
  bool accepts_reports() const { return accepts_reports_; }

  void close();
  // The executor the client's coroutines run on.
  asio::any_io_executor executor() const { return conn_->get_executor(); }
  bool is_connected() const { return conn_ && conn_->is_open() && !error_; }
  ConnectionId connection_id() const { return connection_id_; }

 private:
  struct Waitable {
    explicit Waitable(asio::any_io_executor ex) : wake(ex) {}
    asio::steady_timer wake;
  };
  struct PendingRequest : Waitable {
    using Waitable::Waitable;
    std::optional<Lease> lease;
    std::optional<RpcError> error;
  };
  struct LeaseState : Waitable {
    using Waitable::Waitable;
    std::deque<Payload> inbox;
    std::optional<RpcError> ended;
    bool released = false;
  };
  struct PendingSummary : Waitable {
    using Waitable::Waitable;
    std::optional<TrackerSummary> summary;
  };

  TrackerClient(std::shared_ptr<Connection> conn, ConnectionId id, std::chrono::milliseconds heartbeat_interval,
                std::uint32_t heartbeat_misses);
  awaitable<void> read_loop();
  awaitable<void> watchdog();
  void fail_all(const RpcError& error);
  void on_frame(const InFrame& frame);
  // Waits on `w` until `ready()` or the deadline; returns false on timeout.
  template <typename Ready>
  awaitable<bool> wait_until(Waitable& w, std::chrono::steady_clock::time_point deadline, Ready ready);
  std::shared_ptr<LeaseState> lease_state(LeaseId lease);
  // Receives session messages of `lease` until one `matches`; a device error message
  // throws RpcError(bad_request), other messages are stale and skipped.
  awaitable<std::unique_ptr<SessionPayload>> await_reply(
      LeaseId lease, std::chrono::steady_clock::time_point deadline,
      const std::function<bool(wire::SessionMessage::Reader)>& matches);

  std::shared_ptr<Connection> conn_;
  asio::steady_timer watchdog_timer_;
  ConnectionId connection_id_;
  std::chrono::milliseconds heartbeat_interval_;
  std::uint32_t heartbeat_misses_;
  bool accepts_reports_ = false;
  std::chrono::steady_clock::time_point last_seen_;
  std::optional<RpcError> error_;
  std::uint64_t next_request_ = 1;
  std::uint64_t next_seq_ = 1;
  std::map<std::uint64_t, std::shared_ptr<PendingRequest>> requests_;
  std::set<std::uint64_t> cancelled_;
  std::map<std::uint64_t, std::shared_ptr<LeaseState>> leases_;
  std::map<std::uint64_t, std::shared_ptr<PendingSummary>> summaries_;
};

}  // namespace kestrel::rpc
