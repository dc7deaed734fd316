// The tracker's pool as a pure state machine: the registry of devices, the per-key
// request queues and the leases. No sockets, no wire types, and it never reads a
// clock: every input is a method call (with the current time where time matters) and
// every consequence is returned as events for the caller to deliver. The server
// (tracker.cpp) owns the connections and translates events into frames.
//
// Parties are named by the ids the server gives them: a client is the ConnectionId of
// its connection; a device is the DeviceId the pool assigns at registration (and is
// reached through the ConnectionId it registered from).
//
// Not thread-safe: one owner calls it (the tracker's io thread).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <variant>
#include <vector>

#include "kestrel/base/ids.h"
#include "kestrel/tracker/request_queue.h"

namespace kestrel::tracker {

using Clock = std::chrono::steady_clock;
using TimePoint = Clock::time_point;

inline constexpr std::size_t kMaxKeyLength = 128;

// Why a key is not acceptable (empty, too long, not printable ASCII, a space), or
// nothing when it is.
std::optional<std::string> check_key(std::string_view key);

// The message for a lease id that the client does not hold.
std::string lease_not_held_message(LeaseId lease);

// ---- events ---------------------------------------------------------------------

// A queued request got a device: tell the client (grant) and the device (lease started).
struct Granted {
  LeaseId lease;
  std::uint64_t request_id = 0;
  ConnectionId client;
  DeviceId device;
  ConnectionId device_connection;
  TimePoint requested_at{};  // when the request arrived (submit's `now`)
};

// A request ended without a device. `client_gone` requests need no answer (their client
// is the reason); the others are answered with `requestFailed`. `overloaded`: refused
// because a queue cap (PoolLimits) is reached.
struct RequestFailed {
  enum class Reason { bad_request, cancelled, timeout, client_gone, overloaded };
  ConnectionId client;
  std::uint64_t request_id = 0;
  std::string key;
  Reason reason = Reason::bad_request;
  std::string message;
};

// A lease ended, or a lease id was refused; `to` is the one party to tell. A release
// produces two of these (client and device); a lost device one (to the client); a lost
// holder one (to the device).
struct LeaseEnded {
  enum class Reason {
    released,     // the holder released it
    device_lost,  // the device went away; the message names it and says why
    holder_gone,  // the client went away; the device returns to the pool
    not_held,     // the client named a lease it does not hold; nothing changed
  };
  LeaseId lease;
  ConnectionId to;
  Reason reason = Reason::released;
  std::string message;  // empty for `released`
};

using Event = std::variant<Granted, RequestFailed, LeaseEnded>;
using Events = std::vector<Event>;  // in the order they must be delivered

// ---- state as seen from outside -----------------------------------------------------

struct PoolDevice {
  DeviceId id;
  std::string key;
  std::string name;                // unique among the live devices of its key
  std::string address;             // where it connects from, for messages
  ConnectionId connection;         // the connection it registered from
  TimePoint registered_at;
  LeaseId lease;                   // empty while free
  std::uint64_t free_order = 0;    // when it last became free; smallest is granted first
};

struct PoolLease {
  LeaseId id;
  DeviceId device;
  ConnectionId client;
  std::uint64_t request_id = 0;
};

struct PoolKeySummary {
  std::string key;
  unsigned free = 0;
  unsigned busy = 0;
  unsigned queued = 0;
};

struct PoolSummary {
  std::vector<PoolKeySummary> keys;        // every key with a device or a queued request, sorted
  std::vector<const PoolDevice*> devices;  // sorted by (key, name, id); valid until the next change
};

struct PoolCounts {
  std::size_t devices = 0;
  std::size_t leases = 0;
  std::size_t queued = 0;
  std::uint64_t grants = 0;  // since the pool was made
};

// What registering a device gave: its id, or why it was refused (then nothing
// changed); and any grants it made possible.
struct Registration {
  DeviceId device;        // empty when refused
  std::string refusal;    // non-empty when refused
  Events events;
};

// Caps on queued requests, so that no client can grow the tracker's memory without
// bound. A request past a cap is refused with `overloaded`.
struct PoolLimits {
  std::size_t max_queued_per_client = 64;
  std::size_t max_queued_total = 10'000;
};

class Pool {
 public:
  explicit Pool(PoolLimits limits = {}) : limits_(limits) {}
  const PoolLimits& limits() const { return limits_; }

  // ---- devices ----
  // Adds a free device under `key`, then grants queued requests of the key. Refused
  // when the key is invalid or a live device of the same name is registered under the
  // same key (names identify devices; a restarted device whose old connection is still
  // half-open gets in once that connection is dropped).
  Registration add_device(ConnectionId connection, std::string key, std::string name, std::string address,
                          TimePoint now);
  // The device is gone (disconnected, silent): its lease, if any, ends with
  // `device_lost` to the holder, naming the device and `reason`. Unknown ids: nothing.
  Events remove_device(DeviceId device, const std::string& reason);

  // ---- requests ----
  // Queues a request for a device of `key` (higher priority first, then arrival), then
  // grants what it can. `timeout` zero: waits until granted, cancelled or its client
  // goes; otherwise it fails with `timeout` once `now + timeout` has passed (see
  // expire()). Refused with `bad_request` for an invalid key or a request id the client
  // already has queued, and with `overloaded` past a PoolLimits cap.
  Events submit(ConnectionId client, std::uint64_t request_id, std::string key, std::int32_t priority,
                std::chrono::milliseconds timeout, TimePoint now);
  // Removes a queued request (`cancelled`). A request already granted, or unknown,
  // gives nothing: the grant is on its way and the client releases it.
  Events cancel(ConnectionId client, std::uint64_t request_id);
  // Fails every queued request whose deadline is at or before `now` with `timeout`.
  Events expire(TimePoint now);
  // The earliest deadline of a queued request, if any: when expire() next has work.
  std::optional<TimePoint> next_deadline() const;

  // ---- leases ----
  // The holder releases a lease: `released` to it and to the device, the device becomes
  // free, then grants. A lease the client does not hold: `not_held` to the client.
  Events release(ConnectionId client, LeaseId lease);
  // The client is gone: its queued requests end (`client_gone`), its leases end
  // (`holder_gone` to each device), the devices become free, then grants.
  Events remove_client(ConnectionId client);

  // ---- queries ----
  const PoolDevice* device(DeviceId id) const;
  const PoolLease* lease(LeaseId id) const;
  // The lease if `client` holds it, else null.
  const PoolLease* lease_of(ConnectionId client, LeaseId id) const;
  // How many leases `client` holds now.
  std::size_t leases_held(ConnectionId client) const;
  PoolSummary summary() const;
  // summary().keys alone (no device list to sort): for callers that keep their own.
  std::vector<PoolKeySummary> key_summaries() const;
  PoolCounts counts() const;
  // Keys with at least one registered device, sorted.
  std::vector<std::string> served_keys() const;
  // The requests waiting for a device of `key`, in the order they will be granted, each
  // with its priority and arrival time; valid until the next change.
  std::vector<const QueuedRequest*> queued(const std::string& key) const { return queue_.queued(key); }

 private:
  struct Deadline {
    TimePoint at;
    std::chrono::milliseconds timeout;
  };

  void make_free(PoolDevice& device);
  void end_lease(LeaseId lease);
  void dispatch(const std::string& key, Events& events);
  std::string timeout_message(const std::string& key, std::chrono::milliseconds timeout) const;
  void forget_deadline(ConnectionId client, std::uint64_t request_id);

  PoolLimits limits_;
  std::uint64_t next_device_ = 1;
  std::uint64_t next_lease_ = 1;
  std::uint64_t next_free_order_ = 1;
  std::uint64_t grants_ = 0;

  std::map<DeviceId, PoolDevice> devices_;
  std::map<std::string, std::set<DeviceId>> devices_by_key_;
  // Free devices per key by the time they became free: the longest idle comes first.
  std::map<std::string, std::set<std::pair<std::uint64_t, DeviceId>>> free_by_key_;
  std::map<LeaseId, PoolLease> leases_;
  std::map<ConnectionId, std::set<LeaseId>> leases_by_client_;
  RequestQueue queue_;
  std::map<std::pair<ConnectionId, std::uint64_t>, Deadline> deadlines_;
  std::set<std::tuple<TimePoint, ConnectionId, std::uint64_t>> by_deadline_;
};

}  // namespace kestrel::tracker
