// The pool state machine: registry, per-key queues, leases, deadlines.
#include "kestrel/tracker/pool.h"

#include <algorithm>
#include <tuple>

#include "kestrel/base/str.h"

namespace kestrel::tracker {

std::optional<std::string> check_key(std::string_view key) {
  if (key.empty() || key.size() > kMaxKeyLength) return str("device key must be 1-", kMaxKeyLength, " characters");
  for (char c : key) {
    if (c <= ' ' || c > '~') return std::string("device key must be printable ASCII with no spaces");
  }
  return std::nullopt;
}

std::string lease_not_held_message(LeaseId lease) { return str("lease ", lease.value, " is not held by this client"); }

// ---- devices ----------------------------------------------------------------------

Registration Pool::add_device(ConnectionId connection, std::string key, std::string name, std::string address,
                              TimePoint now) {
  Registration result;
  if (auto error = check_key(key)) {
    result.refusal = *error;
    return result;
  }
  // Names identify devices in the pool, so a live duplicate is refused rather than
  // allowed to evict the other (two boards given the same --name would otherwise evict
  // each other forever). A restarted device whose old connection is still half-open
  // gets in once that connection misses its heartbeats; it retries.
  for (const auto& [id, other] : devices_) {
    if (other.name == name && other.key == key) {
      result.refusal = str("a device named '", name, "' is already registered under key '", key, "' from ",
                           other.address, "; give each device a unique --name");
      return result;
    }
  }
  PoolDevice device;
  device.id = DeviceId(next_device_++);
  device.key = std::move(key);
  device.name = std::move(name);
  device.address = std::move(address);
  device.connection = connection;
  device.registered_at = now;
  device.free_order = next_free_order_++;
  devices_by_key_[device.key].insert(device.id);
  free_by_key_[device.key].insert({device.free_order, device.id});
  result.device = device.id;
  const std::string& registered_key = devices_.emplace(device.id, std::move(device)).first->second.key;
  dispatch(registered_key, result.events);
  return result;
}

Events Pool::remove_device(DeviceId id, const std::string& reason) {
  Events events;
  auto it = devices_.find(id);
  if (it == devices_.end()) return events;
  PoolDevice& device = it->second;
  if (device.lease) {
    auto lease = leases_.find(device.lease);
    if (lease != leases_.end()) {
      ConnectionId client = lease->second.client;
      events.push_back(LeaseEnded{lease->first, client, LeaseEnded::Reason::device_lost,
                                  str("device '", device.name, "' (key '", device.key, "') lost: ", reason)});
      end_lease(device.lease);
    }
  }
  auto free = free_by_key_.find(device.key);
  if (free != free_by_key_.end()) {
    free->second.erase({device.free_order, device.id});
    if (free->second.empty()) free_by_key_.erase(free);
  }
  auto registered = devices_by_key_.find(device.key);
  registered->second.erase(device.id);
  if (registered->second.empty()) devices_by_key_.erase(registered);
  devices_.erase(it);
  return events;
}

// ---- requests ---------------------------------------------------------------------

Events Pool::submit(ConnectionId client, std::uint64_t request_id, std::string key, std::int32_t priority,
                    std::chrono::milliseconds timeout, TimePoint now) {
  Events events;
  if (auto error = check_key(key)) {
    events.push_back(RequestFailed{client, request_id, key, RequestFailed::Reason::bad_request, *error});
    return events;
  }
  if (queue_.size_of(client) >= limits_.max_queued_per_client) {
    events.push_back(RequestFailed{client, request_id, key, RequestFailed::Reason::overloaded,
                                   str("this client already has ", limits_.max_queued_per_client,
                                       " requests queued (the tracker's --max-queued-per-client); wait for "
                                       "grants or cancel some")});
    return events;
  }
  if (queue_.size() >= limits_.max_queued_total) {
    events.push_back(RequestFailed{client, request_id, key, RequestFailed::Reason::overloaded,
                                   str("the tracker already has ", limits_.max_queued_total,
                                       " requests queued (its --max-queued-total); try again later")});
    return events;
  }
  if (!queue_.push(QueuedRequest{client, request_id, key, priority, 0, now})) {
    events.push_back(RequestFailed{client, request_id, key, RequestFailed::Reason::bad_request,
                                   str("request id ", request_id, " is already queued")});
    return events;
  }
  if (timeout.count() > 0) {
    TimePoint at = now + timeout;
    deadlines_[{client, request_id}] = Deadline{at, timeout};
    by_deadline_.insert({at, client, request_id});
  }
  dispatch(key, events);
  return events;
}

Events Pool::cancel(ConnectionId client, std::uint64_t request_id) {
  Events events;
  auto request = queue_.remove(client, request_id);
  if (!request) return events;
  forget_deadline(client, request_id);
  events.push_back(RequestFailed{client, request_id, request->key, RequestFailed::Reason::cancelled,
                                 "request cancelled by the client"});
  return events;
}

Events Pool::expire(TimePoint now) {
  Events events;
  while (!by_deadline_.empty() && std::get<0>(*by_deadline_.begin()) <= now) {
    auto [at, client, request_id] = *by_deadline_.begin();
    std::chrono::milliseconds timeout = deadlines_.at({client, request_id}).timeout;
    forget_deadline(client, request_id);
    auto request = queue_.remove(client, request_id);
    if (!request) continue;  // cannot happen: a request leaves its deadline behind when it leaves the queue
    events.push_back(RequestFailed{client, request_id, request->key, RequestFailed::Reason::timeout,
                                   timeout_message(request->key, timeout)});
  }
  return events;
}

std::optional<TimePoint> Pool::next_deadline() const {
  if (by_deadline_.empty()) return std::nullopt;
  return std::get<0>(*by_deadline_.begin());
}

std::string Pool::timeout_message(const std::string& key, std::chrono::milliseconds timeout) const {
  auto registered = devices_by_key_.find(key);
  if (registered == devices_by_key_.end()) {
    std::string known;
    for (const auto& served : served_keys()) known += (known.empty() ? "" : ", ") + served;
    return str("no device is registered under key '", key, "' (waited ", timeout.count(), " ms; keys served: ",
               known.empty() ? "none" : known, ")");
  }
  return str("no device of key '", key, "' became free within ", timeout.count(), " ms (", registered->second.size(),
             " registered, all busy)");
}

void Pool::forget_deadline(ConnectionId client, std::uint64_t request_id) {
  auto it = deadlines_.find({client, request_id});
  if (it == deadlines_.end()) return;
  by_deadline_.erase({it->second.at, client, request_id});
  deadlines_.erase(it);
}

// ---- leases -----------------------------------------------------------------------

Events Pool::release(ConnectionId client, LeaseId id) {
  Events events;
  const PoolLease* held = lease_of(client, id);
  if (!held) {
    events.push_back(LeaseEnded{id, client, LeaseEnded::Reason::not_held, lease_not_held_message(id)});
    return events;
  }
  PoolDevice& device = devices_.at(held->device);
  events.push_back(LeaseEnded{id, client, LeaseEnded::Reason::released, ""});
  events.push_back(LeaseEnded{id, device.connection, LeaseEnded::Reason::released, ""});
  end_lease(id);
  make_free(device);
  dispatch(device.key, events);
  return events;
}

Events Pool::remove_client(ConnectionId client) {
  Events events;
  for (auto& request : queue_.remove_client(client)) {
    forget_deadline(client, request.request_id);
    events.push_back(RequestFailed{client, request.request_id, std::move(request.key),
                                   RequestFailed::Reason::client_gone, "its client disconnected"});
  }
  auto held = leases_by_client_.find(client);
  if (held == leases_by_client_.end()) return events;
  std::set<LeaseId> leases = held->second;
  for (LeaseId id : leases) {
    PoolDevice& device = devices_.at(leases_.at(id).device);
    events.push_back(LeaseEnded{id, device.connection, LeaseEnded::Reason::holder_gone, "lease holder disconnected"});
    end_lease(id);
    make_free(device);
    dispatch(device.key, events);
  }
  return events;
}

void Pool::end_lease(LeaseId id) {
  auto it = leases_.find(id);
  if (it == leases_.end()) return;
  auto device = devices_.find(it->second.device);
  if (device != devices_.end()) device->second.lease = LeaseId();
  auto held = leases_by_client_.find(it->second.client);
  if (held != leases_by_client_.end()) {
    held->second.erase(id);
    if (held->second.empty()) leases_by_client_.erase(held);
  }
  leases_.erase(it);
}

void Pool::make_free(PoolDevice& device) {
  device.lease = LeaseId();
  device.free_order = next_free_order_++;
  free_by_key_[device.key].insert({device.free_order, device.id});
}

// While the key has both a free device and a queued request, pairs the best request
// (priority, then arrival) with the device free the longest.
void Pool::dispatch(const std::string& key, Events& events) {
  while (true) {
    auto free = free_by_key_.find(key);
    if (free == free_by_key_.end() || free->second.empty()) return;
    auto request = queue_.pop(key);
    if (!request) return;
    forget_deadline(request->client, request->request_id);

    DeviceId device_id = free->second.begin()->second;
    free->second.erase(free->second.begin());
    if (free->second.empty()) free_by_key_.erase(free);
    PoolDevice& device = devices_.at(device_id);
    PoolLease lease{LeaseId(next_lease_++), device_id, request->client, request->request_id};
    device.lease = lease.id;
    leases_.emplace(lease.id, lease);
    leases_by_client_[lease.client].insert(lease.id);
    ++grants_;
    events.push_back(Granted{lease.id, lease.request_id, lease.client, device_id, device.connection, request->arrived});
  }
}

// ---- queries ----------------------------------------------------------------------

const PoolDevice* Pool::device(DeviceId id) const {
  auto it = devices_.find(id);
  return it == devices_.end() ? nullptr : &it->second;
}

const PoolLease* Pool::lease(LeaseId id) const {
  auto it = leases_.find(id);
  return it == leases_.end() ? nullptr : &it->second;
}

std::size_t Pool::leases_held(ConnectionId client) const {
  auto it = leases_by_client_.find(client);
  return it == leases_by_client_.end() ? 0 : it->second.size();
}

const PoolLease* Pool::lease_of(ConnectionId client, LeaseId id) const {
  const PoolLease* found = lease(id);
  return found && found->client == client ? found : nullptr;
}

PoolSummary Pool::summary() const {
  PoolSummary summary;
  summary.keys = key_summaries();
  for (const auto& [id, device] : devices_) summary.devices.push_back(&device);
  std::sort(summary.devices.begin(), summary.devices.end(), [](const PoolDevice* a, const PoolDevice* b) {
    return std::tie(a->key, a->name, a->id) < std::tie(b->key, b->name, b->id);
  });
  return summary;
}

std::vector<PoolKeySummary> Pool::key_summaries() const {
  std::vector<PoolKeySummary> summaries;
  std::set<std::string> keys;
  for (const auto& [key, ids] : devices_by_key_) keys.insert(key);
  for (const auto& key : queue_.keys()) keys.insert(key);
  for (const auto& key : keys) {
    PoolKeySummary entry;
    entry.key = key;
    auto registered = devices_by_key_.find(key);
    auto free = free_by_key_.find(key);
    unsigned total = registered == devices_by_key_.end() ? 0 : static_cast<unsigned>(registered->second.size());
    entry.free = free == free_by_key_.end() ? 0 : static_cast<unsigned>(free->second.size());
    entry.busy = total - entry.free;
    entry.queued = static_cast<unsigned>(queue_.size(key));
    summaries.push_back(std::move(entry));
  }
  return summaries;
}

PoolCounts Pool::counts() const {
  return PoolCounts{devices_.size(), leases_.size(), queue_.size(), grants_};
}

std::vector<std::string> Pool::served_keys() const {
  std::vector<std::string> keys;
  for (const auto& [key, ids] : devices_by_key_) keys.push_back(key);
  return keys;
}

}  // namespace kestrel::tracker
