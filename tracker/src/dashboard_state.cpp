// The dashboard's state (events, sessions, histogram, counters) and the snapshot built
// from it and the pool: the JSON documents and the Prometheus text.
#include "kestrel/tracker/dashboard_state.h"

#include <algorithm>
#include <cmath>
#include <string_view>

#include "json_text.h"
#include "kestrel/base/stats.h"
#include "kestrel/base/str.h"

namespace kestrel::tracker {
namespace {

using text::append_int;
using text::append_label;
using text::append_number;
using text::append_string;
using text::append_uint;
using text::quoted;

std::uint64_t ms_between(TimePoint from, TimePoint to) {
  if (to <= from) return 0;
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(to - from).count());
}

double finite_or_zero(double v) { return std::isfinite(v) ? v : 0; }

// A finished job's outcome as reported: one of the three known, or "done" (older
// clients send none; an unknown word must not become a metrics label).
std::string known_outcome(const std::string& outcome) {
  if (outcome == "interrupted" || outcome == "failed") return outcome;
  return "done";
}

constexpr const char* kOutcomes[] = {"done", "interrupted", "failed", "gone"};

const char* reason_label(RequestFailed::Reason reason) {
  switch (reason) {
    case RequestFailed::Reason::bad_request: return "bad_request";
    case RequestFailed::Reason::cancelled: return "cancelled";
    case RequestFailed::Reason::timeout: return "timeout";
    case RequestFailed::Reason::overloaded: return "overloaded";
    case RequestFailed::Reason::client_gone: return nullptr;  // not a failure anyone waits on
  }
  return nullptr;
}

// CPU features worth showing, in the order shown (at most 12 per device).
constexpr std::string_view kNotableFeatures[] = {
    "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512vnni", "avx512_bf16", "avx512_fp16", "amx_tile",
    "amx_bf16", "amx_int8", "avx2", "fma", "avx", "f16c", "sse4_2", "sme", "sve2", "sve", "asimd", "neon",
    "asimddp", "i8mm", "bf16", "asimdhp", "fphp", "vfpv4"};
constexpr std::size_t kMaxFeaturesShown = 12;

std::vector<std::string_view> notable_features(const std::vector<std::string>& features) {
  std::vector<std::string_view> shown;
  for (std::string_view notable : kNotableFeatures) {
    if (shown.size() == kMaxFeaturesShown) break;
    if (std::find(features.begin(), features.end(), notable) != features.end()) shown.push_back(notable);
  }
  if (shown.empty()) {  // an architecture without a list here (RISC-V's ISA string): its own first ones
    for (const auto& feature : features) {
      if (shown.size() == kMaxFeaturesShown) break;
      shown.push_back(feature);
    }
  }
  return shown;
}

// The static part of a device's document, turned into JSON once when it joins.
std::string device_head(const PoolDevice& device) {
  std::string out = "{\"id\":";
  append_uint(out, device.id.value);
  out += ",\"key\":";
  append_string(out, device.key);
  out += ",\"name\":";
  append_string(out, device.name);
  out += ",\"address\":";
  append_string(out, device.address);
  out += ',';
  return out;
}

std::string device_caps(const rpc::DeviceInfo& info) {
  std::string out = "\"caps\":{\"triple\":";
  append_string(out, info.triple);
  out += ",\"arch\":";
  append_string(out, info.arch);
  out += ",\"cpu\":";
  append_string(out, info.cpu_model);
  out += ",\"cores\":";
  append_uint(out, info.cores);
  out += ",\"memory_bytes\":";
  append_uint(out, info.memory_bytes);
  out += ",\"features\":[";
  bool first = true;
  for (std::string_view feature : notable_features(info.cpu_features)) {
    if (!first) out += ',';
    first = false;
    append_string(out, feature);
  }
  out += "],\"gpus\":[";
  first = true;
  for (const auto& gpu : info.gpus) {
    if (!first) out += ',';
    first = false;
    out += "{\"backend\":";
    append_string(out, gpu.backend);
    out += ",\"name\":";
    append_string(out, gpu.name);
    out += ",\"version\":";
    append_string(out, gpu.version);
    out += '}';
  }
  out += "]}}";
  return out;
}

// Sessions show as "<client connection id>/<session id>".
std::string session_label(ConnectionId client, const std::string& session_id) {
  return str(client.value, "/", session_id);
}

void family(std::string& out, std::string_view name, std::string_view type, std::string_view help) {
  out += "# HELP ";
  out += name;
  out += ' ';
  out += help;
  out += "\n# TYPE ";
  out += name;
  out += ' ';
  out += type;
  out += '\n';
}

void sample(std::string& out, std::string_view name, double value) {
  out += name;
  out += ' ';
  append_number(out, value);
  out += '\n';
}

void sample(std::string& out, std::string_view name, std::string_view label, std::string_view label_value,
            double value) {
  out += name;
  out += '{';
  out += label;
  out += "=\"";
  append_label(out, label_value);
  out += "\"} ";
  append_number(out, value);
  out += '\n';
}

}  // namespace

const char* to_string(DashboardEvent::Kind kind) {
  switch (kind) {
    case DashboardEvent::Kind::join: return "join";
    case DashboardEvent::Kind::loss: return "loss";
    case DashboardEvent::Kind::requeue: return "requeue";
    case DashboardEvent::Kind::grant_timeout: return "grant_timeout";
    case DashboardEvent::Kind::session_start: return "session_start";
    case DashboardEvent::Kind::session_end: return "session_end";
    case DashboardEvent::Kind::client: return "client";
  }
  return "?";
}

void LeaseWaitHistogram::observe(double seconds) {
  seconds = std::max(finite_or_zero(seconds), 0.0);
  std::size_t bucket = 0;
  while (bucket < kLeaseWaitBuckets.size() && seconds > kLeaseWaitBuckets[bucket]) ++bucket;
  ++counts[bucket];
  sum_seconds += seconds;
  ++count;
}

// ---- what happened ----------------------------------------------------------------

void DashboardState::record(DashboardEvent::Kind kind, std::string text, TimePoint now) {
  std::string tail = ",\"kind\":\"";
  tail += to_string(kind);
  tail += "\",\"text\":";
  append_string(tail, text);
  tail += '}';
  events_.push_back(DashboardEvent{now, kind, std::move(text)});
  event_tails_.push_back(std::move(tail));
  while (events_.size() > kEventRing) {
    events_.pop_front();
    event_tails_.pop_front();
  }
}

void DashboardState::device_joined(const PoolDevice& device, const rpc::DeviceInfo& info, TimePoint now) {
  devices_[device.id] = DeviceCache{device_head(device), device_caps(info)};
  device_order_.clear();  // sorted again at the next snapshot
  record(DashboardEvent::Kind::join, str("device ", device.name, " joined key ", device.key, " from ", device.address),
         now);
}

void DashboardState::device_lost(const PoolDevice& device, const std::string& reason, TimePoint now) {
  devices_.erase(device.id);
  device_order_.clear();
  ++device_losses_;
  std::string text = str("device ", device.name, " (key ", device.key, ") lost: ", reason);
  if (device.lease) {
    if (auto held = leases_.find(device.lease); held != leases_.end()) {
      auto client = clients_.find(held->second.client);
      text += str("; its lease ", device.lease.value, " of client ",
                  client != clients_.end() ? client->second.label : str("connection ", held->second.client.value),
                  " ends");
    }
  }
  record(DashboardEvent::Kind::loss, std::move(text), now);
}

void DashboardState::client_connected(ConnectionId client, const std::string& name, const std::string& address,
                                      TimePoint now) {
  Client entry;
  entry.label = str(name.empty() ? std::string("?") : name, " (", address, ")");
  entry.label_json = quoted(entry.label);
  entry.holder_json = quoted("client " + entry.label);
  record(DashboardEvent::Kind::client, str("client ", entry.label, " connected"), now);
  clients_[client] = std::move(entry);
}

void DashboardState::client_left(ConnectionId client, const std::string& reason, TimePoint now) {
  for (auto it = sessions_.lower_bound({client, std::string()}); it != sessions_.end() && it->first.first == client;
       ++it) {
    if (it->second.state == SessionState::running) end_session(it->second, SessionState::gone, now);
  }
  auto entry = clients_.find(client);
  if (entry != clients_.end()) {
    record(DashboardEvent::Kind::client, str("client ", entry->second.label, " left: ", reason), now);
    clients_.erase(entry);
  }
  losses_.erase(client);
  prune_ended();
}

void DashboardState::request_submitted(ConnectionId client, const std::string& key, TimePoint now) {
  auto lost = losses_.find(client);
  if (lost == losses_.end()) return;
  auto& losses = lost->second;
  std::erase_if(losses, [&](const Loss& loss) { return now - loss.at > kRequeueWindow; });
  auto same = std::find_if(losses.begin(), losses.end(), [&](const Loss& loss) { return loss.key == key; });
  if (same != losses.end()) {
    auto entry = clients_.find(client);
    double after = std::chrono::duration<double>(now - same->at).count();
    record(DashboardEvent::Kind::requeue,
           str("client ", entry != clients_.end() ? entry->second.label : str("connection ", client.value),
               " requested key ", key, " again ", static_cast<double>(std::lround(after * 10)) / 10,
               " s after losing device ", same->device),
           now);
    losses.erase(same);
  }
  if (losses.empty()) losses_.erase(lost);
}

void DashboardState::observe(const Events& events, const Pool& pool, TimePoint now) {
  for (const Event& event : events) {
    if (const auto* granted = std::get_if<Granted>(&event)) {
      const PoolDevice* device = pool.device(granted->device);
      std::string key = device ? device->key : std::string("?");
      lease_waits_[key].observe(std::chrono::duration<double>(now - granted->requested_at).count());
      leases_[granted->lease] = HeldLease{granted->client, std::move(key), device ? device->name : std::string("?")};
    } else if (const auto* failed = std::get_if<RequestFailed>(&event)) {
      const char* reason = reason_label(failed->reason);
      if (!reason) continue;
      ++requests_failed_[reason];
      if (failed->reason == RequestFailed::Reason::timeout) {
        auto client = clients_.find(failed->client);
        record(DashboardEvent::Kind::grant_timeout,
               str("request ", failed->request_id, " of client ",
                   client != clients_.end() ? client->second.label : str("connection ", failed->client.value),
                   " for key ", failed->key, " timed out: ", failed->message),
               now);
      }
    } else if (const auto* ended = std::get_if<LeaseEnded>(&event)) {
      if (ended->reason == LeaseEnded::Reason::not_held) continue;
      auto held = leases_.find(ended->lease);
      if (held == leases_.end()) continue;
      if (ended->reason == LeaseEnded::Reason::device_lost && clients_.contains(held->second.client)) {
        losses_[held->second.client].push_back(Loss{held->second.key, held->second.device, now});
      }
      leases_.erase(held);
    }
  }
}

bool DashboardState::report(ConnectionId client, const rpc::SessionReport& in, TimePoint now) {
  auto owner = clients_.find(client);
  if (owner == clients_.end()) return false;
  SessionKey key{client, in.session_id};
  auto it = sessions_.find(key);
  const bool new_session = it == sessions_.end();
  if (new_session) {
    if (owner->second.live_sessions >= kMaxLiveSessionsPerClient || live_sessions_ >= kMaxLiveSessions ||
        jobs_ >= kMaxJobs) {
      return false;
    }
    Session session;
    session.client = client;
    session.session_id = in.session_id;
    session.id_json = quoted(session_label(client, in.session_id));
    session.client_json = owner->second.label_json;
    session.started = now;
    it = sessions_.emplace(key, std::move(session)).first;
    ++live_sessions_;
    ++owner->second.live_sessions;
    record(DashboardEvent::Kind::session_start,
           str("session ", session_label(client, in.session_id), " of client ", owner->second.label, " started",
               in.label.empty() ? std::string() : str(" (", in.label, ")")),
           now);
  }
  Session& session = it->second;
  if (session.state == SessionState::gone) return false;
  auto job = session.jobs.find(in.job);
  if (job == session.jobs.end()) {
    if (session.jobs.size() >= kMaxJobsPerSession || jobs_ >= kMaxJobs) return false;
    job = session.jobs.emplace(in.job, Job{}).first;
    ++jobs_;
  }
  Job& state = job->second;

  rpc::SessionReport report = in;
  report.best_gflops = finite_or_zero(report.best_gflops);
  report.default_gflops = finite_or_zero(report.default_gflops);
  report.final_gflops = std::max(finite_or_zero(report.final_gflops), 0.0);
  report.final_speedup = std::max(finite_or_zero(report.final_speedup), 0.0);
  report.final_speedup_low = std::max(finite_or_zero(report.final_speedup_low), 0.0);
  report.final_speedup_high = std::max(finite_or_zero(report.final_speedup_high), 0.0);
  if (report.finished) {
    report.outcome = known_outcome(report.outcome);
    report.eta = std::chrono::milliseconds(0);
  } else {
    report.outcome.clear();
    report.message.clear();
  }
  if (report.eta.count() < 0) report.eta = std::chrono::milliseconds(0);
  if (report.this_session > state.last.this_session) {
    std::uint64_t added = report.this_session - state.last.this_session;
    trials_total_ += added;
    recent_trials_.emplace_back(now, added);
    recent_trials_sum_ += added;
  }
  count_failures(state, report);
  add_point(state.curve, CurvePoint{report.trials, static_cast<std::uint64_t>(std::max<std::int64_t>(report.elapsed.count(), 0)),
                                    report.best_gflops});
  session.eta_ms = static_cast<std::uint64_t>(report.eta.count());
  if (report.finished && !state.last.finished) ++jobs_ended_[report.outcome];
  state.last = std::move(report);
  build_job_json(state);
  if (!new_session) {
    session.intervals_ms.push_back(static_cast<std::int64_t>(ms_between(session.updated, now)));
    if (session.intervals_ms.size() > kIntervalsKept) session.intervals_ms.pop_front();
  }
  session.updated = now;
  prune_rate(now);

  bool all_finished = std::all_of(session.jobs.begin(), session.jobs.end(),
                                  [](const auto& entry) { return entry.second.last.finished; });
  if (session.state == SessionState::running && all_finished) {
    end_session(session, SessionState::finished, now);
    prune_ended();
  } else if (session.state == SessionState::finished && !all_finished) {
    // A further job began after the others had finished: running again.
    session.state = SessionState::running;
    ++live_sessions_;
    ++owner->second.live_sessions;
  }
  return true;
}

void DashboardState::count_failures(Job& job, const rpc::SessionReport& report) {
  for (const auto& [status, count] : report.failures) {
    std::uint32_t& last = job.failures[status];
    if (count > last) {
      std::string label = status;
      if (!measurement_failures_.contains(label) && measurement_failures_.size() >= kMaxFailureStatuses) {
        label = "other";
      }
      measurement_failures_[label] += count - last;
    }
    last = count;
  }
}

// Appends a point (or updates the last one, at the same trial count); past
// kMaxCurvePoints keeps the first, the last and each point that improved on the one
// before, then every other one of those if they are still too many.
void DashboardState::add_point(std::vector<CurvePoint>& curve, CurvePoint point) {
  if (!curve.empty() && curve.back().trials == point.trials) {
    curve.back() = point;
    return;
  }
  curve.push_back(point);
  if (curve.size() <= kMaxCurvePoints) return;
  std::vector<CurvePoint> kept;
  kept.reserve(curve.size());
  kept.push_back(curve.front());
  for (std::size_t i = 1; i + 1 < curve.size(); ++i) {
    if (curve[i].best_gflops > kept.back().best_gflops) kept.push_back(curve[i]);
  }
  kept.push_back(curve.back());
  while (kept.size() > kMaxCurvePoints) {
    std::vector<CurvePoint> halved;
    halved.reserve(kept.size() / 2 + 2);
    halved.push_back(kept.front());
    for (std::size_t i = 2; i + 1 < kept.size(); i += 2) halved.push_back(kept[i]);
    halved.push_back(kept.back());
    kept = std::move(halved);
  }
  curve = std::move(kept);
}

void DashboardState::build_job_json(Job& job) {
  const rpc::SessionReport& r = job.last;
  std::string& out = job.json;
  out.clear();
  out.reserve(512 + job.curve.size() * 28);
  out += "{\"job\":";
  append_uint(out, r.job);
  out += ",\"label\":";
  append_string(out, r.label);
  out += ",\"op\":";
  append_string(out, r.op);
  out += ",\"workload\":";
  append_string(out, r.workload);
  out += ",\"strategy\":";
  append_string(out, r.strategy);
  out += ",\"target\":";
  append_string(out, r.target);
  out += ",\"key\":";
  append_string(out, r.key);
  out += ",\"phase\":";
  append_string(out, r.phase);
  out += ",\"trials\":";
  append_uint(out, r.trials);
  out += ",\"budget\":";
  append_uint(out, r.budget);
  out += ",\"this_session\":";
  append_uint(out, r.this_session);
  out += ",\"best_gflops\":";
  append_number(out, r.best_gflops);
  out += ",\"default_gflops\":";
  append_number(out, r.default_gflops);
  out += ",\"best_config\":";
  append_string(out, r.best_config);
  out += ",\"elapsed_ms\":";
  append_int(out, std::max<std::int64_t>(r.elapsed.count(), 0));
  out += ",\"failures\":{";
  bool first = true;
  for (const auto& [status, count] : job.failures) {
    if (!first) out += ',';
    first = false;
    append_string(out, status);
    out += ':';
    append_uint(out, count);
  }
  out += "},\"finished\":";
  out += r.finished ? "true" : "false";
  out += ",\"outcome\":";
  if (r.finished) {
    append_string(out, r.outcome);
  } else {
    out += "null";
  }
  out += ",\"message\":";
  append_string(out, r.message);
  out += ",\"eta_ms\":";
  append_int(out, r.eta.count());
  out += ",\"final_gflops\":";
  append_number(out, r.final_gflops);
  out += ",\"final_speedup\":";
  append_number(out, r.final_speedup);
  out += ",\"final_speedup_low\":";
  append_number(out, r.final_speedup_low);
  out += ",\"final_speedup_high\":";
  append_number(out, r.final_speedup_high);
  out += ",\"verdict\":";
  append_string(out, r.verdict);
  out += ",\"curve\":[";
  first = true;
  for (const CurvePoint& p : job.curve) {
    if (!first) out += ',';
    first = false;
    out += '[';
    append_uint(out, p.trials);
    out += ',';
    append_uint(out, p.elapsed_ms);
    out += ',';
    append_number(out, p.best_gflops);
    out += ']';
  }
  out += "]}";
}

void DashboardState::end_session(Session& session, SessionState state, TimePoint now) {
  if (session.state == SessionState::running) {
    --live_sessions_;
    if (auto owner = clients_.find(session.client); owner != clients_.end()) --owner->second.live_sessions;
  }
  session.state = state;
  session.ended = now;
  const char* outcome = outcome_of(session);
  std::string how;
  if (state == SessionState::finished) {
    how = " finished";
    if (outcome && std::string_view(outcome) != "done") how += str(" (", outcome, ")");
  } else {
    how = " gone: its client left";
    if (outcome) how += str(" (", outcome, ")");
  }
  // The first failure's message, if any.
  for (const auto& [index, job] : session.jobs) {
    if (job.last.finished && job.last.outcome == "failed" && !job.last.message.empty()) {
      how += str(": job ", index, " failed: ", job.last.message);
      break;
    }
  }
  if (state == SessionState::gone) {
    for (const auto& [index, job] : session.jobs) {
      if (!job.last.finished) ++jobs_ended_["gone"];
    }
  }
  record(DashboardEvent::Kind::session_end, str("session ", session_label(session.client, session.session_id), how),
         now);
}

const char* DashboardState::outcome_of(const Session& session) {
  if (session.state == SessionState::running) return nullptr;
  bool failed = false, interrupted = false;
  for (const auto& [index, job] : session.jobs) {
    if (!job.last.finished) continue;
    failed = failed || job.last.outcome == "failed";
    interrupted = interrupted || job.last.outcome == "interrupted";
  }
  if (failed) return "failed";
  if (interrupted) return "interrupted";
  return session.state == SessionState::finished ? "done" : nullptr;
}

std::chrono::milliseconds DashboardState::typical_interval(const Session& session) {
  if (session.intervals_ms.empty()) return std::chrono::milliseconds(0);
  const std::vector<double> ms(session.intervals_ms.begin(), session.intervals_ms.end());
  return std::chrono::milliseconds(static_cast<std::int64_t>(std::llround(stats::median(ms))));
}

std::chrono::milliseconds DashboardState::stall_after(std::chrono::milliseconds typical) {
  return std::max<std::chrono::milliseconds>(kStallFloor, typical * kStallFactor);
}

bool DashboardState::stalled(const Session& session, TimePoint now) {
  return session.state == SessionState::running &&
         now - session.updated > stall_after(typical_interval(session));
}

std::size_t DashboardState::stalled_sessions(TimePoint now) const {
  return static_cast<std::size_t>(std::count_if(sessions_.begin(), sessions_.end(),
                                                [&](const auto& entry) { return stalled(entry.second, now); }));
}

void DashboardState::prune_ended() {
  std::size_t ended = sessions_.size() - live_sessions_;
  while (ended > kEndedSessionsKept) {
    auto oldest = sessions_.end();
    for (auto it = sessions_.begin(); it != sessions_.end(); ++it) {
      if (it->second.state == SessionState::running) continue;
      if (oldest == sessions_.end() || it->second.ended < oldest->second.ended) oldest = it;
    }
    jobs_ -= oldest->second.jobs.size();
    sessions_.erase(oldest);
    --ended;
  }
}

void DashboardState::prune_rate(TimePoint now) {
  while (!recent_trials_.empty() && now - recent_trials_.front().first > kRateWindow) {
    recent_trials_sum_ -= recent_trials_.front().second;
    recent_trials_.pop_front();
  }
}

double DashboardState::trials_per_second(TimePoint now) {
  prune_rate(now);
  return static_cast<double>(recent_trials_sum_) / std::chrono::duration<double>(kRateWindow).count();
}

const std::vector<CurvePoint>* DashboardState::curve(ConnectionId client, const std::string& session_id,
                                                     std::uint32_t job) const {
  auto session = sessions_.find({client, session_id});
  if (session == sessions_.end()) return nullptr;
  auto found = session->second.jobs.find(job);
  return found == session->second.jobs.end() ? nullptr : &found->second.curve;
}

std::size_t DashboardState::sessions(const char* state) const {
  std::string_view wanted = state;
  return static_cast<std::size_t>(std::count_if(sessions_.begin(), sessions_.end(), [&](const auto& entry) {
    switch (entry.second.state) {
      case SessionState::running: return wanted == "running";
      case SessionState::finished: return wanted == "finished";
      case SessionState::gone: return wanted == "gone";
    }
    return false;
  }));
}

// ---- what it shows ----------------------------------------------------------------

DashboardSnapshot DashboardState::snapshot(const Pool& pool, const TrackerFacts& facts, TimePoint now) {
  const auto begin = Clock::now();
  const double rate = trials_per_second(now);
  const PoolSummary summary = pool_summary(pool);
  const std::string tracker = tracker_json(pool, facts, now, rate);
  pool_inner_.clear();  // keeps its capacity: no fresh pages for the largest part at each build
  pool_json_inner(pool_inner_, pool, summary, facts, now);
  const std::string& pool_inner = pool_inner_;

  DashboardSnapshot snapshot;
  snapshot.sessions_json = sessions_json(now);
  snapshot.events_json = events_json(now);
  snapshot.state_json.reserve(tracker.size() + pool_inner.size() + snapshot.sessions_json.size() +
                              snapshot.events_json.size() + 64);
  snapshot.state_json += "{\"tracker\":";
  snapshot.state_json += tracker;
  snapshot.state_json += ",\"pool\":{";
  snapshot.state_json += pool_inner;
  snapshot.state_json += "},\"sessions\":";
  snapshot.state_json += snapshot.sessions_json;
  snapshot.state_json += ",\"events\":";
  snapshot.state_json += snapshot.events_json;
  snapshot.state_json += '}';
  snapshot.pool_json.reserve(tracker.size() + pool_inner.size() + 16);
  snapshot.pool_json += "{\"tracker\":";
  snapshot.pool_json += tracker;
  snapshot.pool_json += ',';
  snapshot.pool_json += pool_inner;
  snapshot.pool_json += '}';
  snapshot.metrics_text = metrics_text(pool, summary, facts, now, rate);
  last_build_ = Clock::now() - begin;
  return snapshot;
}

std::string DashboardState::tracker_json(const Pool& pool, const TrackerFacts& facts, TimePoint now,
                                         double rate) const {
  PoolCounts counts = pool.counts();
  std::string out = "{\"version\":";
  append_string(out, facts.version);
  out += ",\"uptime_ms\":";
  append_uint(out, ms_between(facts.started_at, now));
  out += ",\"address\":";
  append_string(out, facts.address);
  out += ",\"tls\":";
  out += facts.tls ? "true" : "false";
  out += ",\"auth\":";
  out += facts.auth ? "true" : "false";
  out += ",\"connections\":";
  append_uint(out, facts.device_connections + facts.client_connections + facts.handshaking);
  out += ",\"clients\":";
  append_uint(out, facts.client_connections);
  out += ",\"devices\":";
  append_uint(out, counts.devices);
  out += ",\"leases\":";
  append_uint(out, counts.leases);
  out += ",\"queued\":";
  append_uint(out, counts.queued);
  out += ",\"grants\":";
  append_uint(out, counts.grants);
  out += ",\"trials_per_second\":";
  append_number(out, rate);
  out += ",\"snapshot_ms\":";
  append_number(out, std::chrono::duration<double, std::milli>(last_build_).count());
  out += '}';
  return out;
}

PoolSummary DashboardState::pool_summary(const Pool& pool) {
  PoolSummary summary;
  summary.keys = pool.key_summaries();
  if (device_order_.size() == pool.counts().devices) {
    summary.devices.reserve(device_order_.size());
    for (DeviceId id : device_order_) {
      const PoolDevice* device = pool.device(id);
      if (!device) break;
      summary.devices.push_back(device);
    }
    if (summary.devices.size() == device_order_.size()) return summary;
  }
  // A device joined or left since the last build: the pool sorts them once more.
  summary.devices = pool.summary().devices;
  device_order_.clear();
  for (const PoolDevice* device : summary.devices) device_order_.push_back(device->id);
  return summary;
}

void DashboardState::pool_json_inner(std::string& out, const Pool& pool, const PoolSummary& summary,
                                     const TrackerFacts& facts, TimePoint now) const {
  out.reserve(256 + summary.devices.size() * 420);
  out += "\"keys\":[";
  bool first = true;
  for (const PoolKeySummary& key : summary.keys) {
    if (!first) out += ',';
    first = false;
    out += "{\"key\":";
    append_string(out, key.key);
    out += ",\"free\":";
    append_uint(out, key.free);
    out += ",\"busy\":";
    append_uint(out, key.busy);
    out += ",\"queued\":";
    append_uint(out, key.queued);
    out += '}';
  }

  out += "],\"devices\":[";
  first = true;
  for (const PoolDevice* device : summary.devices) {
    if (!first) out += ',';
    first = false;
    auto cached = devices_.find(device->id);
    if (cached != devices_.end()) {
      out += cached->second.head;
    } else {
      out += device_head(*device);
    }
    out += "\"state\":";
    out += device->lease ? "\"busy\"" : "\"free\"";
    out += ",\"lease_id\":";
    const PoolLease* lease = device->lease ? pool.lease(device->lease) : nullptr;
    if (lease) {
      append_uint(out, lease->id.value);
    } else {
      out += "null";
    }
    out += ",\"holder\":";
    auto holder = lease ? clients_.find(lease->client) : clients_.end();
    if (holder != clients_.end()) {
      out += holder->second.holder_json;
    } else {
      out += "null";
    }
    out += ",\"heartbeat_age_ms\":";
    std::optional<TimePoint> seen = facts.last_seen ? facts.last_seen(device->connection) : std::nullopt;
    append_uint(out, seen ? ms_between(*seen, now) : 0);
    out += ",\"connected_ms\":";
    append_uint(out, ms_between(device->registered_at, now));
    out += ',';
    if (cached != devices_.end()) {
      out += cached->second.caps;
    } else {
      out += device_caps(rpc::DeviceInfo{});
    }
  }

  out += "],\"queues\":[";
  first = true;
  for (const PoolKeySummary& key : summary.keys) {
    if (key.queued == 0) continue;
    if (!first) out += ',';
    first = false;
    out += "{\"key\":";
    append_string(out, key.key);
    out += ",\"waiting\":[";
    bool first_waiting = true;
    for (const QueuedRequest* request : pool.queued(key.key)) {
      if (!first_waiting) out += ',';
      first_waiting = false;
      out += "{\"client\":";
      auto client = clients_.find(request->client);
      if (client != clients_.end()) {
        out += client->second.label_json;
      } else {
        append_string(out, str("connection ", request->client.value));
      }
      out += ",\"request_id\":";
      append_uint(out, request->request_id);
      out += ",\"priority\":";
      append_int(out, request->priority);
      out += ",\"waited_ms\":";
      append_uint(out, ms_between(request->arrived, now));
      out += '}';
    }
    out += "]}";
  }
  out += ']';
}

std::string DashboardState::sessions_json(TimePoint now) const {
  std::vector<const Session*> running;
  std::vector<const Session*> ended;
  for (const auto& [key, session] : sessions_) {
    (session.state == SessionState::running ? running : ended).push_back(&session);
  }
  std::sort(running.begin(), running.end(), [](const Session* a, const Session* b) { return a->started < b->started; });
  std::sort(ended.begin(), ended.end(), [](const Session* a, const Session* b) { return a->ended > b->ended; });
  running.insert(running.end(), ended.begin(), ended.end());

  std::string out = "[";
  bool first = true;
  for (const Session* session : running) {
    if (!first) out += ',';
    first = false;
    out += "{\"id\":";
    out += session->id_json;
    out += ",\"client\":";
    out += session->client_json;
    out += ",\"state\":";
    switch (session->state) {
      case SessionState::running: out += "\"running\""; break;
      case SessionState::finished: out += "\"finished\""; break;
      case SessionState::gone: out += "\"gone\""; break;
    }
    out += ",\"started_ms_ago\":";
    append_uint(out, ms_between(session->started, now));
    out += ",\"updated_ms_ago\":";
    append_uint(out, ms_between(session->updated, now));
    out += ",\"outcome\":";
    if (const char* outcome = outcome_of(*session)) {
      out += '"';
      out += outcome;
      out += '"';
    } else {
      out += "null";
    }
    const std::chrono::milliseconds typical = typical_interval(*session);
    out += ",\"stalled\":";
    out += stalled(*session, now) ? "true" : "false";
    out += ",\"stall_after_ms\":";
    append_int(out, stall_after(typical).count());
    out += ",\"report_interval_ms\":";
    append_int(out, typical.count());
    out += ",\"eta_ms\":";
    append_uint(out, session->eta_ms);
    out += ",\"jobs\":[";
    bool first_job = true;
    for (const auto& [index, job] : session->jobs) {
      if (!first_job) out += ',';
      first_job = false;
      out += job.json;
    }
    out += "]}";
  }
  out += ']';
  return out;
}

std::string DashboardState::events_json(TimePoint now) const {
  std::string out = "[";
  std::size_t shown = 0;
  for (std::size_t i = events_.size(); i-- > 0 && shown < kEventsShown; ++shown) {
    if (shown > 0) out += ',';
    out += "{\"t_ms_ago\":";
    append_uint(out, ms_between(events_[i].at, now));
    out += event_tails_[i];
  }
  out += ']';
  return out;
}

std::string DashboardState::metrics_text(const Pool& pool, const PoolSummary& summary, const TrackerFacts& facts,
                                         TimePoint now, double rate) const {
  std::string out;
  out.reserve(4096 + summary.keys.size() * 1200);

  family(out, "kestrel_devices", "gauge", "Devices registered with the tracker, by key and state.");
  for (const PoolKeySummary& key : summary.keys) {
    for (const char* state : {"free", "busy"}) {
      out += "kestrel_devices{key=\"";
      append_label(out, key.key);
      out += "\",state=\"";
      out += state;
      out += "\"} ";
      append_uint(out, std::string_view(state) == "free" ? key.free : key.busy);
      out += '\n';
    }
  }

  family(out, "kestrel_queue_depth", "gauge", "Device requests waiting for a grant, by key.");
  for (const PoolKeySummary& key : summary.keys) {
    sample(out, "kestrel_queue_depth", "key", key.key, key.queued);
  }

  family(out, "kestrel_lease_wait_seconds", "histogram",
         "Time from a device request's arrival at the tracker to its grant, by key.");
  for (const auto& [key, histogram] : lease_waits_) {
    std::uint64_t cumulative = 0;
    for (std::size_t i = 0; i <= kLeaseWaitBuckets.size(); ++i) {
      cumulative += histogram.counts[i];
      out += "kestrel_lease_wait_seconds_bucket{key=\"";
      append_label(out, key);
      out += "\",le=\"";
      if (i < kLeaseWaitBuckets.size()) {
        append_number(out, kLeaseWaitBuckets[i]);
      } else {
        out += "+Inf";
      }
      out += "\"} ";
      append_uint(out, cumulative);
      out += '\n';
    }
    sample(out, "kestrel_lease_wait_seconds_sum", "key", key, histogram.sum_seconds);
    sample(out, "kestrel_lease_wait_seconds_count", "key", key, static_cast<double>(histogram.count));
  }

  family(out, "kestrel_grants_total", "counter", "Leases granted since the tracker started.");
  sample(out, "kestrel_grants_total", static_cast<double>(pool.counts().grants));

  family(out, "kestrel_requests_failed_total", "counter",
         "Device requests that ended without a grant, by reason (timeout, cancelled, overloaded, bad_request).");
  for (const char* reason : {"timeout", "cancelled", "overloaded", "bad_request"}) {
    auto found = requests_failed_.find(reason);
    sample(out, "kestrel_requests_failed_total", "reason", reason,
           static_cast<double>(found == requests_failed_.end() ? 0 : found->second));
  }

  family(out, "kestrel_trials_total", "counter", "Trials measured by the tuning sessions that report to the tracker.");
  sample(out, "kestrel_trials_total", static_cast<double>(trials_total_));
  family(out, "kestrel_trials_per_second", "gauge", "Trials reported per second, over the last 10 s.");
  sample(out, "kestrel_trials_per_second", rate);

  family(out, "kestrel_measurement_failures_total", "counter",
         "Failed measurements reported by tuning sessions, by status.");
  for (const auto& [status, count] : measurement_failures_) {
    sample(out, "kestrel_measurement_failures_total", "status", status, static_cast<double>(count));
  }

  family(out, "kestrel_sessions", "gauge", "Tuning sessions the dashboard shows, by state.");
  sample(out, "kestrel_sessions", "state", "running", static_cast<double>(live_sessions_));
  sample(out, "kestrel_sessions", "state", "finished", static_cast<double>(sessions("finished")));
  family(out, "kestrel_sessions_stalled", "gauge",
         "Running tuning sessions that have sent no report for longer than max(60 s, 3 x their typical interval).");
  sample(out, "kestrel_sessions_stalled", static_cast<double>(stalled_sessions(now)));
  family(out, "kestrel_jobs_ended_total", "counter",
         "Jobs of tuning sessions that ended, by outcome (done, interrupted, failed; gone: the client left first).");
  for (const char* outcome : kOutcomes) {
    auto found = jobs_ended_.find(outcome);
    sample(out, "kestrel_jobs_ended_total", "outcome", outcome,
           static_cast<double>(found == jobs_ended_.end() ? 0 : found->second));
  }

  family(out, "kestrel_connections", "gauge", "Open connections, by role (handshake: not yet authenticated).");
  sample(out, "kestrel_connections", "role", "device", static_cast<double>(facts.device_connections));
  sample(out, "kestrel_connections", "role", "client", static_cast<double>(facts.client_connections));
  sample(out, "kestrel_connections", "role", "handshake", static_cast<double>(facts.handshaking));

  family(out, "kestrel_connections_refused_total", "counter",
         "Connections closed at once because a connection cap was reached.");
  sample(out, "kestrel_connections_refused_total", static_cast<double>(facts.refused_connections));
  family(out, "kestrel_connections_rejected_total", "counter", "Failed handshakes and protocol violations.");
  sample(out, "kestrel_connections_rejected_total", static_cast<double>(facts.rejected_connections));

  family(out, "kestrel_uptime_seconds", "gauge", "Seconds since the tracker started.");
  sample(out, "kestrel_uptime_seconds",
         std::chrono::duration<double>(now > facts.started_at ? now - facts.started_at : Clock::duration{}).count());

  family(out, "kestrel_device_losses_total", "counter", "Devices that left the pool (disconnected or silent).");
  sample(out, "kestrel_device_losses_total", static_cast<double>(device_losses_));

  family(out, "kestrel_dashboard_snapshot_seconds", "gauge", "How long the previous dashboard snapshot took to build.");
  sample(out, "kestrel_dashboard_snapshot_seconds", std::chrono::duration<double>(last_build_).count());
  return out;
}

}  // namespace kestrel::tracker
