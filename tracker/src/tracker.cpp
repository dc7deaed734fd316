// Tracker server: registration, per-key request queues, leases, relaying, liveness.
#include "kestrel/tracker/tracker.h"

#include <kj/exception.h>

#include <functional>
#include <map>
#include <set>
#include <unordered_map>

#include "kestrel/rpc/device_info.h"
#include "kestrel/rpc/errors.h"
#include "kestrel/rpc/handshake.h"
#include "kestrel/base/log.h"
#include "kestrel/rpc/messages.h"
#include "kestrel/tracker/request_queue.h"

namespace kestrel::tracker {
using namespace kestrel::rpc;
namespace {

using Clock = std::chrono::steady_clock;
constexpr std::string_view kLog = "tracker";
constexpr std::size_t kMaxKeyLength = 128;

std::uint64_t ms_between(Clock::time_point from, Clock::time_point to) {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(to - from).count());
}

// A protocol violation by one peer: that peer's connection is closed.
struct Violation : RpcError {
  using RpcError::RpcError;
};

}  // namespace

struct Tracker::Impl {
  struct Peer {
    ConnectionId id;
    std::shared_ptr<Connection> conn;
    wire::Role role = wire::Role::CLIENT;
    std::string name;
    Clock::time_point last_seen;
    std::string close_reason;   // set when the tracker decides to drop the peer
    DeviceId device;            // device role, once registered
    std::set<LeaseId> leases;   // client role
    std::string describe() const {
      return str(role == wire::Role::DEVICE ? "device" : "client", " ", name.empty() ? "?" : name, " (",
                 conn->peer(), ")");
    }
  };

  struct Device {
    DeviceId id;
    std::string key;
    DeviceInfo info;
    ConnectionId peer;
    LeaseId lease;
    Clock::time_point connected_at;
    std::uint64_t free_order = 0;  // when it last became free; smallest is granted first
  };

  struct Lease {
    LeaseId id;
    DeviceId device;
    ConnectionId client;
    std::uint64_t request_id = 0;
  };

  Impl(asio::io_context& io_, TrackerOptions options_)
      : io(io_), options(std::move(options_)), acceptor(io_), heartbeat_timer(io_), started_at(Clock::now()) {}

  asio::io_context& io;
  TrackerOptions options;
  tcp::acceptor acceptor;
  asio::steady_timer heartbeat_timer;
  Clock::time_point started_at;
  bool stopping = false;

  std::uint64_t next_connection = 1;
  std::uint64_t next_device = 1;
  std::uint64_t next_lease = 1;
  std::uint64_t next_free_order = 1;
  std::uint64_t heartbeat_seq = 0;
  std::uint64_t grants = 0;
  std::uint64_t rejected = 0;

  std::unordered_map<ConnectionId, Peer> peers;
  std::map<DeviceId, Device> devices;
  std::map<std::string, std::set<DeviceId>> devices_by_key;
  std::map<std::string, std::set<std::pair<std::uint64_t, DeviceId>>> free_by_key;
  std::unordered_map<LeaseId, Lease> leases;
  RequestQueue queue;
  std::map<std::pair<ConnectionId, std::uint64_t>, std::unique_ptr<asio::steady_timer>> request_timers;

  // ---- lifecycle -------------------------------------------------------------

  void bind() {
    std::error_code ec;
    auto address = asio::ip::make_address(options.host, ec);
    if (ec) {
      tcp::resolver resolver(io);
      auto results = resolver.resolve(options.host, std::to_string(options.port), ec);
      if (ec || results.empty()) {
        throw RpcError(ErrorCode::bad_request, str("cannot resolve listen address '", options.host, "'"));
      }
      address = results.begin()->endpoint().address();
    }
    tcp::endpoint endpoint(address, options.port);
    acceptor.open(endpoint.protocol(), ec);
    if (!ec) acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
    if (!ec) acceptor.bind(endpoint, ec);
    if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) {
      throw RpcError(ErrorCode::bad_request,
                     str("cannot listen on ", options.host, ":", options.port, ": ", ec.message()));
    }
  }

  void start() {
    asio::co_spawn(io, accept_loop(), log_exceptions("accept loop"));
    asio::co_spawn(io, heartbeat_loop(), log_exceptions("heartbeat loop"));
  }

  static std::function<void(std::exception_ptr)> log_exceptions(std::string what) {
    return [what](std::exception_ptr e) {
      if (!e) return;
      try {
        std::rethrow_exception(e);
      } catch (const std::exception& ex) {
        log::error(kLog, "internal error in ", what, ": ", ex.what());
      }
    };
  }

  void stop() {
    if (stopping) return;
    stopping = true;
    log::info(kLog, "shutting down: closing ", peers.size(), " connections");
    std::error_code ec;
    acceptor.close(ec);
    heartbeat_timer.cancel();
    for (auto& [key, timer] : request_timers) timer->cancel();
    request_timers.clear();
    for (auto& [id, peer] : peers) {
      peer.conn->send(failure_frame(ErrorCode::shutting_down, "tracker is shutting down"));
      peer.conn->close_after_flush(std::chrono::milliseconds(500));
    }
  }

  awaitable<void> accept_loop() {
    while (!stopping) {
      auto [ec, socket] = co_await acceptor.async_accept(use_nothrow);
      if (ec) {
        if (stopping || ec == asio::error::operation_aborted) break;
        log::warn(kLog, "accept failed: ", ec.message());
        if (ec == asio::error::no_descriptors) {
          asio::steady_timer pause(io, std::chrono::milliseconds(100));
          co_await pause.async_wait(use_nothrow);
        }
        continue;
      }
      asio::co_spawn(io, serve(std::move(socket)), log_exceptions("connection"));
    }
  }

  awaitable<void> heartbeat_loop() {
    const auto silence_limit = options.heartbeat_interval * options.heartbeat_misses;
    while (!stopping) {
      heartbeat_timer.expires_after(options.heartbeat_interval);
      auto [ec] = co_await heartbeat_timer.async_wait(use_nothrow);
      if (ec || stopping) break;
      auto now = Clock::now();
      ++heartbeat_seq;
      FrameBytes beat = heartbeat_frame(false, heartbeat_seq);
      for (auto& [id, peer] : peers) {
        if (!peer.conn->is_open()) continue;
        if (now - peer.last_seen > silence_limit) {
          peer.close_reason = str("no heartbeat for ", ms_between(peer.last_seen, now), " ms");
          log::warn(kLog, peer.describe(), ": ", peer.close_reason, "; dropping it");
          peer.conn->close();
        } else {
          peer.conn->send(beat);
        }
      }
    }
  }

  // ---- one connection ----------------------------------------------------------

  awaitable<void> serve(tcp::socket socket) {
    auto conn = Connection::create(std::move(socket), options.connection);
    ConnectionId id(next_connection++);
    TrackerHandshakeOptions hs;
    hs.token = options.token ? &*options.token : nullptr;
    hs.connection_id = id;
    hs.timeout = options.handshake_timeout;
    hs.heartbeat_interval = options.heartbeat_interval;
    hs.heartbeat_misses = options.heartbeat_misses;
    PeerHello hello;
    try {
      hello = co_await accept_handshake(conn, hs);
    } catch (const RpcError& e) {
      ++rejected;
      log::warn(kLog, "rejected connection from ", conn->peer(), ": ", e.what());
      co_return;
    }
    if (stopping) {
      conn->send(failure_frame(ErrorCode::shutting_down, "tracker is shutting down"));
      conn->close_after_flush();
      co_return;
    }
    Peer& peer = peers[id];
    peer.id = id;
    peer.conn = conn;
    peer.role = hello.role;
    peer.name = hello.name;
    peer.last_seen = Clock::now();
    log::info(kLog, "accepted ", peer.describe(), " as connection ", id.value);

    while (true) {
      ReadResult r = co_await conn->read();
      if (r.error != FrameError::none) {
        if (r.error != FrameError::closed) {
          ++rejected;
          log::warn(kLog, peer.describe(), ": ", to_string(r.error), ": ", r.detail, "; closing this connection");
          if (peer.close_reason.empty()) peer.close_reason = str(to_string(r.error), ": ", r.detail);
          conn->send(failure_frame(ErrorCode::protocol_error, str(to_string(r.error), ": ", r.detail)));
          conn->close_after_flush();
        } else if (peer.close_reason.empty()) {
          peer.close_reason = "disconnected";
        }
        break;
      }
      peer.last_seen = Clock::now();
      try {
        if (peer.role == wire::Role::DEVICE) {
          on_device_frame(peer, *r.frame);
        } else {
          on_client_frame(peer, *r.frame);
        }
      } catch (const Violation& e) {
        ++rejected;
        peer.close_reason = e.what();
        log::warn(kLog, peer.describe(), ": ", e.what(), "; closing this connection");
        conn->send(failure_frame(e.code(), e.what()));
        conn->close_after_flush();
        break;
      } catch (const kj::Exception& e) {
        ++rejected;
        peer.close_reason = str("malformed frame: ", e.getDescription().cStr());
        log::warn(kLog, peer.describe(), ": ", peer.close_reason, "; closing this connection");
        conn->send(failure_frame(ErrorCode::protocol_error, peer.close_reason));
        conn->close_after_flush();
        break;
      }
      if (conn->is_closing()) break;
    }
    drop_peer(id);
  }

  void drop_peer(ConnectionId id) {
    auto it = peers.find(id);
    if (it == peers.end()) return;
    Peer& peer = it->second;
    log::info(kLog, peer.describe(), " gone: ", peer.close_reason);
    if (peer.device) remove_device(peer.device, peer.close_reason);
    if (peer.role == wire::Role::CLIENT) {
      for (const auto& request : queue.remove_client(id)) {
        cancel_timer(id, request.request_id);
        log::info(kLog, "dropped queued request ", request.request_id, " for key '", request.key, "' of ",
                  peer.describe());
      }
      std::set<LeaseId> held = peer.leases;
      for (LeaseId lease : held) end_lease_by_client_loss(lease);
    }
    peer.conn->close_after_flush(std::chrono::milliseconds(200));
    peers.erase(it);
  }

  // ---- devices -------------------------------------------------------------------

  void on_device_frame(Peer& peer, const InFrame& frame) {
    auto root = frame.root();
    switch (root.which()) {
      case wire::Frame::REGISTER: on_register(peer, root.getRegister()); break;
      case wire::Frame::HEARTBEAT: peer.conn->send(heartbeat_frame(true, root.getHeartbeat().getSeq())); break;
      case wire::Frame::HEARTBEAT_ACK: break;
      case wire::Frame::RELAY: relay_from_device(peer, frame); break;
      case wire::Frame::FAILURE:
        log::warn(kLog, peer.describe(), " reports: ", root.getFailure().getMessage().cStr());
        break;
      default:
        throw Violation(ErrorCode::protocol_error, str("unexpected frame '", frame_kind(root), "' from a device"));
    }
  }

  static void check_key(std::string_view key) {
    if (key.empty() || key.size() > kMaxKeyLength) {
      throw Violation(ErrorCode::bad_request, str("device key must be 1-", kMaxKeyLength, " characters"));
    }
    for (char c : key) {
      if (c <= ' ' || c > '~') throw Violation(ErrorCode::bad_request, "device key must be printable ASCII with no spaces");
    }
  }

  void on_register(Peer& peer, wire::Register::Reader reg) {
    if (peer.device) throw Violation(ErrorCode::protocol_error, "device registered twice on one connection");
    std::string key = reg.getKey().cStr();
    check_key(key);
    DeviceInfo info = from_wire(reg.getInfo());
    if (info.name.empty()) info.name = peer.conn->peer();
    // Names identify devices in the pool, so a live duplicate is refused rather than
    // allowed to evict the other (two boards given the same --name would otherwise
    // evict each other forever). A restarted device whose old connection is still
    // half-open gets in once that connection misses its heartbeats; it retries.
    for (const auto& [id, other] : devices) {
      if (other.info.name == info.name && other.key == key) {
        auto old = peers.find(other.peer);
        std::string where = old == peers.end() ? std::string("?") : old->second.conn->peer();
        throw Violation(ErrorCode::bad_request,
                        str("a device named '", info.name, "' is already registered under key '", key, "' from ",
                            where, "; give each device a unique --name"));
      }
    }
    Device device;
    device.id = DeviceId(next_device++);
    device.key = key;
    device.info = std::move(info);
    device.peer = peer.id;
    device.connected_at = Clock::now();
    device.free_order = next_free_order++;
    peer.device = device.id;
    peer.name = device.info.name;
    devices_by_key[key].insert(device.id);
    free_by_key[key].insert({device.free_order, device.id});
    log::info(kLog, "registered device ", device.id.value, " '", device.info.name, "' under key '", key, "' (",
              device.info.triple, ", ", device.info.cores, " cores)");
    DeviceId did = device.id;
    devices.emplace(did, std::move(device));

    capnp::MallocMessageBuilder builder;
    builder.initRoot<wire::Frame>().initRegistered().setDeviceId(did.value);
    peer.conn->send(builder);
    dispatch(key);
  }

  void remove_device(DeviceId id, const std::string& reason) {
    auto it = devices.find(id);
    if (it == devices.end()) return;
    Device& device = it->second;
    if (device.lease) {
      auto lease_it = leases.find(device.lease);
      if (lease_it != leases.end()) {
        Lease lease = lease_it->second;
        leases.erase(lease_it);
        auto client = peers.find(lease.client);
        if (client != peers.end()) {
          client->second.leases.erase(lease.id);
          std::string message = str("device '", device.info.name, "' (key '", device.key, "') lost: ", reason);
          send_lease_ended(client->second, lease.id, false, ErrorCode::device_lost, message);
          log::warn(kLog, "lease ", lease.id.value, " of ", client->second.describe(), " failed: ", message);
        }
      }
    }
    free_by_key[device.key].erase({device.free_order, device.id});
    if (free_by_key[device.key].empty()) free_by_key.erase(device.key);
    devices_by_key[device.key].erase(device.id);
    if (devices_by_key[device.key].empty()) devices_by_key.erase(device.key);
    log::info(kLog, "removed device ", id.value, " '", device.info.name, "' (key '", device.key, "'): ", reason);
    devices.erase(it);
  }

  void relay_from_device(Peer& peer, const InFrame& frame) {
    LeaseId lease_id(frame.root().getRelay().getLeaseId());
    auto it = leases.find(lease_id);
    if (it == leases.end() || it->second.device != peer.device) {
      log::debug(kLog, peer.describe(), " relayed for lease ", lease_id.value, " which it does not hold; dropped");
      return;
    }
    auto client = peers.find(it->second.client);
    if (client != peers.end()) client->second.conn->send(encode_raw(frame.bytes()));
  }

  // ---- clients -------------------------------------------------------------------

  void on_client_frame(Peer& peer, const InFrame& frame) {
    auto root = frame.root();
    switch (root.which()) {
      case wire::Frame::REQUEST_DEVICE: on_request(peer, root.getRequestDevice()); break;
      case wire::Frame::CANCEL_REQUEST: on_cancel(peer, root.getCancelRequest().getRequestId()); break;
      case wire::Frame::RELEASE: on_release(peer, LeaseId(root.getRelease().getLeaseId())); break;
      case wire::Frame::RELAY: relay_from_client(peer, frame); break;
      case wire::Frame::SUMMARY_REQUEST: send_summary(peer, root.getSummaryRequest().getRequestId()); break;
      case wire::Frame::HEARTBEAT: peer.conn->send(heartbeat_frame(true, root.getHeartbeat().getSeq())); break;
      case wire::Frame::HEARTBEAT_ACK: break;
      default:
        throw Violation(ErrorCode::protocol_error, str("unexpected frame '", frame_kind(root), "' from a client"));
    }
  }

  void send_request_failed(Peer& peer, std::uint64_t request_id, ErrorCode code, const std::string& message) {
    capnp::MallocMessageBuilder builder;
    auto failed = builder.initRoot<wire::Frame>().initRequestFailed();
    failed.setRequestId(request_id);
    failed.getFailure().setCode(to_wire(code));
    failed.getFailure().setMessage(message);
    peer.conn->send(builder);
  }

  void on_request(Peer& peer, wire::RequestDevice::Reader request) {
    std::uint64_t request_id = request.getRequestId();
    std::string key = request.getKey().cStr();
    try {
      check_key(key);
    } catch (const Violation& e) {
      send_request_failed(peer, request_id, ErrorCode::bad_request, e.what());
      return;
    }
    QueuedRequest queued{peer.id, request_id, key, request.getPriority(), 0};
    if (!queue.push(queued)) {
      send_request_failed(peer, request_id, ErrorCode::bad_request, str("request id ", request_id, " is already queued"));
      return;
    }
    log::debug(kLog, peer.describe(), " requests key '", key, "' priority ", request.getPriority(), " (request ",
               request_id, ")");
    if (request.getTimeoutMs() > 0) {
      auto timer = std::make_unique<asio::steady_timer>(io, std::chrono::milliseconds(request.getTimeoutMs()));
      ConnectionId client = peer.id;
      std::uint32_t timeout_ms = request.getTimeoutMs();
      timer->async_wait([this, client, request_id, key, timeout_ms](std::error_code ec) {
        if (!ec) on_request_timeout(client, request_id, key, timeout_ms);
      });
      request_timers[{peer.id, request_id}] = std::move(timer);
    }
    dispatch(key);
  }

  void on_request_timeout(ConnectionId client, std::uint64_t request_id, const std::string& key,
                          std::uint32_t timeout_ms) {
    request_timers.erase({client, request_id});
    if (!queue.remove(client, request_id)) return;
    auto peer = peers.find(client);
    if (peer == peers.end()) return;
    std::string message;
    auto registered = devices_by_key.find(key);
    if (registered == devices_by_key.end()) {
      std::string known;
      for (const auto& [k, ids] : devices_by_key) known += (known.empty() ? "" : ", ") + k;
      message = str("no device is registered under key '", key, "' (waited ", timeout_ms, " ms; keys served: ",
                    known.empty() ? "none" : known, ")");
    } else {
      message = str("no device of key '", key, "' became free within ", timeout_ms, " ms (",
                    registered->second.size(), " registered, all busy)");
    }
    log::info(kLog, "request ", request_id, " of ", peer->second.describe(), " timed out: ", message);
    send_request_failed(peer->second, request_id, ErrorCode::timeout, message);
  }

  void cancel_timer(ConnectionId client, std::uint64_t request_id) {
    auto it = request_timers.find({client, request_id});
    if (it == request_timers.end()) return;
    it->second->cancel();
    request_timers.erase(it);
  }

  void on_cancel(Peer& peer, std::uint64_t request_id) {
    if (!queue.remove(peer.id, request_id)) return;  // already granted or unknown: the grant is on its way
    cancel_timer(peer.id, request_id);
    send_request_failed(peer, request_id, ErrorCode::cancelled, "request cancelled by the client");
  }

  void dispatch(const std::string& key) {
    while (true) {
      auto free_it = free_by_key.find(key);
      if (free_it == free_by_key.end() || free_it->second.empty()) return;
      auto request = queue.pop(key);
      if (!request) return;
      cancel_timer(request->client, request->request_id);
      auto client = peers.find(request->client);
      if (client == peers.end()) continue;

      DeviceId device_id = free_it->second.begin()->second;
      free_it->second.erase(free_it->second.begin());
      if (free_it->second.empty()) free_by_key.erase(free_it);
      Device& device = devices.at(device_id);
      Lease lease{LeaseId(next_lease++), device_id, request->client, request->request_id};
      device.lease = lease.id;
      leases.emplace(lease.id, lease);
      client->second.leases.insert(lease.id);
      ++grants;

      auto device_peer = peers.find(device.peer);
      {
        capnp::MallocMessageBuilder builder;
        auto started = builder.initRoot<wire::Frame>().initLeaseStarted();
        started.setLeaseId(lease.id.value);
        started.setHolder(client->second.describe());
        device_peer->second.conn->send(builder);
      }
      capnp::MallocMessageBuilder builder;
      auto grant = builder.initRoot<wire::Frame>().initGrant();
      grant.setRequestId(request->request_id);
      grant.setLeaseId(lease.id.value);
      grant.setDeviceId(device_id.value);
      to_wire(device.info, grant.initInfo());
      client->second.conn->send(builder);
      log::debug(kLog, "lease ", lease.id.value, ": device '", device.info.name, "' to ", client->second.describe());
    }
  }

  void send_lease_ended(Peer& peer, LeaseId lease, bool released, ErrorCode code, const std::string& message) {
    capnp::MallocMessageBuilder builder;
    auto ended = builder.initRoot<wire::Frame>().initLeaseEnded();
    ended.setLeaseId(lease.value);
    ended.setReleased(released);
    if (!released) {
      ended.getFailure().setCode(to_wire(code));
      ended.getFailure().setMessage(message);
    }
    peer.conn->send(builder);
  }

  // Returns the device of an ended lease to the pool.
  void free_device(DeviceId id, LeaseId lease, bool released, ErrorCode code, const std::string& message) {
    auto it = devices.find(id);
    if (it == devices.end()) return;
    Device& device = it->second;
    device.lease = LeaseId();
    device.free_order = next_free_order++;
    free_by_key[device.key].insert({device.free_order, device.id});
    auto device_peer = peers.find(device.peer);
    if (device_peer != peers.end()) send_lease_ended(device_peer->second, lease, released, code, message);
    dispatch(device.key);
  }

  void on_release(Peer& peer, LeaseId lease_id) {
    auto it = leases.find(lease_id);
    if (it == leases.end() || it->second.client != peer.id) {
      send_lease_ended(peer, lease_id, false, ErrorCode::no_such_lease,
                       str("lease ", lease_id.value, " is not held by this client"));
      return;
    }
    Lease lease = it->second;
    leases.erase(it);
    peer.leases.erase(lease_id);
    send_lease_ended(peer, lease_id, true, ErrorCode::cancelled, "");
    free_device(lease.device, lease_id, true, ErrorCode::cancelled, "");
  }

  void end_lease_by_client_loss(LeaseId lease_id) {
    auto it = leases.find(lease_id);
    if (it == leases.end()) return;
    Lease lease = it->second;
    leases.erase(it);
    log::info(kLog, "lease ", lease_id.value, " reclaimed: its holder disconnected");
    free_device(lease.device, lease_id, false, ErrorCode::cancelled, "lease holder disconnected");
  }

  void relay_from_client(Peer& peer, const InFrame& frame) {
    LeaseId lease_id(frame.root().getRelay().getLeaseId());
    auto it = leases.find(lease_id);
    if (it == leases.end() || it->second.client != peer.id) {
      send_lease_ended(peer, lease_id, false, ErrorCode::no_such_lease,
                       str("lease ", lease_id.value, " is not held by this client"));
      return;
    }
    auto& device = devices.at(it->second.device);
    auto device_peer = peers.find(device.peer);
    if (device_peer != peers.end()) device_peer->second.conn->send(encode_raw(frame.bytes()));
  }

  void send_summary(Peer& peer, std::uint64_t request_id) {
    auto now = Clock::now();
    capnp::MallocMessageBuilder builder;
    auto summary = builder.initRoot<wire::Frame>().initSummary();
    summary.setRequestId(request_id);
    summary.setTrackerVersion(std::string(software_version()));
    summary.setUptimeMs(ms_between(started_at, now));
    unsigned clients = 0;
    for (const auto& [id, p] : peers) clients += p.role == wire::Role::CLIENT ? 1 : 0;
    summary.setClients(clients);

    std::set<std::string> keys;
    for (const auto& [key, ids] : devices_by_key) keys.insert(key);
    for (const auto& key : queue.keys()) keys.insert(key);
    auto key_list = summary.initKeys(static_cast<unsigned>(keys.size()));
    unsigned i = 0;
    for (const auto& key : keys) {
      auto registered = devices_by_key.find(key);
      auto free_it = free_by_key.find(key);
      unsigned total = registered == devices_by_key.end() ? 0 : static_cast<unsigned>(registered->second.size());
      unsigned free_count = free_it == free_by_key.end() ? 0 : static_cast<unsigned>(free_it->second.size());
      key_list[i].setKey(key);
      key_list[i].setFree(free_count);
      key_list[i].setBusy(total - free_count);
      key_list[i].setQueued(static_cast<unsigned>(queue.size(key)));
      ++i;
    }

    std::vector<const Device*> sorted;
    for (const auto& [id, device] : devices) sorted.push_back(&device);
    std::sort(sorted.begin(), sorted.end(), [](const Device* a, const Device* b) {
      return std::tie(a->key, a->info.name, a->id) < std::tie(b->key, b->info.name, b->id);
    });
    auto device_list = summary.initDevices(static_cast<unsigned>(sorted.size()));
    i = 0;
    for (const Device* device : sorted) {
      auto d = device_list[i++];
      d.setDeviceId(device->id.value);
      d.setKey(device->key);
      to_wire(device->info, d.initInfo());
      auto device_peer = peers.find(device->peer);
      if (device_peer != peers.end()) d.setAddress(device_peer->second.conn->peer());
      d.setBusy(static_cast<bool>(device->lease));
      d.setConnectedMs(ms_between(device->connected_at, now));
      if (device->lease) {
        d.setLeaseId(device->lease.value);
        auto holder = peers.find(leases.at(device->lease).client);
        if (holder != peers.end()) d.setLeaseHolder(holder->second.describe());
      }
    }
    peer.conn->send(builder);
  }
};

Tracker::Tracker(asio::io_context& io, TrackerOptions options)
    : impl_(std::make_unique<Impl>(io, std::move(options))) {
  impl_->bind();
}

Tracker::~Tracker() = default;

void Tracker::start() {
  log::info(kLog, "listening on ", address(), impl_->options.token ? " (token required)" : " (no token)",
            "; dead peers are dropped within ", loss_bound().count(), " ms");
  impl_->start();
}

void Tracker::stop() { impl_->stop(); }

std::uint16_t Tracker::port() const {
  std::error_code ec;
  auto endpoint = impl_->acceptor.local_endpoint(ec);
  return ec ? 0 : endpoint.port();
}

std::string Tracker::address() const {
  std::error_code ec;
  auto endpoint = impl_->acceptor.local_endpoint(ec);
  if (ec) return "?";
  return Endpoint{endpoint.address().to_string(), endpoint.port()}.to_string();
}

std::chrono::milliseconds Tracker::loss_bound() const {
  return impl_->options.heartbeat_interval * (impl_->options.heartbeat_misses + 1);
}

TrackerStats Tracker::stats() const {
  TrackerStats s;
  s.devices = impl_->devices.size();
  for (const auto& [id, peer] : impl_->peers) s.clients += peer.role == wire::Role::CLIENT ? 1 : 0;
  s.leases = impl_->leases.size();
  s.queued = impl_->queue.size();
  s.grants = impl_->grants;
  s.rejected_connections = impl_->rejected;
  return s;
}

}  // namespace kestrel::tracker
