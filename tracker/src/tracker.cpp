// Tracker server: connections, handshakes, heartbeats and relaying. The registry,
// queues and leases are the Pool (pool.cpp); this file feeds it what arrives on the
// connections and turns what it returns into frames.
#include "kestrel/tracker/tracker.h"

#include <kj/exception.h>

#include <functional>
#include <unordered_map>

#include "kestrel/base/log.h"
#include "kestrel/base/version.h"
#include "kestrel/rpc/device_info.h"
#include "kestrel/rpc/errors.h"
#include "kestrel/rpc/handshake.h"
#include "kestrel/rpc/messages.h"
#include "kestrel/tracker/pool.h"

namespace kestrel::tracker {
using namespace kestrel::rpc;
namespace {

constexpr std::string_view kLog = "tracker";

std::uint64_t ms_between(Clock::time_point from, Clock::time_point to) {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(to - from).count());
}

// A protocol violation by one peer: that peer's connection is closed.
struct Violation : RpcError {
  using RpcError::RpcError;
};

ErrorCode code_of(RequestFailed::Reason reason) {
  switch (reason) {
    case RequestFailed::Reason::bad_request: return ErrorCode::bad_request;
    case RequestFailed::Reason::cancelled: return ErrorCode::cancelled;
    case RequestFailed::Reason::timeout: return ErrorCode::timeout;
    case RequestFailed::Reason::client_gone: return ErrorCode::connection_lost;
  }
  return ErrorCode::bad_request;
}

ErrorCode code_of(LeaseEnded::Reason reason) {
  switch (reason) {
    case LeaseEnded::Reason::released: return ErrorCode::cancelled;
    case LeaseEnded::Reason::device_lost: return ErrorCode::device_lost;
    case LeaseEnded::Reason::holder_gone: return ErrorCode::cancelled;
    case LeaseEnded::Reason::not_held: return ErrorCode::no_such_lease;
  }
  return ErrorCode::cancelled;
}

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
    std::string describe() const {
      return str(role == wire::Role::DEVICE ? "device" : "client", " ", name.empty() ? "?" : name, " (",
                 conn->peer(), ")");
    }
  };

  Impl(asio::io_context& io_, TrackerOptions options_)
      : io(io_),
        options(std::move(options_)),
        acceptor(io_),
        heartbeat_timer(io_),
        deadline_timer(io_),
        started_at(Clock::now()) {}

  asio::io_context& io;
  TrackerOptions options;
  std::shared_ptr<const TlsContext> tls;  // null: plain frames
  tcp::acceptor acceptor;
  asio::steady_timer heartbeat_timer;
  asio::steady_timer deadline_timer;       // armed for the pool's next request deadline
  std::optional<Clock::time_point> armed;  // what deadline_timer waits for, if anything
  Clock::time_point started_at;
  bool stopping = false;

  std::uint64_t next_connection = 1;
  std::uint64_t heartbeat_seq = 0;
  std::uint64_t rejected = 0;

  std::unordered_map<ConnectionId, Peer> peers;
  Pool pool;
  std::unordered_map<DeviceId, DeviceInfo> infos;  // what each registered device reported

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
    deadline_timer.cancel();
    armed.reset();
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

  // Keeps deadline_timer armed for the pool's earliest request deadline; when it fires,
  // the pool fails what has expired. Called after every pool change that can add or
  // remove a deadline.
  void schedule_expiry() {
    if (stopping) return;
    std::optional<Clock::time_point> next = pool.next_deadline();
    if (next == armed) return;
    armed = next;
    if (!next) {
      deadline_timer.cancel();
      return;
    }
    deadline_timer.expires_at(*next);  // cancels the previous wait
    deadline_timer.async_wait([this](std::error_code ec) {
      if (ec) return;
      armed.reset();
      deliver(pool.expire(Clock::now()));
      schedule_expiry();
    });
  }

  // ---- one connection ----------------------------------------------------------

  bool any_token() const { return options.token || options.device_token || options.client_token; }

  void make_tls_context() {
    if (options.no_tls || (!any_token() && options.tls_cert.empty())) return;
    tls = TlsContext::server(options.tls_cert, options.tls_key);
    if (tls->generated_certificate()) {
      log::info(kLog, "TLS with a self-signed certificate generated at start, SHA-256 fingerprint ",
                tls->fingerprint(), " (pass --tls-cert/--tls-key for one peers can pin with --tls-ca)");
    } else {
      log::info(kLog, "TLS with certificate '", options.tls_cert, "', SHA-256 fingerprint ", tls->fingerprint());
    }
  }

  awaitable<void> serve(tcp::socket socket) {
    const std::string remote = [&] {
      std::error_code ec;
      auto endpoint = socket.remote_endpoint(ec);
      return ec ? std::string("?") : str(endpoint.address().to_string(), ":", endpoint.port());
    }();
    std::shared_ptr<Connection> conn;
    ConnectionId id(next_connection++);
    TrackerHandshakeOptions hs;
    hs.token = options.token ? &*options.token : nullptr;
    hs.device_token = options.device_token ? &*options.device_token : nullptr;
    hs.client_token = options.client_token ? &*options.client_token : nullptr;
    hs.connection_id = id;
    hs.timeout = options.handshake_timeout;
    hs.heartbeat_interval = options.heartbeat_interval;
    hs.heartbeat_misses = options.heartbeat_misses;
    PeerHello hello;
    try {
      conn = co_await accept_transport(std::move(socket), tls, options.connection, options.handshake_timeout);
      hello = co_await accept_handshake(conn, hs);
    } catch (const RpcError& e) {
      ++rejected;
      log::warn(kLog, "rejected connection from ", remote, ": ", e.what());
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
    if (peer.device) {
      std::string key = pool.device(peer.device)->key;
      deliver(pool.remove_device(peer.device, peer.close_reason));
      log::info(kLog, "removed device ", peer.device.value, " '", peer.name, "' (key '", key, "'): ", peer.close_reason);
      infos.erase(peer.device);
    }
    if (peer.role == wire::Role::CLIENT) {
      deliver(pool.remove_client(id));
      schedule_expiry();
    }
    peer.conn->close_after_flush(std::chrono::milliseconds(200));
    peers.erase(it);
  }

  // ---- pool events -> frames ---------------------------------------------------

  Peer* find_peer(ConnectionId id) {
    auto it = peers.find(id);
    return it == peers.end() ? nullptr : &it->second;
  }

  void deliver(const Events& events) {
    for (const Event& event : events) std::visit([this](const auto& e) { on_event(e); }, event);
  }

  void on_event(const Granted& granted) {
    Peer* client = find_peer(granted.client);
    Peer* device_peer = find_peer(granted.device_connection);
    const DeviceInfo& info = infos.at(granted.device);
    if (device_peer) {
      capnp::MallocMessageBuilder builder;
      auto started = builder.initRoot<wire::Frame>().initLeaseStarted();
      started.setLeaseId(granted.lease.value);
      started.setHolder(client ? client->describe() : std::string("?"));
      device_peer->conn->send(builder);
    }
    if (client) {
      capnp::MallocMessageBuilder builder;
      auto grant = builder.initRoot<wire::Frame>().initGrant();
      grant.setRequestId(granted.request_id);
      grant.setLeaseId(granted.lease.value);
      grant.setDeviceId(granted.device.value);
      to_wire(info, grant.initInfo());
      client->conn->send(builder);
      log::debug(kLog, "lease ", granted.lease.value, ": device '", info.name, "' to ", client->describe());
    }
  }

  void on_event(const RequestFailed& failed) {
    Peer* client = find_peer(failed.client);
    std::string who = client ? client->describe() : str("connection ", failed.client.value);
    if (failed.reason == RequestFailed::Reason::client_gone) {
      log::info(kLog, "dropped queued request ", failed.request_id, " for key '", failed.key, "' of ", who);
      return;
    }
    if (failed.reason == RequestFailed::Reason::timeout) {
      log::info(kLog, "request ", failed.request_id, " of ", who, " timed out: ", failed.message);
    }
    if (!client) return;
    capnp::MallocMessageBuilder builder;
    auto frame = builder.initRoot<wire::Frame>().initRequestFailed();
    frame.setRequestId(failed.request_id);
    frame.getFailure().setCode(to_wire(code_of(failed.reason)));
    frame.getFailure().setMessage(failed.message);
    client->conn->send(builder);
  }

  void on_event(const LeaseEnded& ended) {
    Peer* peer = find_peer(ended.to);
    switch (ended.reason) {
      case LeaseEnded::Reason::device_lost:
        log::warn(kLog, "lease ", ended.lease.value, " of ", peer ? peer->describe() : std::string("?"),
                  " failed: ", ended.message);
        break;
      case LeaseEnded::Reason::holder_gone:
        log::info(kLog, "lease ", ended.lease.value, " reclaimed: its holder disconnected");
        break;
      case LeaseEnded::Reason::released:
      case LeaseEnded::Reason::not_held: break;
    }
    if (!peer) return;
    send_lease_ended(*peer, ended.lease, ended.reason == LeaseEnded::Reason::released, code_of(ended.reason),
                     ended.message);
  }

  static void send_lease_ended(Peer& peer, LeaseId lease, bool released, ErrorCode code, const std::string& message) {
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

  void on_register(Peer& peer, wire::Register::Reader reg) {
    if (peer.device) throw Violation(ErrorCode::protocol_error, "device registered twice on one connection");
    std::string key = reg.getKey().cStr();
    DeviceInfo info = from_wire(reg.getInfo());
    if (info.name.empty()) info.name = peer.conn->peer();
    Registration registration = pool.add_device(peer.id, key, info.name, peer.conn->peer(), Clock::now());
    if (!registration.device) throw Violation(ErrorCode::bad_request, registration.refusal);
    peer.device = registration.device;
    peer.name = info.name;
    log::info(kLog, "registered device ", peer.device.value, " '", info.name, "' under key '", key, "' (",
              info.triple, ", ", info.cores, " cores)");
    infos.emplace(peer.device, std::move(info));

    capnp::MallocMessageBuilder builder;
    builder.initRoot<wire::Frame>().initRegistered().setDeviceId(peer.device.value);
    peer.conn->send(builder);
    deliver(registration.events);
    schedule_expiry();
  }

  void relay_from_device(Peer& peer, const InFrame& frame) {
    LeaseId lease_id(frame.root().getRelay().getLeaseId());
    const PoolLease* lease = pool.lease(lease_id);
    if (!lease || lease->device != peer.device) {
      log::debug(kLog, peer.describe(), " relayed for lease ", lease_id.value, " which it does not hold; dropped");
      return;
    }
    if (Peer* client = find_peer(lease->client)) client->conn->send(encode_raw(frame.bytes()));
  }

  // ---- clients -------------------------------------------------------------------

  void on_client_frame(Peer& peer, const InFrame& frame) {
    auto root = frame.root();
    switch (root.which()) {
      case wire::Frame::REQUEST_DEVICE: on_request(peer, root.getRequestDevice()); break;
      case wire::Frame::CANCEL_REQUEST:
        deliver(pool.cancel(peer.id, root.getCancelRequest().getRequestId()));
        schedule_expiry();
        break;
      case wire::Frame::RELEASE:
        deliver(pool.release(peer.id, LeaseId(root.getRelease().getLeaseId())));
        schedule_expiry();
        break;
      case wire::Frame::RELAY: relay_from_client(peer, frame); break;
      case wire::Frame::SUMMARY_REQUEST: send_summary(peer, root.getSummaryRequest().getRequestId()); break;
      case wire::Frame::HEARTBEAT: peer.conn->send(heartbeat_frame(true, root.getHeartbeat().getSeq())); break;
      case wire::Frame::HEARTBEAT_ACK: break;
      default:
        throw Violation(ErrorCode::protocol_error, str("unexpected frame '", frame_kind(root), "' from a client"));
    }
  }

  void on_request(Peer& peer, wire::RequestDevice::Reader request) {
    std::string key = request.getKey().cStr();
    log::debug(kLog, peer.describe(), " requests key '", key, "' priority ", request.getPriority(), " (request ",
               request.getRequestId(), ")");
    deliver(pool.submit(peer.id, request.getRequestId(), key, request.getPriority(),
                        std::chrono::milliseconds(request.getTimeoutMs()), Clock::now()));
    schedule_expiry();
  }

  void relay_from_client(Peer& peer, const InFrame& frame) {
    LeaseId lease_id(frame.root().getRelay().getLeaseId());
    const PoolLease* lease = pool.lease_of(peer.id, lease_id);
    if (!lease) {
      send_lease_ended(peer, lease_id, false, ErrorCode::no_such_lease, lease_not_held_message(lease_id));
      return;
    }
    const PoolDevice* device = pool.device(lease->device);
    if (Peer* device_peer = device ? find_peer(device->connection) : nullptr) {
      device_peer->conn->send(encode_raw(frame.bytes()));
    }
  }

  void send_summary(Peer& peer, std::uint64_t request_id) {
    auto now = Clock::now();
    PoolSummary state = pool.summary();
    capnp::MallocMessageBuilder builder;
    auto summary = builder.initRoot<wire::Frame>().initSummary();
    summary.setRequestId(request_id);
    summary.setTrackerVersion(std::string(software_version()));
    summary.setUptimeMs(ms_between(started_at, now));
    unsigned clients = 0;
    for (const auto& [id, p] : peers) clients += p.role == wire::Role::CLIENT ? 1 : 0;
    summary.setClients(clients);

    auto key_list = summary.initKeys(static_cast<unsigned>(state.keys.size()));
    unsigned i = 0;
    for (const PoolKeySummary& key : state.keys) {
      key_list[i].setKey(key.key);
      key_list[i].setFree(key.free);
      key_list[i].setBusy(key.busy);
      key_list[i].setQueued(key.queued);
      ++i;
    }

    auto device_list = summary.initDevices(static_cast<unsigned>(state.devices.size()));
    i = 0;
    for (const PoolDevice* device : state.devices) {
      auto d = device_list[i++];
      d.setDeviceId(device->id.value);
      d.setKey(device->key);
      to_wire(infos.at(device->id), d.initInfo());
      d.setAddress(device->address);
      d.setBusy(static_cast<bool>(device->lease));
      d.setConnectedMs(ms_between(device->registered_at, now));
      if (device->lease) {
        d.setLeaseId(device->lease.value);
        if (Peer* holder = find_peer(pool.lease(device->lease)->client)) d.setLeaseHolder(holder->describe());
      }
    }
    peer.conn->send(builder);
  }
};

Tracker::Tracker(asio::io_context& io, TrackerOptions options)
    : impl_(std::make_unique<Impl>(io, std::move(options))) {
  impl_->make_tls_context();
  impl_->bind();
}

Tracker::~Tracker() = default;

void Tracker::start() {
  const auto& o = impl_->options;
  const char* auth = o.device_token || o.client_token ? " (device and client tokens required"
                     : o.token                        ? " (token required"
                                                      : " (no token";
  const char* transport = impl_->tls ? ", TLS)" : o.token || o.device_token || o.client_token ? ", frame MACs without TLS)" : ")";
  log::info(kLog, "listening on ", address(), auth, transport,
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

std::shared_ptr<const rpc::TlsContext> Tracker::tls() const { return impl_->tls; }

std::chrono::milliseconds Tracker::loss_bound() const {
  return impl_->options.heartbeat_interval * (impl_->options.heartbeat_misses + 1);
}

TrackerStats Tracker::stats() const {
  TrackerStats s;
  PoolCounts counts = impl_->pool.counts();
  s.devices = counts.devices;
  for (const auto& [id, peer] : impl_->peers) s.clients += peer.role == wire::Role::CLIENT ? 1 : 0;
  s.leases = counts.leases;
  s.queued = counts.queued;
  s.grants = counts.grants;
  s.rejected_connections = impl_->rejected;
  return s;
}

}  // namespace kestrel::tracker
