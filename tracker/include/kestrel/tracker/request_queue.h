// Per-key queues of device requests: higher priority first, first come first served
// within a priority. Pure data structure, one part of the Pool (pool.h), which owns the deadlines.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "kestrel/base/ids.h"

namespace kestrel::tracker {

struct QueuedRequest {
  ConnectionId client;
  std::uint64_t request_id = 0;  // the client's id, unique per connection
  std::string key;
  std::int32_t priority = 0;
  std::uint64_t seq = 0;         // arrival order, assigned by push()
  std::chrono::steady_clock::time_point arrived{};  // when it was submitted (for waiting times)
};

class RequestQueue {
 public:
  // Enqueues; returns false (and changes nothing) if the client already has a request
  // with this id queued.
  bool push(QueuedRequest request);
  // Removes and returns the next request for `key`, if any.
  std::optional<QueuedRequest> pop(const std::string& key);
  // The next request for `key` without removing it.
  const QueuedRequest* peek(const std::string& key) const;
  // Removes one request; returns it if it was queued.
  std::optional<QueuedRequest> remove(ConnectionId client, std::uint64_t request_id);
  // Removes every request of a client (it disconnected).
  std::vector<QueuedRequest> remove_client(ConnectionId client);

  std::size_t size(const std::string& key) const;
  std::size_t size() const { return index_.size(); }
  // Requests `client` has queued, over all keys.
  std::size_t size_of(ConnectionId client) const;
  std::vector<std::string> keys() const;
  // The requests queued for `key` in the order they would be granted (priority, then
  // arrival); valid until the next change.
  std::vector<const QueuedRequest*> queued(const std::string& key) const;

 private:
  // Order within a key: priority descending, then seq ascending.
  using Order = std::tuple<std::int64_t, std::uint64_t>;
  static Order order_of(const QueuedRequest& r) { return {-static_cast<std::int64_t>(r.priority), r.seq}; }

  std::map<std::string, std::map<Order, QueuedRequest>> by_key_;
  std::map<std::pair<ConnectionId, std::uint64_t>, std::pair<std::string, Order>> index_;
  std::uint64_t next_seq_ = 1;
};

}  // namespace kestrel::tracker
