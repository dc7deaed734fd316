// Device agent: connect, register, serve, reconnect.
#include "kestrel/device_runtime/agent.h"

#include <kj/exception.h>

#include <deque>
#include <map>
#include <random>

#include "kestrel/device_runtime/measure.h"
#include "kestrel/device_runtime/module_store.h"
#include "kestrel/rpc/errors.h"
#include "kestrel/rpc/handshake.h"
#include "kestrel/base/log.h"
#include "kestrel/rpc/messages.h"
#include "kestrel/rpc/session.h"

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
  bool stopping = false;
  Clock::time_point last_seen;
  ModuleStore modules;
  // The batch running for each lease (one at a time; later ones wait in order).
  struct LeaseWork {
    std::shared_ptr<BatchRunner> running;
    std::deque<std::pair<std::uint64_t, BatchSpec>> waiting;
  };
  std::map<std::uint64_t, LeaseWork> work;
  std::minstd_rand jitter{std::random_device{}()};

  awaitable<void> run() {
    auto backoff = options.initial_backoff;
    while (!stopping) {
      std::string why;
      try {
        co_await connect_and_serve(backoff);
        why = "connection closed";
      } catch (const RpcError& e) {
        if (rpc::is_permanent(e.code())) {
          log::error(kLog, e.what());
          throw;
        }
        why = e.what();
      }
      stats.registered = false;
      end_all_work();  // leases do not survive a lost connection
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
    rpc::tcp::socket socket =
        co_await rpc::connect_to(options.tracker.host, options.tracker.port, options.connect_timeout);
    if (stopping) co_return;
    conn = rpc::Connection::create(std::move(socket), options.connection);
    rpc::PeerHandshakeOptions hs;
    hs.role = wire::Role::DEVICE;
    hs.name = str("kestrel-device ", software_version(), " ", info.name);
    hs.token = options.token ? &*options.token : nullptr;
    hs.timeout = options.connect_timeout;
    rpc::Welcomed welcomed = co_await rpc::perform_handshake(conn, hs);
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
        end_work(ended.getLeaseId());
        log::info(kLog, "lease ", ended.getLeaseId(), " ended",
                  ended.getReleased() ? std::string(" (released)") : str(": ", ended.getFailure().getMessage().cStr()));
        break;
      }
      case wire::Frame::RELAY:
        on_session(LeaseId(root.getRelay().getLeaseId()), root.getRelay().getPayload());
        break;
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

  void reply(LeaseId lease, capnp::MallocMessageBuilder& message) {
    conn->send(rpc::relay_frame(lease, rpc::encode_session(message)));
  }

  void on_session(LeaseId lease, capnp::Data::Reader data) {
    std::string error;
    auto payload = rpc::SessionPayload::decode({data.begin(), data.size()}, error);
    capnp::MallocMessageBuilder builder;
    auto out = builder.initRoot<wire::SessionMessage>();
    if (!payload) {
      log::warn(kLog, "lease ", lease.value, ": bad session message: ", error);
      out.initError().setMessage(str("bad session message: ", error));
      reply(lease, builder);
      return;
    }
    auto message = payload->root();
    switch (message.which()) {
      case wire::SessionMessage::PING:
        out.initPong().setSeq(message.getPing().getSeq());
        break;
      case wire::SessionMessage::INFO_REQUEST: {
        auto answer = out.initInfo();
        answer.setSeq(message.getInfoRequest().getSeq());
        rpc::to_wire(info, answer.initInfo());
        break;
      }
      case wire::SessionMessage::QUERY_MODULES: {
        auto query = message.getQueryModules();
        auto answer = out.initModulesPresent();
        answer.setSeq(query.getSeq());
        auto present = answer.initPresent(query.getHashes().size());
        for (unsigned i = 0; i < query.getHashes().size(); ++i) present.set(i, modules.contains(query.getHashes()[i]));
        break;
      }
      case wire::SessionMessage::UPLOAD_MODULE: {
        auto upload = message.getUploadModule();
        auto image = upload.getImage();
        std::string store_error = modules.put(upload.getHash(), {image.begin(), image.size()});
        if (store_error.empty()) {
          auto stored = out.initModuleStored();
          stored.setSeq(upload.getSeq());
          stored.setHash(upload.getHash());
        } else {
          auto err = out.initError();
          err.setSeq(upload.getSeq());
          err.setMessage(store_error);
        }
        break;
      }
      case wire::SessionMessage::MEASURE_BATCH: {
        auto batch = message.getMeasureBatch();
        std::string spec_error;
        BatchSpec spec = to_spec(batch, spec_error);
        if (!spec_error.empty()) {
          auto err = out.initError();
          err.setSeq(batch.getSeq());
          err.setMessage(spec_error);
          break;
        }
        auto& lease_work = work[lease.value];
        lease_work.waiting.emplace_back(batch.getSeq(), std::move(spec));
        if (!lease_work.running) start_next(lease);
        return;  // results are streamed back as each candidate finishes
      }
      default: {
        auto err = out.initError();
        err.setMessage(str("session message kind ", static_cast<unsigned>(message.which()),
                           " is not supported by this runtime (", software_version(), ")"));
        break;
      }
    }
    reply(lease, builder);
  }

  BatchSpec to_spec(wire::MeasureBatch::Reader batch, std::string& error) {
    BatchSpec spec;
    for (auto arg : batch.getArgs()) {
      if (arg.getElements() <= 0 || arg.getElements() > (std::int64_t(1) << 34)) {
        error = str("argument of ", arg.getElements(), " elements is out of range");
        return spec;
      }
      spec.args.push_back({arg.getElements(), arg.getIsOutput()});
    }
    if (batch.getArgs().size() > 64) error = "more than 64 kernel arguments";
    std::string reference = batch.getReferenceHash();
    if (!reference.empty()) {
      spec.reference_hash = reference;
      spec.reference_fd = modules.fd(reference);
      if (spec.reference_fd < 0) error = str("reference module ", reference.substr(0, 12), " is not on this device");
    }
    spec.tolerance = batch.getTolerance();
    auto s = batch.getSettings();
    spec.settings.number = s.getNumber();
    spec.settings.repeat = std::clamp<std::uint32_t>(s.getRepeat(), 1, 10'000);
    spec.settings.min_repeat_ms = s.getMinRepeatMs();
    spec.settings.cooldown_ms = s.getCooldownMs();
    spec.settings.flush_cache = s.getFlushCache();
    spec.settings.timeout_ms = s.getTimeoutMs() ? s.getTimeoutMs() : 10'000;
    spec.settings.threads = s.getThreads();
    spec.settings.seed = s.getSeed();
    for (auto c : batch.getCandidates()) {
      std::string hash = c.getModuleHash();
      spec.candidates.push_back({c.getId(), hash, modules.fd(hash)});
    }
    return spec;
  }

  void start_next(LeaseId lease) {
    auto it = work.find(lease.value);
    if (it == work.end() || it->second.waiting.empty()) return;
    auto [seq, spec] = std::move(it->second.waiting.front());
    it->second.waiting.pop_front();
    log::info(kLog, "lease ", lease.value, ": measuring ", spec.candidates.size(), " candidate(s)");
    auto target = conn;
    it->second.running = BatchRunner::start(
        executor, std::move(spec),
        [this, lease, seq = seq, target](const Result& r) {
          if (target != conn || !target->is_open()) return;
          capnp::MallocMessageBuilder builder;
          auto out = builder.initRoot<wire::SessionMessage>().initMeasureResult();
          out.setSeq(seq);
          out.setCandidateId(r.id);
          out.setStatus(static_cast<wire::MeasureStatus>(r.status));
          out.setMessage(r.message);
          out.setNumber(r.number);
          auto rounds = out.initRoundSeconds(static_cast<unsigned>(r.round_seconds.size()));
          for (unsigned i = 0; i < r.round_seconds.size(); ++i) rounds.set(i, r.round_seconds[i]);
          out.setMaxError(r.max_error);
          out.setLoadMs(r.load_ms);
          reply(lease, builder);
        },
        [this, lease, seq = seq, target](const std::string& message) {
          if (target == conn && target->is_open()) {
            capnp::MallocMessageBuilder builder;
            auto done = builder.initRoot<wire::SessionMessage>().initBatchDone();
            done.setSeq(seq);
            done.setMessage(message);
            reply(lease, builder);
          }
          auto w = work.find(lease.value);
          if (w == work.end()) return;
          w->second.running.reset();
          if (w->second.waiting.empty()) {
            work.erase(w);
          } else {
            start_next(lease);
          }
        });
  }

  void end_work(std::uint64_t lease) {
    auto it = work.find(lease);
    if (it == work.end()) return;
    if (it->second.running) it->second.running->cancel();
    work.erase(it);
  }

  void end_all_work() {
    for (auto& [lease, w] : work) {
      if (w.running) w.running->cancel();
    }
    work.clear();
  }

  void stop() {
    stopping = true;
    end_all_work();
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
