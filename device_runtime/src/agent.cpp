// Device agent: connect, register, heartbeats, reconnect; session traffic goes to the
// SessionServer (session_server.cpp).
#include "kestrel/device_runtime/agent.h"

#include <kj/exception.h>

#include <random>

#include "kestrel/rpc/errors.h"
#include "kestrel/rpc/handshake.h"
#include "kestrel/base/log.h"
#include "kestrel/rpc/messages.h"
#include "kestrel/rpc/session.h"
#include "kestrel/device_runtime/session_server.h"

namespace kestrel::device {
namespace {
using Clock = std::chrono::steady_clock;
using rpc::awaitable;
using rpc::ErrorCode;
using rpc::RpcError;
using rpc::use_nothrow;
constexpr std::string_view kLog = "device";
}  // namespace

struct DeviceAgent::Impl {
  Impl(asio::any_io_executor ex, AgentOptions opts, rpc::DeviceInfo device_info, AgentStats& s)
      : executor(ex),
        options(std::move(opts)),
        info(std::move(device_info)),
        stats(s),
        backoff_timer(ex),
        watchdog_timer(ex) {}

  asio::any_io_executor executor;
  AgentOptions options;
  rpc::DeviceInfo info;
  AgentStats& stats;
  asio::steady_timer backoff_timer;
  asio::steady_timer watchdog_timer;
  std::shared_ptr<rpc::Connection> conn;
  std::shared_ptr<const rpc::TlsContext> tls;  // made on the first connect; null: plain
  bool stopping = false;
  // Whether the current connection is TLS with the tracker's certificate checked.
  bool channel_verified = false;
  std::uint64_t unauthenticated_rejections = 0;
  Clock::time_point last_seen;
  // Answers the session traffic of every lease; outlives connections (modules stay).
  SessionServer sessions{executor, info, [this](LeaseId lease, const rpc::Payload& payload) {
                           if (conn && conn->is_open()) conn->send(rpc::relay_frame(lease, payload));
                         }};
  std::minstd_rand jitter{std::random_device{}()};

  awaitable<void> run() {
    auto backoff = options.initial_backoff;
    while (!stopping) {
      std::string why;
      try {
        co_await connect_and_serve(backoff);
        why = "connection closed";
      } catch (const RpcError& e) {
        // A rejection for good (wrong token, other protocol version) ends the agent only
        // when it is authenticated: it came through TLS whose certificate --tls-ca
        // vouched for. Anything else may come from anyone on the path (a forged failure
        // frame, or the tracker's rejection of someone else relayed), so it is retried.
        if (rpc::is_permanent(e.code())) {
          if (channel_verified) {
            log::error(kLog, e.what());
            throw;
          }
          ++unauthenticated_rejections;
          log::error(kLog, e.what(), " [not authenticated: ",
                     options.tls.disabled ? "without TLS"
                                          : "the tracker's certificate was not checked (no --tls-ca)",
                     ", so anyone on the path could have sent it; retrying (rejection ",
                     unauthenticated_rejections, ")]");
        }
        why = e.what();
      } catch (const kj::Exception& e) {
        // Whatever the tracker sent, it never ends the agent: reconnect.
        why = str("malformed input from the tracker: ", e.getDescription().cStr());
      } catch (const std::exception& e) {
        why = str("connection failed: ", e.what());
      }
      if (conn) conn->close();
      stats.registered = false;
      sessions.end_all();  // leases do not survive a lost connection
      if (stopping) break;
      // Capped exponential backoff with +-20% jitter, so a restarted tracker is not
      // hit by every board at the same instant.
      std::uniform_real_distribution<double> spread(0.8, 1.2);
      auto wait = std::chrono::milliseconds(static_cast<std::int64_t>(static_cast<double>(backoff.count()) * spread(jitter)));
      log::warn(kLog, why, "; reconnecting to ", options.tracker.to_string(), " in ", wait.count(), " ms");
      backoff_timer.expires_after(wait);
      co_await backoff_timer.async_wait(use_nothrow);
      backoff = std::min(backoff * 2, options.max_backoff);
    }
  }

  awaitable<void> connect_and_serve(std::chrono::milliseconds& backoff) {
    if (!tls) tls = rpc::peer_tls_context(options.tls, options.token.has_value());
    rpc::tcp::socket socket =
        co_await rpc::connect_to(options.tracker.host, options.tracker.port, options.connect_timeout);
    if (stopping) co_return;
    channel_verified = false;
    conn = co_await rpc::connect_transport(std::move(socket), tls, options.connection, options.connect_timeout,
                                           options.tracker.to_string());
    // The TLS handshake checked the tracker's certificate against --tls-ca: what
    // arrives on this connection comes from the tracker.
    channel_verified = conn->uses_tls() && !options.tls.ca_file.empty();
    if (stopping) {
      conn->close();
      co_return;
    }
    rpc::PeerHandshakeOptions hs;
    hs.role = wire::Role::DEVICE;
    hs.name = str("kestrel-device ", software_version(), " ", info.name);
    hs.token = options.token ? &*options.token : nullptr;
    hs.timeout = options.connect_timeout;
    rpc::Welcomed welcomed = co_await rpc::perform_handshake(conn, hs);
    // With a token, the tracker proved it on this channel (TLS or frame MACs): from now
    // on its failures are its own.
    if (options.token) channel_verified = true;
    if (stopping) {
      conn->close();
      co_return;
    }

    capnp::MallocMessageBuilder builder;
    auto reg = builder.initRoot<wire::Frame>().initRegister();
    reg.setKey(options.key);
    rpc::to_wire(info, reg.initInfo());
    conn->send(builder);
    last_seen = Clock::now();
    auto watchdog_conn = conn;
    asio::co_spawn(executor, watchdog(watchdog_conn, welcomed), asio::detached);
    co_await serve(backoff);
  }

  // Closes the connection when the tracker has been silent too long (a half-open TCP
  // connection after a network cut never reports an error by itself).
  awaitable<void> watchdog(std::shared_ptr<rpc::Connection> watched, rpc::Welcomed welcomed) {
    const auto limit = welcomed.heartbeat_interval * (welcomed.heartbeat_misses + 1);
    while (watched->is_open() && !stopping) {
      watchdog_timer.expires_after(welcomed.heartbeat_interval);
      co_await watchdog_timer.async_wait(use_nothrow);
      if (stopping || !watched->is_open() || watched != conn) break;
      if (Clock::now() - last_seen > limit) {
        log::warn(kLog, "tracker silent for more than ", limit.count(), " ms");
        watched->close();
      }
    }
  }

  awaitable<void> serve(std::chrono::milliseconds& backoff) {
    while (true) {
      rpc::ReadResult r = co_await conn->read();
      if (r.error != rpc::FrameError::none) {
        conn->close();
        if (r.error == rpc::FrameError::closed) throw RpcError(ErrorCode::connection_lost, "tracker closed the connection");
        throw RpcError(ErrorCode::protocol_error, str("from tracker: ", to_string(r.error), ": ", r.detail));
      }
      last_seen = Clock::now();
      try {
        on_frame(*r.frame, backoff);
      } catch (const kj::Exception& e) {
        conn->close();
        throw RpcError(ErrorCode::protocol_error, str("malformed frame from tracker: ", e.getDescription().cStr()));
      }
    }
  }

  void on_frame(const rpc::InFrame& frame, std::chrono::milliseconds& backoff) {
    auto root = frame.root();
    switch (root.which()) {
      case wire::Frame::REGISTERED:
        stats.registered = true;
        unauthenticated_rejections = 0;
        stats.device_id = DeviceId(root.getRegistered().getDeviceId());
        ++stats.registrations;
        backoff = options.initial_backoff;
        log::info(kLog, "registered with ", options.tracker.to_string(), " as device ", stats.device_id.value,
                  " '", info.name, "' under key '", options.key, "'");
        break;
      case wire::Frame::HEARTBEAT:
        conn->send(rpc::heartbeat_frame(true, root.getHeartbeat().getSeq()));
        break;
      case wire::Frame::HEARTBEAT_ACK:
        break;
      case wire::Frame::LEASE_STARTED:
        ++stats.sessions;
        log::info(kLog, "lease ", root.getLeaseStarted().getLeaseId(), " started by ",
                  root.getLeaseStarted().getHolder().cStr());
        break;
      case wire::Frame::LEASE_ENDED: {
        auto ended = root.getLeaseEnded();
        sessions.end_lease(LeaseId(ended.getLeaseId()));
        log::info(kLog, "lease ", ended.getLeaseId(), " ended",
                  ended.getReleased() ? std::string(" (released)") : str(": ", ended.getFailure().getMessage().cStr()));
        break;
      }
      case wire::Frame::RELAY: {
        auto payload = root.getRelay().getPayload();
        LeaseId lease(root.getRelay().getLeaseId());
        // One lease's bad message is that lease's problem: it gets a SessionError and the
        // device stays connected and registered.
        try {
          sessions.handle(lease, {payload.begin(), payload.size()});
        } catch (const std::exception& e) {
          log::warn(kLog, "lease ", lease.value, ": session message failed: ", e.what());
          send_session_error(lease, str("session message failed: ", e.what()));
        }
        break;
      }
      case wire::Frame::FAILURE: {
        RpcError error = rpc::to_error(root.getFailure());
        conn->close();
        throw RpcError(error.code(), str("tracker: ", error.what()));
      }
      default:
        log::warn(kLog, "ignoring unexpected frame '", rpc::frame_kind(root), "' from tracker");
        break;
    }
  }

  void send_session_error(LeaseId lease, const std::string& message) {
    capnp::MallocMessageBuilder builder;
    builder.initRoot<wire::SessionMessage>().initError().setMessage(message);
    if (conn && conn->is_open()) conn->send(rpc::relay_frame(lease, rpc::encode_session(builder)));
  }

  void stop() {
    stopping = true;
    sessions.end_all();
    backoff_timer.cancel();
    watchdog_timer.cancel();
    if (conn) conn->close();
  }
};

DeviceAgent::DeviceAgent(asio::any_io_executor executor, AgentOptions options, rpc::DeviceInfo info)
    : impl_(std::make_unique<Impl>(executor, std::move(options), std::move(info), stats_)) {}

DeviceAgent::~DeviceAgent() = default;

awaitable<void> DeviceAgent::run() { co_await impl_->run(); }

void DeviceAgent::stop() { impl_->stop(); }

}  // namespace kestrel::device
