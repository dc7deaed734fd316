// Tracker client: requests, leases, session traffic and summaries over one connection.
#include "kestrel/rpc/tracker_client.h"

#include <kj/exception.h>

#include "kestrel/rpc/handshake.h"
#include "kestrel/base/log.h"
#include "kestrel/rpc/messages.h"

namespace kestrel::rpc {
namespace {
using Clock = std::chrono::steady_clock;
constexpr std::string_view kLog = "client";

Clock::time_point deadline_after(std::chrono::milliseconds timeout) {
  // 0 means "no limit"; a year keeps the arithmetic on deadlines from overflowing.
  return Clock::now() + (timeout.count() > 0 ? timeout : std::chrono::milliseconds(std::chrono::hours(24 * 365)));
}
}  // namespace

awaitable<std::shared_ptr<TrackerClient>> TrackerClient::connect(Endpoint tracker, ClientOptions options) {
  auto tls = peer_tls_context(options.tls, options.token.has_value());
  PeerHandshakeOptions hs;
  hs.role = wire::Role::CLIENT;
  hs.name = options.name;
  hs.token = options.token ? &*options.token : nullptr;
  hs.timeout = options.connect_timeout;
  // A tracker that accepted the TCP connection but ended it before welcome is busy (at a
  // cap, or shedding a flood of stalled handshakes): try again, with a short growing
  // pause, until connect_timeout. A tracker that cannot be reached, or that refuses the
  // token or the version, fails at once.
  const auto give_up = Clock::now() + options.connect_timeout;
  std::chrono::milliseconds pause(10);
  std::shared_ptr<Connection> conn;
  Welcomed welcomed;
  while (true) {
    tcp::socket socket = co_await connect_to(tracker.host, tracker.port, options.connect_timeout);
    try {
      conn = co_await connect_transport(std::move(socket), tls, options.connection, options.connect_timeout,
                                        tracker.to_string());
      welcomed = co_await perform_handshake(conn, hs);
      break;
    } catch (const RpcError& e) {
      if (is_permanent(e.code()) || e.code() == ErrorCode::timeout || Clock::now() + pause >= give_up) throw;
      log::debug(kLog, "tracker ", tracker.to_string(), " ended the handshake (", e.what(), "); trying again in ",
                 pause.count(), " ms");
    }
    asio::steady_timer timer(co_await asio::this_coro::executor, pause);
    co_await timer.async_wait(use_nothrow);
    pause = std::min(pause * 2, std::chrono::milliseconds(200));
  }
  std::shared_ptr<TrackerClient> client(
      new TrackerClient(conn, welcomed.connection_id, welcomed.heartbeat_interval, welcomed.heartbeat_misses));
  auto executor = conn->get_executor();
  client->accepts_reports_ = welcomed.accepts_reports;
  asio::co_spawn(executor, [client]() { return client->read_loop(); }, asio::detached);
  asio::co_spawn(executor, [client]() { return client->watchdog(); }, asio::detached);
  co_return client;
}

TrackerClient::TrackerClient(std::shared_ptr<Connection> conn, ConnectionId id,
                             std::chrono::milliseconds heartbeat_interval, std::uint32_t heartbeat_misses)
    : conn_(std::move(conn)),
      watchdog_timer_(conn_->get_executor()),
      connection_id_(id),
      heartbeat_interval_(heartbeat_interval),
      heartbeat_misses_(heartbeat_misses),
      last_seen_(Clock::now()) {}

void TrackerClient::close() {
  if (!error_) fail_all(RpcError(ErrorCode::connection_lost, "client closed"));
  conn_->close_after_flush(std::chrono::milliseconds(500));
}

void TrackerClient::fail_all(const RpcError& error) {
  if (error_) return;
  error_ = error;
  watchdog_timer_.cancel();
  for (auto& [id, request] : requests_) {
    if (!request->lease && !request->error) request->error = error;
    request->wake.cancel();
  }
  for (auto& [id, lease] : leases_) {
    if (!lease->ended) lease->ended = error;
    lease->wake.cancel();
  }
  for (auto& [id, summary] : summaries_) summary->wake.cancel();
}

template <typename Ready>
awaitable<bool> TrackerClient::wait_until(Waitable& w, Clock::time_point deadline, Ready ready) {
  while (!ready()) {
    if (Clock::now() >= deadline) co_return false;
    w.wake.expires_at(deadline);
    co_await w.wake.async_wait(use_nothrow);
  }
  co_return true;
}

awaitable<void> TrackerClient::read_loop() {
  auto self = shared_from_this();
  while (true) {
    ReadResult r = co_await conn_->read();
    if (r.error != FrameError::none) {
      std::string why = r.error == FrameError::closed ? std::string("the tracker closed the connection")
                                                       : str(to_string(r.error), ": ", r.detail);
      fail_all(RpcError(ErrorCode::connection_lost, str("connection to tracker ", conn_->peer(), " lost: ", why)));
      conn_->close();
      break;
    }
    last_seen_ = Clock::now();
    try {
      on_frame(*r.frame);
    } catch (const kj::Exception& e) {
      fail_all(RpcError(ErrorCode::protocol_error, str("malformed frame from tracker: ", e.getDescription().cStr())));
      conn_->close();
      break;
    }
    if (error_) {
      conn_->close();
      break;
    }
  }
}

awaitable<void> TrackerClient::watchdog() {
  auto self = shared_from_this();
  const auto limit = heartbeat_interval_ * (heartbeat_misses_ + 1);
  while (conn_->is_open() && !error_) {
    watchdog_timer_.expires_after(heartbeat_interval_);
    co_await watchdog_timer_.async_wait(use_nothrow);
    if (error_ || !conn_->is_open()) break;
    if (Clock::now() - last_seen_ > limit) {
      fail_all(RpcError(ErrorCode::connection_lost,
                        str("tracker ", conn_->peer(), " silent for more than ", limit.count(), " ms")));
      conn_->close();
    }
  }
}

void TrackerClient::on_frame(const InFrame& frame) {
  auto root = frame.root();
  switch (root.which()) {
    case wire::Frame::HEARTBEAT:
      conn_->send(heartbeat_frame(true, root.getHeartbeat().getSeq()));
      break;
    case wire::Frame::HEARTBEAT_ACK:
      break;
    case wire::Frame::GRANT: {
      auto grant = root.getGrant();
      auto it = requests_.find(grant.getRequestId());
      if (it == requests_.end()) {
        // Cancelled while the grant was in flight: give the device straight back.
        cancelled_.erase(grant.getRequestId());
        capnp::MallocMessageBuilder builder;
        builder.initRoot<wire::Frame>().initRelease().setLeaseId(grant.getLeaseId());
        conn_->send(builder);
        break;
      }
      Lease lease{LeaseId(grant.getLeaseId()), DeviceId(grant.getDeviceId()), from_wire(grant.getInfo())};
      leases_.emplace(lease.id.value, std::make_shared<LeaseState>(conn_->get_executor()));
      it->second->lease = std::move(lease);
      it->second->wake.cancel();
      break;
    }
    case wire::Frame::REQUEST_FAILED: {
      auto failed = root.getRequestFailed();
      cancelled_.erase(failed.getRequestId());
      auto it = requests_.find(failed.getRequestId());
      if (it != requests_.end()) {
        it->second->error = to_error(failed.getFailure());
        it->second->wake.cancel();
      }
      break;
    }
    case wire::Frame::LEASE_ENDED: {
      auto ended = root.getLeaseEnded();
      auto it = leases_.find(ended.getLeaseId());
      if (it == leases_.end()) break;
      if (ended.getReleased()) {
        it->second->released = true;
      } else {
        it->second->ended = to_error(ended.getFailure());
        log::debug(kLog, "lease ", ended.getLeaseId(), " ended: ", ended.getFailure().getMessage().cStr());
      }
      it->second->wake.cancel();
      break;
    }
    case wire::Frame::RELAY: {
      auto relay = root.getRelay();
      auto it = leases_.find(relay.getLeaseId());
      if (it == leases_.end()) break;
      auto data = relay.getPayload();
      it->second->inbox.emplace_back(data.begin(), data.end());
      it->second->wake.cancel();
      break;
    }
    case wire::Frame::SUMMARY: {
      auto summary = root.getSummary();
      auto it = summaries_.find(summary.getRequestId());
      if (it != summaries_.end()) {
        it->second->summary = from_wire(summary);
        it->second->wake.cancel();
      }
      break;
    }
    case wire::Frame::FAILURE:
      fail_all(to_error(root.getFailure()));
      break;
    default:
      fail_all(RpcError(ErrorCode::protocol_error, str("unexpected frame '", frame_kind(root), "' from tracker")));
      break;
  }
}

RequestId TrackerClient::submit(const std::string& key, RequestOptions options) {
  RequestId id(next_request_++);
  auto pending = std::make_shared<PendingRequest>(conn_->get_executor());
  if (error_) pending->error = *error_;
  requests_.emplace(id.value, pending);
  capnp::MallocMessageBuilder builder;
  auto request = builder.initRoot<wire::Frame>().initRequestDevice();
  request.setRequestId(id.value);
  request.setKey(key);
  request.setPriority(options.priority);
  request.setTimeoutMs(static_cast<std::uint32_t>(std::max<std::int64_t>(options.timeout.count(), 0)));
  conn_->send(builder);
  return id;
}

awaitable<Lease> TrackerClient::wait_grant(RequestId id) {
  auto self = shared_from_this();
  auto it = requests_.find(id.value);
  if (it == requests_.end()) throw RpcError(ErrorCode::bad_request, str("unknown request ", id.value));
  auto pending = it->second;
  co_await wait_until(*pending, Clock::time_point::max(), [&] { return pending->lease || pending->error; });
  requests_.erase(id.value);
  if (pending->error) throw *pending->error;
  co_return std::move(*pending->lease);
}

awaitable<Lease> TrackerClient::request(const std::string& key, RequestOptions options) {
  RequestId id = submit(key, options);
  co_return co_await wait_grant(id);
}

void TrackerClient::cancel(RequestId id) {
  auto it = requests_.find(id.value);
  if (it == requests_.end() || it->second->lease || it->second->error) return;
  cancelled_.insert(id.value);
  it->second->error = RpcError(ErrorCode::cancelled, "request cancelled");
  it->second->wake.cancel();
  capnp::MallocMessageBuilder builder;
  builder.initRoot<wire::Frame>().initCancelRequest().setRequestId(id.value);
  conn_->send(builder);
}

std::shared_ptr<TrackerClient::LeaseState> TrackerClient::lease_state(LeaseId lease) {
  auto it = leases_.find(lease.value);
  if (it == leases_.end()) {
    throw RpcError(ErrorCode::no_such_lease, str("lease ", lease.value, " is not held by this client"));
  }
  return it->second;
}

awaitable<void> TrackerClient::release(LeaseId lease, std::chrono::milliseconds timeout) {
  auto self = shared_from_this();
  auto state = lease_state(lease);
  if (!state->ended && !error_) {
    capnp::MallocMessageBuilder builder;
    builder.initRoot<wire::Frame>().initRelease().setLeaseId(lease.value);
    conn_->send(builder);
    bool done = co_await wait_until(*state, deadline_after(timeout), [&] { return state->released || state->ended; });
    if (!done) {
      leases_.erase(lease.value);
      throw RpcError(ErrorCode::timeout, str("tracker did not confirm the release of lease ", lease.value));
    }
  }
  leases_.erase(lease.value);
}

awaitable<TrackerSummary> TrackerClient::summary(std::chrono::milliseconds timeout) {
  auto self = shared_from_this();
  if (error_) throw *error_;
  std::uint64_t id = next_request_++;
  auto pending = std::make_shared<PendingSummary>(conn_->get_executor());
  summaries_.emplace(id, pending);
  capnp::MallocMessageBuilder builder;
  builder.initRoot<wire::Frame>().initSummaryRequest().setRequestId(id);
  conn_->send(builder);
  bool done = co_await wait_until(*pending, deadline_after(timeout), [&] { return pending->summary || error_; });
  summaries_.erase(id);
  if (pending->summary) co_return std::move(*pending->summary);
  if (error_) throw *error_;
  (void)done;
  throw RpcError(ErrorCode::timeout, str("tracker did not answer a summary request within ", timeout.count(), " ms"));
}

bool TrackerClient::report(const SessionReport& report) {
  if (!accepts_reports_ || error_ || !conn_->is_open()) return false;
  capnp::MallocMessageBuilder builder;
  to_wire(report, builder.initRoot<wire::Frame>().initSessionReport());
  conn_->send(builder);
  return true;
}

void TrackerClient::send(LeaseId lease, std::span<const std::uint8_t> payload) {
  auto state = lease_state(lease);
  if (state->ended) throw *state->ended;
  if (error_) throw *error_;
  conn_->send(relay_frame(lease, payload));
}

awaitable<Payload> TrackerClient::receive(LeaseId lease, std::chrono::milliseconds timeout) {
  auto self = shared_from_this();
  auto state = lease_state(lease);
  bool ready = co_await wait_until(*state, deadline_after(timeout),
                                   [&] { return !state->inbox.empty() || state->ended || state->released; });
  if (!state->inbox.empty()) {
    Payload payload = std::move(state->inbox.front());
    state->inbox.pop_front();
    co_return payload;
  }
  if (state->ended) throw *state->ended;
  if (state->released) throw RpcError(ErrorCode::no_such_lease, str("lease ", lease.value, " was released"));
  (void)ready;
  throw RpcError(ErrorCode::timeout, str("no answer from the device of lease ", lease.value, " within ",
                                         timeout.count(), " ms"));
}

awaitable<std::unique_ptr<SessionPayload>> TrackerClient::await_reply(
    LeaseId lease, std::chrono::steady_clock::time_point deadline,
    const std::function<bool(wire::SessionMessage::Reader)>& matches) {
  while (true) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    Payload payload = co_await receive(lease, std::max(left, std::chrono::milliseconds(1)));
    std::string error;
    auto message = SessionPayload::decode(payload, error);
    if (!message) throw RpcError(ErrorCode::protocol_error, str("device sent ", error));
    auto root = message->root();
    if (matches(root)) co_return message;
    if (root.isError()) throw RpcError(ErrorCode::bad_request, str("device: ", root.getError().getMessage().cStr()));
    // Anything else is a stale answer to an earlier request: skip it.
  }
}

awaitable<std::chrono::nanoseconds> TrackerClient::ping(LeaseId lease, std::chrono::milliseconds timeout) {
  std::uint64_t seq = next_seq_++;
  capnp::MallocMessageBuilder builder;
  builder.initRoot<wire::SessionMessage>().initPing().setSeq(seq);
  auto start = Clock::now();
  send(lease, encode_session(builder));
  co_await await_reply(lease, deadline_after(timeout),
                       [seq](wire::SessionMessage::Reader m) { return m.isPong() && m.getPong().getSeq() == seq; });
  co_return Clock::now() - start;
}

awaitable<DeviceInfo> TrackerClient::device_info(LeaseId lease, std::chrono::milliseconds timeout) {
  std::uint64_t seq = next_seq_++;
  capnp::MallocMessageBuilder builder;
  builder.initRoot<wire::SessionMessage>().initInfoRequest().setSeq(seq);
  send(lease, encode_session(builder));
  auto reply = co_await await_reply(
      lease, deadline_after(timeout),
      [seq](wire::SessionMessage::Reader m) { return m.isInfo() && m.getInfo().getSeq() == seq; });
  co_return from_wire(reply->root().getInfo().getInfo());
}

}  // namespace kestrel::rpc
