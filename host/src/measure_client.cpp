// Measurement client: leases, module uploads, batches, redistribution after device loss.
#include "kestrel/host/measure_client.h"

#include <algorithm>
#include <deque>
#include <map>
#include <optional>
#include <set>

#include "kestrel/base/log.h"
#include "kestrel/rpc/device_session.h"

namespace kestrel::host {
namespace {
using namespace std::chrono_literals;
using rpc::awaitable;
using rpc::ErrorCode;
using rpc::RpcError;
constexpr std::string_view kLog = "measure";

awaitable<void> pause(std::chrono::milliseconds d) {
  asio::steady_timer timer(co_await asio::this_coro::executor, d);
  co_await timer.async_wait(rpc::use_nothrow);
}

std::string seconds_text(std::chrono::milliseconds d) { return std::to_string(d.count() / 1000) + " s"; }

}  // namespace

// What measure() sleeps on between events: a device granted, a batch over, a device
// lost, a stop. notify() before wait() is not lost.
struct MeasureClient::Waker {
  explicit Waker(asio::any_io_executor executor) : timer(std::move(executor)) {}
  void notify() {
    pending = true;
    timer.cancel();
  }
  // Returns at the next notify() or at `deadline`.
  awaitable<void> wait(std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max()) {
    if (!pending) {
      timer.expires_at(deadline);
      co_await timer.async_wait(rpc::use_nothrow);
    }
    pending = false;
  }
  asio::steady_timer timer;
  bool pending = false;
};

void MeasureClient::wake() {
  if (waker_) waker_->notify();
}

std::string device_fingerprint(const rpc::DeviceInfo& device) {
  return device.triple + "|" + device.cpu_model + "|" + std::to_string(device.cores);
}

struct MeasureClient::Device {
  Device(std::shared_ptr<rpc::TrackerClient> tracker, rpc::Lease granted, std::chrono::milliseconds reply_slack)
      : lease(granted), session(std::move(tracker), std::move(granted), reply_slack) {}
  rpc::Lease lease;
  rpc::DeviceSession session;
  std::set<std::string> modules;  // known to be on the device
  bool lost = false;
  bool busy = false;  // a batch in flight
};

MeasureClient::MeasureClient(std::shared_ptr<rpc::TrackerClient> tracker, MeasureClientOptions options)
    : tracker_(std::move(tracker)), options_(std::move(options)) {}

std::vector<rpc::Lease> MeasureClient::leases() const {
  std::vector<rpc::Lease> out;
  for (const auto& d : devices_) {
    if (!d->lost) out.push_back(d->lease);
  }
  return out;
}

awaitable<void> MeasureClient::open() {
  rpc::RequestOptions request{options_.priority, options_.request_timeout};
  rpc::Lease first = co_await tracker_->request(options_.key, request);
  devices_.push_back(std::make_shared<Device>(tracker_, first, options_.reply_slack));
  log::info(kLog, "leased device '", first.info.name, "' (", first.info.triple, ") for key '", options_.key, "'");
  co_await request_extra_devices();
}

awaitable<void> MeasureClient::request_extra_devices() {
  // Further devices (and replacements of lost ones) join whenever the tracker grants them.
  for (std::size_t i = leases().size() + pending_.size(); i < options_.devices; ++i) {
    RequestId id = tracker_->submit(options_.key, {options_.priority, 0ms});
    pending_.push_back(id);
    asio::co_spawn(co_await asio::this_coro::executor, collect_grant(id, alive_), asio::detached);
  }
}

awaitable<void> MeasureClient::reconnect_tracker() {
  auto deadline = std::chrono::steady_clock::now() + options_.reconnect_timeout;
  auto backoff = 200ms;
  std::string last;
  while (true) {
    if (aborted_) throw RpcError(ErrorCode::cancelled, "measurement stopped");
    try {
      tracker_ = co_await options_.reconnect();
      ++reconnects_;
      devices_.clear();  // leases do not survive the tracker
      pending_.clear();
      log::warn(kLog, "reconnected to the tracker; leasing devices of key '", options_.key, "' again");
      co_return;
    } catch (const RpcError& e) {
      if (rpc::is_permanent(e.code())) throw;
      last = e.what();
    }
    if (std::chrono::steady_clock::now() > deadline) {
      throw RpcError(ErrorCode::connection_lost,
                     str("tracker unreachable for ", options_.reconnect_timeout.count(), " ms: ", last));
    }
    co_await pause(backoff);  // (a backoff, not a poll)
    backoff = std::min<std::chrono::milliseconds>(backoff * 2, 5000ms);
  }
}

awaitable<void> MeasureClient::collect_grant(RequestId id, std::shared_ptr<bool> alive) {
  auto tracker = tracker_;
  try {
    rpc::Lease lease = co_await tracker->wait_grant(id);
    if (!*alive) {
      co_await tracker->release(lease.id);
      co_return;
    }
    std::erase(pending_, id);
    if (interrupted_) {
      co_await tracker->release(lease.id);
      co_return;
    }
    devices_.push_back(std::make_shared<Device>(tracker_, lease, options_.reply_slack));
    log::info(kLog, "leased device '", lease.info.name, "' for key '", options_.key, "'");
    wake();
  } catch (const RpcError& e) {
    // Cancelled by close() or interrupt(), or the tracker went away: nothing to collect.
    if (!*alive) co_return;
    std::erase(pending_, id);
    last_request_error_ = e.what();
    wake();
  }
}

awaitable<void> MeasureClient::give_up(Device& device, const RpcError& why) {
  device.lost = true;
  const bool ended_at_tracker = why.code() == ErrorCode::device_lost || why.code() == ErrorCode::connection_lost ||
                                why.code() == ErrorCode::no_such_lease || why.code() == ErrorCode::cancelled;
  if (ended_at_tracker || !tracker_->is_connected()) co_return;
  // The device may be alive and still running the batch: ending the lease tells it to
  // drop the batch and returns it to the pool, where this client may lease it again.
  try {
    co_await tracker_->release(device.lease.id);
    log::info(kLog, "released lease ", device.lease.id.value, " of device '", device.lease.info.name, "'");
  } catch (const RpcError& e) {
    log::warn(kLog, "could not release lease ", device.lease.id.value, " of device '", device.lease.info.name,
              "': ", e.what());
  }
}

awaitable<void> MeasureClient::ensure_modules(Device& device, const std::vector<const Module*>& modules) {
  std::vector<const Module*> unknown;
  for (const Module* m : modules) {
    if (!device.modules.contains(m->hash)) unknown.push_back(m);
  }
  if (unknown.empty()) co_return;
  std::vector<std::string> hashes;
  for (const Module* m : unknown) hashes.push_back(m->hash);
  std::vector<bool> present = co_await device.session.query_modules(hashes);
  std::vector<const Module*> missing;
  std::vector<rpc::ModuleImage> images;
  for (std::size_t i = 0; i < unknown.size(); ++i) {
    if (present[i]) {
      device.modules.insert(unknown[i]->hash);
    } else {
      missing.push_back(unknown[i]);
      images.push_back({unknown[i]->hash, *unknown[i]->image});
    }
  }
  if (missing.empty()) co_return;
  std::vector<std::string> refused = co_await device.session.upload(images);
  for (std::size_t i = 0; i < missing.size(); ++i) {
    if (refused[i].empty()) {
      device.modules.insert(missing[i]->hash);
    } else {
      // The device refused a module: candidates using it will report it missing.
      log::warn(kLog, "device '", device.lease.info.name, "' refused a module: ", refused[i]);
    }
  }
}

awaitable<void> MeasureClient::run_batch(Device& device, const Workload& workload, const std::vector<Candidate>& batch,
                                         const rpc::MeasureSettings& options, std::function<void(Measurement)> on_result) {
  std::vector<const Module*> modules;
  if (!workload.reference.hash.empty()) modules.push_back(&workload.reference);
  for (const auto& c : batch) {
    if (!c.module.hash.empty()) modules.push_back(&c.module);
  }
  co_await ensure_modules(device, modules);

  rpc::BatchRequest request;
  request.args = workload.args;
  request.reference_hash = workload.reference.hash;
  request.reference_entry = workload.reference_entry;
  request.tolerance = workload.tolerance;
  request.settings = options;
  for (const auto& c : batch) request.candidates.push_back({c.id, c.module.hash, c.entry});

  std::set<std::uint64_t> outstanding;
  for (const auto& c : batch) outstanding.insert(c.id);
  auto done = co_await device.session.measure(std::move(request), [&](rpc::CandidateResult r) {
    outstanding.erase(r.id);
    Measurement m;
    static_cast<rpc::CandidateResult&>(m) = std::move(r);
    m.device = device.lease.info.name;
    on_result(std::move(m));
  });
  // A batch refused as a whole (bad request, reference missing) fails its candidates as
  // a load error; one that stopped part-way, as a runtime error.
  for (std::uint64_t id : outstanding) {
    Measurement m;
    m.id = id;
    m.status = done.refused ? Status::device_load_error : Status::runtime_error;
    m.message = !done.message.empty() ? done.message : "device returned no result";
    m.device = device.lease.info.name;
    on_result(std::move(m));
  }
}

awaitable<std::vector<Measurement>> MeasureClient::measure(const Workload& workload,
                                                            const std::vector<Candidate>& candidates,
                                                            const rpc::MeasureSettings& options,
                                                            std::function<void(const Measurement&)> on_result) {
  if (aborted_) throw RpcError(ErrorCode::cancelled, "measurement stopped");
  if (interrupted_) throw RpcError(ErrorCode::cancelled, "measurement interrupted");
  std::vector<Measurement> results(candidates.size());
  std::vector<bool> done(candidates.size(), false);
  std::vector<unsigned> attempts(candidates.size(), 0);
  std::map<std::uint64_t, std::size_t> index_of;
  for (std::size_t i = 0; i < candidates.size(); ++i) index_of[candidates[i].id] = i;
  std::deque<std::size_t> queue;
  for (std::size_t i = 0; i < candidates.size(); ++i) queue.push_back(i);
  std::size_t finished = 0;
  std::string last_loss;
  // The first exception a worker ended with that is not the loss of its device: what
  // on_result threw (the records database cannot take the result) or a bug. It ends the
  // measurement; nothing is handed out after it.
  std::exception_ptr failure;

  auto record = [&](Measurement m) {
    if (failure || aborted_) return;
    auto it = index_of.find(m.id);
    if (it == index_of.end() || done[it->second]) return;
    m.attempts = attempts[it->second];
    done[it->second] = true;
    ++finished;
    results[it->second] = std::move(m);
    if (on_result) on_result(results[it->second]);
  };

  // One worker per leased device pulls chunks from the shared queue.
  auto worker = [&](std::shared_ptr<Device> device) -> awaitable<void> {
    while (!device->lost && !interrupted_) {
      if (queue.empty()) co_return;
      std::size_t live = std::max<std::size_t>(leases().size(), 1);
      std::size_t chunk = std::clamp<std::size_t>((queue.size() + live - 1) / live, 1, 16);
      std::vector<std::size_t> taken;
      std::vector<Candidate> batch;
      while (!queue.empty() && taken.size() < chunk) {
        taken.push_back(queue.front());
        batch.push_back(candidates[queue.front()]);
        ++attempts[queue.front()];
        queue.pop_front();
      }
      std::optional<RpcError> lost;
      device->busy = true;
      try {
        co_await run_batch(*device, workload, batch, options, record);
      } catch (const RpcError& e) {
        lost = e;
      }
      device->busy = false;
      if (!lost) continue;
      if (aborted_ || failure) co_return;  // the connection was closed on purpose, or the caller failed
      if (interrupted_) {
        device->lost = true;  // interrupt() released it; nothing is measured again
        co_return;
      }
      last_loss = str("device '", device->lease.info.name, "': ", lost->what());
      log::warn(kLog, "giving up on device '", device->lease.info.name, "' during a batch: ", lost->what());
      for (std::size_t i : taken) {
        if (done[i]) continue;
        if (attempts[i] > options_.retries) {
          Measurement m;
          m.id = candidates[i].id;
          m.status = Status::device_lost;
          m.message = lost->what();
          m.device = device->lease.info.name;
          record(std::move(m));
        } else {
          queue.push_front(i);  // measured again on another device
        }
      }
      wake();  // other devices take the requeued candidates now
      co_await give_up(*device, *lost);
      if (tracker_->is_connected() && !interrupted_ && !aborted_) co_await request_extra_devices();
    }
  };

  auto executor = co_await asio::this_coro::executor;
  Waker waker(executor);
  waker_ = &waker;
  struct Unset {
    Waker*& slot;
    ~Unset() { slot = nullptr; }
  } unset{waker_};
  std::set<Device*> working;
  std::size_t running = 0;
  std::optional<std::chrono::steady_clock::time_point> waiting_since;  // for a device, with none left
  while (finished < candidates.size() && !failure && !aborted_ && !interrupted_) {
    // Every live device not yet busy (including ones granted meanwhile) takes work.
    for (auto& d : devices_) {
      if (d->lost || working.contains(d.get()) || queue.empty()) continue;
      working.insert(d.get());
      ++running;
      asio::co_spawn(executor, worker(d), [&, raw = d.get()](std::exception_ptr e) {
        working.erase(raw);
        --running;
        if (e && !failure) {
          failure = e;
          queue.clear();  // the other workers take no further batch
        }
        wake();
      });
    }
    if (running > 0 || queue.empty() || !leases().empty()) {
      waiting_since.reset();
      co_await waker.wait();
      continue;
    }
    // Every leased device is gone: wait for a replacement, over a new tracker connection
    // if the old one died (the tracker restarted).
    if (!tracker_->is_connected()) {
      if (!options_.reconnect) {
        throw RpcError(ErrorCode::connection_lost,
                       "lost the tracker" + (last_loss.empty() ? std::string() : " (" + last_loss + ")"));
      }
      log::warn(kLog, "lost the tracker", last_loss.empty() ? std::string() : ": " + last_loss, "; reconnecting");
      co_await reconnect_tracker();
      waiting_since.reset();
    }
    const auto now = std::chrono::steady_clock::now();
    if (!waiting_since) {
      waiting_since = now;
      last_request_error_.clear();
      log::warn(kLog, "no device of key '", options_.key, "' left",
                last_loss.empty() ? std::string() : " (" + last_loss + ")", "; waiting ",
                options_.replacement_wait.count() > 0 ? "up to " + seconds_text(options_.replacement_wait)
                                                      : std::string("until interrupted"),
                " for one to come back");
    }
    if (pending_.empty() && last_request_error_.empty()) co_await request_extra_devices();
    const bool out_of_time = options_.replacement_wait.count() > 0 && now - *waiting_since >= options_.replacement_wait;
    if (out_of_time || (!last_request_error_.empty() && tracker_->is_connected())) {
      // Nothing can be measured now: the caller's failure, not a result of these
      // candidates (they stay unmeasured, and a rerun measures them).
      throw RpcError(ErrorCode::device_lost,
                     str("no device of key '", options_.key, "' to measure on",
                         last_loss.empty() ? std::string() : " after " + last_loss, ": ",
                         !last_request_error_.empty() ? last_request_error_
                                                      : "none came back within " + seconds_text(options_.replacement_wait)));
    }
    co_await waker.wait(options_.replacement_wait.count() > 0 ? *waiting_since + options_.replacement_wait
                                                               : std::chrono::steady_clock::time_point::max());
  }
  // The workers borrow this frame: wait for the batches in flight (each bounded by its
  // device's limits; at once after abort() or interrupt(), which end their waits).
  while (running > 0) co_await waker.wait();
  if (failure) std::rethrow_exception(failure);
  if (aborted_) throw RpcError(ErrorCode::cancelled, "measurement stopped");
  if (interrupted_) throw RpcError(ErrorCode::cancelled, "measurement interrupted");
  co_return results;
}

bool MeasureClient::report(const rpc::SessionReport& report) noexcept {
  if (aborted_ || !tracker_) return false;
  try {
    return tracker_->report(report);
  } catch (const std::exception& e) {
    // A dashboard's view is never worth a session: note it and go on.
    log::debug(kLog, "session report not sent: ", e.what());
    return false;
  }
}

void MeasureClient::interrupt() {
  if (interrupted_ || aborted_) return;
  interrupted_ = true;
  log::info(kLog, "interrupted: dropping the batches in flight and the requests for devices of key '", options_.key,
            "'");
  for (RequestId id : pending_) tracker_->cancel(id);
  pending_.clear();
  if (tracker_->is_connected()) {
    for (auto& d : devices_) {
      if (d->lost || !d->busy) continue;
      d->lost = true;
      // The release ends the batch's wait for its next message (the lease is gone).
      asio::co_spawn(
          tracker_->executor(),
          [tracker = tracker_, lease = d->lease.id]() -> awaitable<void> {
            try {
              co_await tracker->release(lease);
            } catch (const RpcError& e) {
              log::debug(kLog, "release of lease ", lease.value, ": ", e.what());
            }
          },
          asio::detached);
    }
  }
  wake();
}

void MeasureClient::abort() {
  if (aborted_) return;
  aborted_ = true;
  *alive_ = false;
  pending_.clear();
  wake();
  // The tracker ends the leases and drops the requests of a client whose connection
  // closes; every call waiting on this connection fails at once.
  log::info(kLog, "stopping: closing the tracker connection, which ends the leases of key '", options_.key, "'");
  tracker_->close();
}

awaitable<void> MeasureClient::close() {
  *alive_ = false;
  for (RequestId id : pending_) tracker_->cancel(id);
  pending_.clear();
  for (auto& d : devices_) {
    if (d->lost) continue;
    try {
      co_await tracker_->release(d->lease.id);
    } catch (const RpcError& e) {
      log::debug(kLog, "release of lease ", d->lease.id.value, ": ", e.what());
    }
  }
  devices_.clear();
}

}  // namespace kestrel::host
