// The tracker's pool state machine without sockets: contention order, priorities,
// cancellation, device and client loss, duplicate names, timeouts, the summary, and a
// randomized sequence of operations checked against a reference model and invariants.
#include <catch2/catch.hpp>

#include <algorithm>
#include <deque>
#include <map>
#include <random>
#include <set>

#include "kestrel/tracker/pool.h"

using namespace kestrel;
using namespace kestrel::tracker;
using namespace std::chrono_literals;

namespace {

const TimePoint t0 = TimePoint() + 1000s;

template <typename T>
std::vector<T> only(const Events& events) {
  std::vector<T> out;
  for (const Event& e : events) {
    if (const T* x = std::get_if<T>(&e)) out.push_back(*x);
  }
  return out;
}

// A pool with helpers that name devices and clients by small numbers: device
// connections are 100 + n, clients are ConnectionId(n).
struct Fixture {
  Pool pool;

  DeviceId add(const std::string& key, const std::string& name, std::uint64_t connection, Events* events = nullptr) {
    Registration r = pool.add_device(ConnectionId(connection), key, name, "10.0.0." + std::to_string(connection), t0);
    REQUIRE(r.device);
    REQUIRE(r.refusal.empty());
    if (events) *events = r.events;
    return r.device;
  }

  Events submit(std::uint64_t client, std::uint64_t request, const std::string& key, std::int32_t priority = 0,
                std::chrono::milliseconds timeout = 0ms, TimePoint now = t0) {
    return pool.submit(ConnectionId(client), request, key, priority, timeout, now);
  }
};

}  // namespace

TEST_CASE("pool: a request for a free device is granted at once", "[pool]") {
  Fixture f;
  DeviceId d = f.add("rpi4", "a", 100);
  Events events = f.submit(1, 7, "rpi4");
  auto grants = only<Granted>(events);
  REQUIRE(grants.size() == 1);
  REQUIRE(events.size() == 1);
  CHECK(grants[0].client == ConnectionId(1));
  CHECK(grants[0].request_id == 7);
  CHECK(grants[0].device == d);
  CHECK(grants[0].device_connection == ConnectionId(100));
  const PoolLease* lease = f.pool.lease(grants[0].lease);
  REQUIRE(lease);
  CHECK(lease->device == d);
  CHECK(f.pool.device(d)->lease == grants[0].lease);
  CHECK(f.pool.counts().grants == 1);
}

TEST_CASE("pool: a device registering grants the requests waiting for its key", "[pool]") {
  Fixture f;
  CHECK(f.submit(1, 1, "k").empty());
  CHECK(f.submit(2, 1, "k").empty());
  CHECK(f.submit(3, 1, "other").empty());
  Events events;
  DeviceId d = f.add("k", "a", 100, &events);
  auto grants = only<Granted>(events);
  REQUIRE(grants.size() == 1);
  CHECK(grants[0].client == ConnectionId(1));
  CHECK(grants[0].device == d);
  CHECK(f.pool.counts().queued == 2);
}

TEST_CASE("pool: under contention, higher priority first, then arrival order", "[pool][queue]") {
  Fixture f;
  f.add("k", "only", 100);
  auto first = only<Granted>(f.submit(9, 1, "k"));
  REQUIRE(first.size() == 1);
  // Queued behind the holder: arrival order 1..5 with mixed priorities.
  CHECK(f.submit(1, 1, "k", 0).empty());
  CHECK(f.submit(2, 1, "k", 5).empty());
  CHECK(f.submit(3, 1, "k", 0).empty());
  CHECK(f.submit(4, 1, "k", 5).empty());
  CHECK(f.submit(5, 1, "k", -1).empty());
  std::vector<std::uint64_t> order;
  ConnectionId holder(9);
  LeaseId lease = first[0].lease;
  for (int i = 0; i < 5; ++i) {
    Events events = f.pool.release(holder, lease);
    auto ended = only<LeaseEnded>(events);
    REQUIRE(ended.size() == 2);
    CHECK(ended[0].to == holder);
    CHECK(ended[1].to == ConnectionId(100));
    CHECK(ended[0].reason == LeaseEnded::Reason::released);
    CHECK(ended[1].reason == LeaseEnded::Reason::released);
    auto grants = only<Granted>(events);
    REQUIRE(grants.size() == 1);
    // The grant comes after both lease endings.
    CHECK(std::holds_alternative<Granted>(events.back()));
    order.push_back(grants[0].client.value);
    holder = grants[0].client;
    lease = grants[0].lease;
  }
  CHECK(order == std::vector<std::uint64_t>{2, 4, 1, 3, 5});
}

TEST_CASE("pool: the device idle longest is granted first", "[pool]") {
  Fixture f;
  DeviceId a = f.add("k", "a", 100);
  DeviceId b = f.add("k", "b", 101);
  DeviceId c = f.add("k", "c", 102);
  // Registration order is the first idle order.
  auto g1 = only<Granted>(f.submit(1, 1, "k"));
  REQUIRE(g1.size() == 1);
  CHECK(g1[0].device == a);
  auto g2 = only<Granted>(f.submit(1, 2, "k"));
  REQUIRE(g2.size() == 1);
  CHECK(g2[0].device == b);
  // a comes back after c has been idle since registration: c first, then a.
  CHECK(only<Granted>(f.pool.release(ConnectionId(1), g1[0].lease)).empty());
  auto g3 = only<Granted>(f.submit(2, 1, "k"));
  REQUIRE(g3.size() == 1);
  CHECK(g3[0].device == c);
  auto g4 = only<Granted>(f.submit(2, 2, "k"));
  REQUIRE(g4.size() == 1);
  CHECK(g4[0].device == a);
  // b released now: the only free one.
  f.pool.release(ConnectionId(1), g2[0].lease);
  auto g5 = only<Granted>(f.submit(3, 1, "k"));
  REQUIRE(g5.size() == 1);
  CHECK(g5[0].device == b);
}

TEST_CASE("pool: keys are served independently", "[pool]") {
  Fixture f;
  f.add("x86", "a", 100);
  CHECK(f.submit(1, 1, "rpi4").empty());
  auto grants = only<Granted>(f.submit(2, 1, "x86"));
  REQUIRE(grants.size() == 1);
  CHECK(grants[0].client == ConnectionId(2));
  CHECK(f.pool.counts().queued == 1);
}

TEST_CASE("pool: cancel before the grant fails the request; after it, nothing changes", "[pool]") {
  Fixture f;
  f.add("k", "a", 100);
  auto held = only<Granted>(f.submit(1, 1, "k"));
  REQUIRE(held.size() == 1);
  CHECK(f.submit(2, 5, "k").empty());

  Events cancelled = f.pool.cancel(ConnectionId(2), 5);
  auto failed = only<RequestFailed>(cancelled);
  REQUIRE(failed.size() == 1);
  CHECK(failed[0].client == ConnectionId(2));
  CHECK(failed[0].request_id == 5);
  CHECK(failed[0].reason == RequestFailed::Reason::cancelled);
  CHECK(failed[0].message == "request cancelled by the client");
  CHECK(f.pool.counts().queued == 0);
  // Cancelled twice, or an unknown id: nothing.
  CHECK(f.pool.cancel(ConnectionId(2), 5).empty());
  CHECK(f.pool.cancel(ConnectionId(2), 77).empty());

  // The release now finds nobody waiting: the device is free again.
  Events released = f.pool.release(ConnectionId(1), held[0].lease);
  CHECK(only<Granted>(released).empty());
  CHECK(f.pool.summary().keys.at(0).free == 1);

  // Cancel after the grant: the grant stands (the client releases it on arrival).
  auto granted = only<Granted>(f.submit(3, 9, "k"));
  REQUIRE(granted.size() == 1);
  CHECK(f.pool.cancel(ConnectionId(3), 9).empty());
  CHECK(f.pool.lease_of(ConnectionId(3), granted[0].lease));
  CHECK(only<LeaseEnded>(f.pool.release(ConnectionId(3), granted[0].lease)).size() == 2);
}

TEST_CASE("pool: a lease can be released only by its holder", "[pool]") {
  Fixture f;
  f.add("k", "a", 100);
  auto granted = only<Granted>(f.submit(1, 1, "k"));
  REQUIRE(granted.size() == 1);
  Events refused = f.pool.release(ConnectionId(2), granted[0].lease);
  auto ended = only<LeaseEnded>(refused);
  REQUIRE(ended.size() == 1);
  CHECK(ended[0].to == ConnectionId(2));
  CHECK(ended[0].reason == LeaseEnded::Reason::not_held);
  CHECK(ended[0].message == "lease " + std::to_string(granted[0].lease.value) + " is not held by this client");
  CHECK(f.pool.lease(granted[0].lease));
  CHECK(f.pool.counts().leases == 1);
  auto unknown = only<LeaseEnded>(f.pool.release(ConnectionId(1), LeaseId(999)));
  REQUIRE(unknown.size() == 1);
  CHECK(unknown[0].reason == LeaseEnded::Reason::not_held);
  // Released once: the second release is refused.
  CHECK(only<LeaseEnded>(f.pool.release(ConnectionId(1), granted[0].lease)).size() == 2);
  auto again = only<LeaseEnded>(f.pool.release(ConnectionId(1), granted[0].lease));
  REQUIRE(again.size() == 1);
  CHECK(again[0].reason == LeaseEnded::Reason::not_held);
}

TEST_CASE("pool: a device lost mid-lease fails the lease with device lost, naming it", "[pool]") {
  Fixture f;
  DeviceId a = f.add("rpi4", "board-7", 100);
  f.add("rpi4", "board-8", 101);
  auto g1 = only<Granted>(f.submit(1, 1, "rpi4"));
  auto g2 = only<Granted>(f.submit(2, 1, "rpi4"));
  REQUIRE(g1.size() == 1);
  REQUIRE(g2.size() == 1);
  REQUIRE(g1[0].device == a);
  CHECK(f.submit(3, 1, "rpi4").empty());

  Events events = f.pool.remove_device(a, "no heartbeat for 3100 ms");
  REQUIRE(events.size() == 1);
  auto ended = only<LeaseEnded>(events);
  REQUIRE(ended.size() == 1);
  CHECK(ended[0].lease == g1[0].lease);
  CHECK(ended[0].to == ConnectionId(1));
  CHECK(ended[0].reason == LeaseEnded::Reason::device_lost);
  CHECK(ended[0].message == "device 'board-7' (key 'rpi4') lost: no heartbeat for 3100 ms");
  CHECK_FALSE(f.pool.device(a));
  CHECK_FALSE(f.pool.lease(g1[0].lease));
  CHECK(f.pool.counts().devices == 1);
  CHECK(f.pool.counts().leases == 1);
  CHECK(f.pool.counts().queued == 1);  // nothing was freed for the waiting request
  // The lost lease is no longer the client's.
  CHECK(only<LeaseEnded>(f.pool.release(ConnectionId(1), g1[0].lease)).at(0).reason == LeaseEnded::Reason::not_held);
  // The other device still serves the queue.
  auto next = only<Granted>(f.pool.release(ConnectionId(2), g2[0].lease));
  REQUIRE(next.size() == 1);
  CHECK(next[0].client == ConnectionId(3));
  // A free device that goes away says nothing; a second removal neither.
  DeviceId c = f.add("rpi4", "board-9", 102);
  CHECK(f.pool.remove_device(c, "disconnected").empty());
  CHECK(f.pool.remove_device(c, "disconnected").empty());
}

TEST_CASE("pool: a client gone drops its requests and ends its leases; the devices serve others", "[pool]") {
  Fixture f;
  DeviceId a = f.add("k", "a", 100);
  DeviceId b = f.add("other", "b", 101);
  auto g1 = only<Granted>(f.submit(1, 1, "k"));
  auto g2 = only<Granted>(f.submit(1, 2, "other"));
  REQUIRE(g1.size() == 1);
  REQUIRE(g2.size() == 1);
  CHECK(f.submit(1, 3, "k", 0, 500ms).empty());   // queued, with a deadline
  CHECK(f.submit(1, 4, "nobody").empty());        // queued for a key nobody serves
  CHECK(f.submit(2, 1, "k", 0).empty());          // another client waits for k
  REQUIRE(f.pool.next_deadline());

  Events events = f.pool.remove_client(ConnectionId(1));
  auto failed = only<RequestFailed>(events);
  REQUIRE(failed.size() == 2);
  std::set<std::uint64_t> dropped;
  for (const auto& r : failed) {
    CHECK(r.client == ConnectionId(1));
    CHECK(r.reason == RequestFailed::Reason::client_gone);
    dropped.insert(r.request_id);
  }
  CHECK(dropped == std::set<std::uint64_t>{3, 4});
  auto ended = only<LeaseEnded>(events);
  REQUIRE(ended.size() == 2);
  std::set<std::uint64_t> told;
  for (const auto& e : ended) {
    CHECK(e.reason == LeaseEnded::Reason::holder_gone);
    CHECK(e.message == "lease holder disconnected");
    told.insert(e.to.value);
  }
  CHECK(told == std::set<std::uint64_t>{100, 101});
  // Device a went straight to the waiting client; b is free.
  auto grants = only<Granted>(events);
  REQUIRE(grants.size() == 1);
  CHECK(grants[0].client == ConnectionId(2));
  CHECK(grants[0].device == a);
  CHECK_FALSE(f.pool.device(b)->lease);
  CHECK(f.pool.counts().queued == 0);
  CHECK(f.pool.counts().leases == 1);
  CHECK_FALSE(f.pool.next_deadline());
  CHECK(f.pool.expire(t0 + 1h).empty());
  // Nothing left of the client: a second removal does nothing.
  CHECK(f.pool.remove_client(ConnectionId(1)).empty());
}

TEST_CASE("pool: a second live device with the same name and key is refused", "[pool][bad-input]") {
  Fixture f;
  DeviceId first = f.add("k", "board", 100);
  Registration dup = f.pool.add_device(ConnectionId(101), "k", "board", "10.0.0.101", t0);
  CHECK_FALSE(dup.device);
  CHECK(dup.events.empty());
  CHECK(dup.refusal ==
        "a device named 'board' is already registered under key 'k' from 10.0.0.100; give each device a unique --name");
  CHECK(f.pool.counts().devices == 1);
  // The same name under another key is another device.
  DeviceId other = f.add("k2", "board", 102);
  CHECK(other != first);
  // Once the first is gone, the name is free again.
  f.pool.remove_device(first, "disconnected");
  DeviceId back = f.add("k", "board", 103);
  CHECK(back != first);
  CHECK(f.pool.device(back)->address == "10.0.0.103");
}

TEST_CASE("pool: bad keys and duplicate request ids are refused", "[pool][bad-input]") {
  Fixture f;
  for (const std::string& key : {std::string(), std::string("has space"), std::string(129, 'k'), std::string("t\x01")}) {
    CAPTURE(key);
    Registration r = f.pool.add_device(ConnectionId(100), key, "a", "here", t0);
    CHECK_FALSE(r.device);
    CHECK_FALSE(r.refusal.empty());
    auto failed = only<RequestFailed>(f.submit(1, 1, key));
    REQUIRE(failed.size() == 1);
    CHECK(failed[0].reason == RequestFailed::Reason::bad_request);
    CHECK(failed[0].message == *check_key(key));
  }
  CHECK(check_key(std::string(128, 'k')) == std::nullopt);
  CHECK(*check_key("") == "device key must be 1-128 characters");
  CHECK(*check_key("a b") == "device key must be printable ASCII with no spaces");
  CHECK(f.pool.counts().devices == 0);
  CHECK(f.pool.counts().queued == 0);

  CHECK(f.submit(1, 1, "k").empty());
  auto dup = only<RequestFailed>(f.submit(1, 1, "k", 3));
  REQUIRE(dup.size() == 1);
  CHECK(dup[0].reason == RequestFailed::Reason::bad_request);
  CHECK(dup[0].message == "request id 1 is already queued");
  CHECK(f.pool.counts().queued == 1);
  // Another client may use the same id.
  CHECK(f.submit(2, 1, "k").empty());
  CHECK(f.pool.counts().queued == 2);
}

TEST_CASE("pool: a queued request times out at its deadline with a clear reason", "[pool]") {
  Fixture f;
  CHECK_FALSE(f.pool.next_deadline());
  CHECK(f.submit(1, 1, "nobody", 0, 200ms, t0).empty());
  CHECK(f.submit(1, 2, "forever", 0, 0ms, t0).empty());  // no timeout
  REQUIRE(f.pool.next_deadline());
  CHECK(*f.pool.next_deadline() == t0 + 200ms);

  CHECK(f.pool.expire(t0 + 199ms).empty());
  CHECK(f.pool.counts().queued == 2);
  f.add("x86", "a", 100);
  f.add("rpi4", "b", 101);
  auto failed = only<RequestFailed>(f.pool.expire(t0 + 200ms));
  REQUIRE(failed.size() == 1);
  CHECK(failed[0].request_id == 1);
  CHECK(failed[0].reason == RequestFailed::Reason::timeout);
  CHECK(failed[0].message == "no device is registered under key 'nobody' (waited 200 ms; keys served: rpi4, x86)");
  CHECK(f.pool.counts().queued == 1);
  CHECK_FALSE(f.pool.next_deadline());
  CHECK(f.pool.expire(t0 + 1h).empty());

  SECTION("all devices of the key busy") {
    auto held = only<Granted>(f.submit(2, 1, "x86"));
    REQUIRE(held.size() == 1);
    CHECK(f.submit(3, 1, "x86", 0, 50ms, t0 + 10ms).empty());
    auto busy = only<RequestFailed>(f.pool.expire(t0 + 1s));
    REQUIRE(busy.size() == 1);
    CHECK(busy[0].message == "no device of key 'x86' became free within 50 ms (1 registered, all busy)");
  }
  SECTION("granted before the deadline: no timeout") {
    auto held = only<Granted>(f.submit(2, 1, "x86"));
    REQUIRE(held.size() == 1);
    CHECK(f.submit(3, 1, "x86", 0, 50ms, t0 + 10ms).empty());
    CHECK(*f.pool.next_deadline() == t0 + 60ms);
    auto next = only<Granted>(f.pool.release(ConnectionId(2), held[0].lease));
    REQUIRE(next.size() == 1);
    CHECK(next[0].client == ConnectionId(3));
    CHECK_FALSE(f.pool.next_deadline());
    CHECK(f.pool.expire(t0 + 1s).empty());
  }
  SECTION("cancelled before the deadline: no timeout") {
    CHECK(f.submit(3, 1, "none", 0, 50ms, t0).empty());
    CHECK(only<RequestFailed>(f.pool.cancel(ConnectionId(3), 1)).size() == 1);
    CHECK_FALSE(f.pool.next_deadline());
    CHECK(f.pool.expire(t0 + 1s).empty());
  }
  SECTION("several deadlines expire in deadline order") {
    CHECK(f.submit(4, 1, "none", 0, 300ms, t0).empty());
    CHECK(f.submit(4, 2, "none", 0, 100ms, t0).empty());
    CHECK(f.submit(4, 3, "none", 0, 200ms, t0).empty());
    CHECK(*f.pool.next_deadline() == t0 + 100ms);
    auto expired = only<RequestFailed>(f.pool.expire(t0 + 250ms));
    REQUIRE(expired.size() == 2);
    CHECK(expired[0].request_id == 2);
    CHECK(expired[1].request_id == 3);
    CHECK(*f.pool.next_deadline() == t0 + 300ms);
  }
}

TEST_CASE("pool: the summary counts free, busy and queued per key and lists devices in order", "[pool]") {
  Fixture f;
  CHECK(f.pool.summary().keys.empty());
  CHECK(f.pool.summary().devices.empty());
  DeviceId b = f.add("rpi4", "b", 100);
  DeviceId a = f.add("rpi4", "a", 101);
  DeviceId x = f.add("x86", "x", 102);
  auto g = only<Granted>(f.submit(1, 1, "rpi4"));
  REQUIRE(g.size() == 1);
  CHECK(g[0].device == b);
  f.submit(1, 2, "x86");
  f.submit(2, 1, "x86");
  f.submit(2, 2, "x86", 1);
  f.submit(3, 1, "jetson");

  PoolSummary s = f.pool.summary();
  REQUIRE(s.keys.size() == 3);
  CHECK(s.keys[0].key == "jetson");
  CHECK(s.keys[0].free == 0);
  CHECK(s.keys[0].busy == 0);
  CHECK(s.keys[0].queued == 1);
  CHECK(s.keys[1].key == "rpi4");
  CHECK(s.keys[1].free == 1);
  CHECK(s.keys[1].busy == 1);
  CHECK(s.keys[1].queued == 0);
  CHECK(s.keys[2].key == "x86");
  CHECK(s.keys[2].free == 0);
  CHECK(s.keys[2].busy == 1);
  CHECK(s.keys[2].queued == 2);
  REQUIRE(s.devices.size() == 3);
  CHECK(s.devices[0]->id == a);
  CHECK(s.devices[1]->id == b);
  CHECK(s.devices[2]->id == x);
  CHECK(s.devices[1]->lease == g[0].lease);
  CHECK(s.devices[1]->registered_at == t0);
  CHECK_FALSE(s.devices[0]->lease);

  PoolCounts counts = f.pool.counts();
  CHECK(counts.devices == 3);
  CHECK(counts.leases == 2);
  CHECK(counts.queued == 3);
  CHECK(counts.grants == 2);
  CHECK(f.pool.served_keys() == std::vector<std::string>{"rpi4", "x86"});
}

// ---- randomized operations against a reference model --------------------------------

namespace {

struct ModelRequest {
  ConnectionId client;
  std::uint64_t id = 0;
  std::string key;
  std::int32_t priority = 0;
  std::uint64_t arrival = 0;
  std::optional<TimePoint> deadline;
};

// What the pool must be doing, kept the simple way: lists scanned in full.
struct Model {
  std::map<std::pair<ConnectionId, std::uint64_t>, ModelRequest> queued;
  std::map<std::string, std::deque<DeviceId>> free;  // per key, in the order they became free
  std::map<LeaseId, std::pair<DeviceId, ConnectionId>> leases;
  std::map<DeviceId, std::pair<std::string, ConnectionId>> devices;  // key, connection
  std::map<DeviceId, std::string> names;
  std::uint64_t arrivals = 0;

  const ModelRequest* best(const std::string& key) const {
    const ModelRequest* best = nullptr;
    for (const auto& [ident, r] : queued) {
      if (r.key != key) continue;
      if (!best || r.priority > best->priority || (r.priority == best->priority && r.arrival < best->arrival)) best = &r;
    }
    return best;
  }
  void make_free(DeviceId d) { free[devices.at(d).first].push_back(d); }
  void take_free(DeviceId d) {
    auto& list = free[devices.at(d).first];
    list.erase(std::find(list.begin(), list.end(), d));
  }
};

// Applies the events of one call to the model, checking each against it.
void apply(Model& m, const Events& events, TimePoint now) {
  for (const Event& event : events) {
    if (const auto* g = std::get_if<Granted>(&event)) {
      auto it = m.queued.find({g->client, g->request_id});
      REQUIRE(it != m.queued.end());  // only queued requests are granted, once
      const ModelRequest* best = m.best(it->second.key);
      CHECK(best == &it->second);  // priority, then arrival
      auto& free = m.free[it->second.key];
      REQUIRE_FALSE(free.empty());
      CHECK(free.front() == g->device);  // the device idle longest
      CHECK(m.devices.at(g->device).second == g->device_connection);
      free.pop_front();
      CHECK_FALSE(m.leases.contains(g->lease));
      m.leases[g->lease] = {g->device, g->client};
      m.queued.erase(it);
    } else if (const auto* r = std::get_if<RequestFailed>(&event)) {
      auto it = m.queued.find({r->client, r->request_id});
      if (r->reason == RequestFailed::Reason::bad_request) {
        continue;  // refused at submission; checked by the caller
      }
      REQUIRE(it != m.queued.end());
      if (r->reason == RequestFailed::Reason::timeout) {
        REQUIRE(it->second.deadline);
        CHECK(*it->second.deadline <= now);
      }
      m.queued.erase(it);
    } else if (const auto* e = std::get_if<LeaseEnded>(&event)) {
      if (e->reason == LeaseEnded::Reason::not_held) continue;
      auto it = m.leases.find(e->lease);
      REQUIRE(it != m.leases.end());
      auto [device, client] = it->second;
      switch (e->reason) {
        case LeaseEnded::Reason::device_lost:
          CHECK(e->to == client);
          CHECK(e->message.find("device '" + m.names.at(device) + "'") == 0);
          m.leases.erase(it);
          break;
        case LeaseEnded::Reason::holder_gone:
          CHECK(e->to == m.devices.at(device).second);
          m.leases.erase(it);
          m.make_free(device);
          break;
        case LeaseEnded::Reason::released:
          // Two events, client then device; the device is free after the second.
          if (e->to == client) break;
          CHECK(e->to == m.devices.at(device).second);
          m.leases.erase(it);
          m.make_free(device);
          break;
        case LeaseEnded::Reason::not_held: break;
      }
    }
  }
}

// Invariants that must hold after every call.
void check_invariants(const Pool& pool, const Model& m, TimePoint now) {
  PoolCounts counts = pool.counts();
  REQUIRE(counts.devices == m.devices.size());
  REQUIRE(counts.leases == m.leases.size());
  REQUIRE(counts.queued == m.queued.size());
  std::set<DeviceId> leased;
  for (const auto& [id, lease] : m.leases) {
    const PoolLease* actual = pool.lease(id);
    REQUIRE(actual);
    CHECK(actual->device == lease.first);
    CHECK(actual->client == lease.second);
    CHECK(leased.insert(lease.first).second);  // a device is in at most one lease
    REQUIRE(pool.device(lease.first));
    CHECK(pool.device(lease.first)->lease == id);
  }
  for (const auto& [id, device] : m.devices) {
    const PoolDevice* actual = pool.device(id);
    REQUIRE(actual);
    CHECK(static_cast<bool>(actual->lease) == leased.contains(id));
  }
  PoolSummary summary = pool.summary();
  for (const auto& key : summary.keys) {
    // After dispatch, a free device and a queued request of one key never coexist.
    CHECK((key.free == 0 || key.queued == 0));
    auto free = m.free.find(key.key);
    CHECK(key.free == (free == m.free.end() ? 0 : free->second.size()));
  }
  // No queued request is past its deadline once expire() has run for `now`.
  std::optional<TimePoint> earliest;
  for (const auto& [ident, r] : m.queued) {
    if (r.deadline && (!earliest || *r.deadline < *earliest)) earliest = r.deadline;
  }
  CHECK(pool.next_deadline() == earliest);
  if (earliest) CHECK(*earliest > now);
}

}  // namespace

TEST_CASE("pool: random operations keep the pool consistent with a reference model", "[pool][property]") {
  const std::vector<std::string> keys = {"a", "b", "c"};
  for (std::uint32_t seed = 1; seed <= 40; ++seed) {
    CAPTURE(seed);
    std::mt19937 rng(seed);
    auto pick = [&](std::size_t n) { return static_cast<std::size_t>(rng() % n); };
    Pool pool;
    Model m;
    TimePoint now = t0;
    std::vector<ConnectionId> clients = {ConnectionId(1), ConnectionId(2), ConnectionId(3)};
    std::uint64_t next_client = 10'000;  // never a device connection (100 and up, a few hundred)
    std::uint64_t next_connection = 100;
    std::uint64_t next_request = 1;

    for (int step = 0; step < 400; ++step) {
      Events events;
      int op = static_cast<int>(pick(100));
      if (op < 15) {  // a device registers (names repeat, so some are refused)
        std::string key = keys[pick(keys.size())];
        std::string name = "d" + std::to_string(pick(6));
        bool duplicate = false;
        for (const auto& [id, n] : m.names) duplicate |= n == name && m.devices.at(id).first == key;
        ConnectionId conn(next_connection++);
        Registration r = pool.add_device(conn, key, name, "addr", now);
        REQUIRE(static_cast<bool>(r.device) == !duplicate);
        if (r.device) {
          m.devices[r.device] = {key, conn};
          m.names[r.device] = name;
          m.make_free(r.device);
        }
        events = r.events;
      } else if (op < 22) {  // a device goes away
        if (m.devices.empty()) continue;
        auto it = std::next(m.devices.begin(), static_cast<long>(pick(m.devices.size())));
        DeviceId d = it->first;
        bool free = std::find(m.free[it->second.first].begin(), m.free[it->second.first].end(), d) !=
                    m.free[it->second.first].end();
        events = pool.remove_device(d, "disconnected");
        apply(m, events, now);
        if (free) m.take_free(d);
        m.devices.erase(d);
        m.names.erase(d);
        check_invariants(pool, m, now);
        continue;
      } else if (op < 55) {  // a request
        ConnectionId client = clients[pick(clients.size())];
        ModelRequest r{client, next_request++, keys[pick(keys.size())], static_cast<std::int32_t>(pick(3)) - 1,
                       ++m.arrivals, std::nullopt};
        auto timeout = std::chrono::milliseconds(pick(2) ? 0 : 10 + pick(300));
        if (timeout.count() > 0) r.deadline = now + timeout;
        m.queued[{client, r.id}] = r;
        events = pool.submit(client, r.id, r.key, r.priority, timeout, now);
      } else if (op < 62) {  // a cancel, of a queued request or of one that is not
        if (!m.queued.empty() && pick(4) != 0) {
          auto it = std::next(m.queued.begin(), static_cast<long>(pick(m.queued.size())));
          auto [client, id] = it->first;
          events = pool.cancel(client, id);
          REQUIRE(only<RequestFailed>(events).size() == 1);
          CHECK(only<RequestFailed>(events)[0].reason == RequestFailed::Reason::cancelled);
        } else {
          events = pool.cancel(clients[pick(clients.size())], 1'000'000 + pick(10));
          CHECK(events.empty());
        }
      } else if (op < 82) {  // a release, by the holder or by someone else
        if (!m.leases.empty() && pick(5) != 0) {
          auto it = std::next(m.leases.begin(), static_cast<long>(pick(m.leases.size())));
          events = pool.release(it->second.second, it->first);
          CHECK(only<LeaseEnded>(events).size() == 2);
        } else {
          ConnectionId client = clients[pick(clients.size())];
          LeaseId lease(1 + pick(50));
          auto held = m.leases.find(lease);
          if (held != m.leases.end() && held->second.second == client) continue;
          events = pool.release(client, lease);
          REQUIRE(events.size() == 1);
          CHECK(only<LeaseEnded>(events).at(0).reason == LeaseEnded::Reason::not_held);
        }
      } else if (op < 88) {  // a client goes away; its connection id is never reused
        std::size_t index = pick(clients.size());
        ConnectionId gone = clients[index];
        clients[index] = ConnectionId(next_client++);
        events = pool.remove_client(gone);
        apply(m, events, now);
        for (const auto& [ident, r] : m.queued) CHECK(r.client != gone);
        for (const auto& [id, lease] : m.leases) CHECK(lease.second != gone);
        check_invariants(pool, m, now);
        continue;
      } else {  // time passes
        now += std::chrono::milliseconds(pick(120));
        events = pool.expire(now);
        for (const auto& failed : only<RequestFailed>(events)) CHECK(failed.reason == RequestFailed::Reason::timeout);
      }
      apply(m, events, now);
      check_invariants(pool, m, now);
    }
  }
}

TEST_CASE("pool: requests past the per-client or the total queue cap are refused as overloaded", "[pool][caps]") {
  Pool pool(PoolLimits{2, 3});
  auto submit = [&](std::uint64_t client, std::uint64_t id) {
    return only<RequestFailed>(pool.submit(ConnectionId(client), id, "k", 0, 0ms, t0));
  };
  CHECK(submit(1, 1).empty());
  CHECK(submit(1, 2).empty());
  auto refused = submit(1, 3);
  REQUIRE(refused.size() == 1);
  CHECK(refused[0].reason == RequestFailed::Reason::overloaded);
  CHECK_THAT(refused[0].message, Catch::Contains("--max-queued-per-client"));
  CHECK(submit(2, 1).empty());
  refused = submit(3, 1);
  REQUIRE(refused.size() == 1);
  CHECK(refused[0].reason == RequestFailed::Reason::overloaded);
  CHECK_THAT(refused[0].message, Catch::Contains("--max-queued-total"));
  CHECK(pool.counts().queued == 3);
  // A cancelled request frees its place.
  pool.cancel(ConnectionId(1), 1);
  CHECK(submit(1, 4).empty());
}
