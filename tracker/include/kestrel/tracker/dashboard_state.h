// What the tracker's dashboard shows beyond the pool's own state: recent events (joins,
// losses, requeues, grant timeouts, sessions starting and ending), tuning sessions from
// the clients' reports with their best-so-far curves, their results (the final round's
// re-measured recommendation, speed-up, verdict) and outcomes (done, interrupted,
// failed), stalled sessions, the lease-wait histogram and the counters; and the snapshot
// built from it and the pool: the JSON documents and the Prometheus text
// (docs/dashboard.md lists their fields).
//
// Pure state: no sockets, no clock. Every input is a method call with the current time;
// snapshot() reads the Pool and what the server tells it (TrackerFacts). Devices' static
// fragments (name, address, capabilities) are turned into JSON once, when they join, so
// that a snapshot of a large pool stays cheap.
//
// Not thread-safe: one owner calls it (the tracker's io thread). The snapshot it returns
// is a value, handed to other threads through the DashboardFeed.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kestrel/base/ids.h"
#include "kestrel/rpc/device_info.h"
#include "kestrel/rpc/session_report.h"
#include "kestrel/tracker/dashboard_feed.h"
#include "kestrel/tracker/pool.h"

namespace kestrel::tracker {

// What the server knows that the dashboard shows and neither the pool nor the
// dashboard's state keeps.
struct TrackerFacts {
  std::string version;
  std::string address;  // where the tracker listens, "127.0.0.1:9190"
  bool tls = false;
  bool auth = false;
  TimePoint started_at{};
  // Open connections by role; `handshaking`: not yet authenticated.
  std::size_t device_connections = 0;
  std::size_t client_connections = 0;
  std::size_t handshaking = 0;
  std::uint64_t refused_connections = 0;
  std::uint64_t rejected_connections = 0;
  // When the peer on a connection was last heard from (a device's heartbeat age);
  // nothing when unknown. May be empty (then no age is known).
  std::function<std::optional<TimePoint>(ConnectionId)> last_seen;
};

// One line of the dashboard's event list.
struct DashboardEvent {
  enum class Kind { join, loss, requeue, grant_timeout, session_start, session_end, client };
  TimePoint at;
  Kind kind = Kind::join;
  std::string text;
};
const char* to_string(DashboardEvent::Kind kind);

// A point of a job's best-so-far curve, as reported.
struct CurvePoint {
  std::uint32_t trials = 0;
  std::uint64_t elapsed_ms = 0;
  double best_gflops = 0;
};

// Buckets (seconds) of kestrel_lease_wait_seconds: the time from a request's arrival to
// its grant. The last, +Inf, is implicit.
inline constexpr std::array<double, 12> kLeaseWaitBuckets{0.001, 0.005, 0.01, 0.05, 0.1, 0.5,
                                                          1,     5,     10,   30,   60,  300};

struct LeaseWaitHistogram {
  std::array<std::uint64_t, kLeaseWaitBuckets.size() + 1> counts{};  // per bucket, not cumulative; last: +Inf
  double sum_seconds = 0;
  std::uint64_t count = 0;
  void observe(double seconds);
};

class DashboardState {
 public:
  static constexpr std::size_t kEventRing = 200;      // events kept
  static constexpr std::size_t kEventsShown = 100;    // newest first in the documents
  static constexpr std::size_t kMaxCurvePoints = 512; // per job, thinned past it
  static constexpr std::size_t kMaxLiveSessionsPerClient = 64;
  static constexpr std::size_t kMaxLiveSessions = 256;
  static constexpr std::size_t kMaxJobsPerSession = 64;
  static constexpr std::size_t kMaxJobs = 1024;       // over all sessions kept
  static constexpr std::size_t kEndedSessionsKept = 20;
  static constexpr std::size_t kMaxFailureStatuses = 64;  // distinct statuses counted; the rest as "other"
  // A client whose lease ended because its device was lost and that asks for the same
  // key again within this long is a requeue.
  static constexpr std::chrono::seconds kRequeueWindow{10};
  // kestrel_trials_per_second averages the reported trials over this long.
  static constexpr std::chrono::seconds kRateWindow{10};
  // A running session is stalled once it has sent no report for longer than
  // max(kStallFloor, kStallFactor x its typical interval between reports: the median of
  // its last kIntervalsKept).
  static constexpr std::chrono::seconds kStallFloor{60};
  static constexpr std::int64_t kStallFactor = 3;
  static constexpr std::size_t kIntervalsKept = 32;
  // How long a session whose reports typically come `typical` apart (0: unknown) may
  // stay silent before it is stalled.
  static std::chrono::milliseconds stall_after(std::chrono::milliseconds typical);

  // ---- what happened: the server calls these as things happen ----

  // `device` was just registered (pool.add_device succeeded).
  void device_joined(const PoolDevice& device, const rpc::DeviceInfo& info, TimePoint now);
  // `device` is about to be removed from the pool (call before pool.remove_device).
  void device_lost(const PoolDevice& device, const std::string& reason, TimePoint now);
  // A client completed its handshake; `name` as it announced itself, `address` its peer.
  void client_connected(ConnectionId client, const std::string& name, const std::string& address, TimePoint now);
  // A client's connection ended: its running sessions become "gone".
  void client_left(ConnectionId client, const std::string& reason, TimePoint now);
  // A client asked for a device of `key` (before the pool sees it).
  void request_submitted(ConnectionId client, const std::string& key, TimePoint now);
  // What a pool call returned, before it is delivered: grants (the lease-wait
  // histogram), failed requests (counters, grant timeouts) and ended leases (a lost
  // device's holder, for requeues).
  void observe(const Events& events, const Pool& pool, TimePoint now);
  // A client's session report. Returns false when it was dropped: a new session past
  // the caps (kMaxLiveSessionsPerClient, kMaxLiveSessions), or a new job past
  // kMaxJobsPerSession / kMaxJobs, or a client that is not connected.
  bool report(ConnectionId client, const rpc::SessionReport& report, TimePoint now);

  // ---- what it shows ----

  // Builds every document and the metrics text from this state, `pool` and `facts`.
  // The snapshot's version and time are set by DashboardFeed::publish.
  DashboardSnapshot snapshot(const Pool& pool, const TrackerFacts& facts, TimePoint now);
  // How long the last snapshot() took.
  std::chrono::nanoseconds last_build_time() const { return last_build_; }

  // ---- for tests ----
  const std::deque<DashboardEvent>& events() const { return events_; }  // oldest first
  std::uint64_t trials_total() const { return trials_total_; }
  double trials_per_second(TimePoint now);
  std::uint64_t device_losses() const { return device_losses_; }
  const std::map<std::string, LeaseWaitHistogram>& lease_waits() const { return lease_waits_; }
  // The curve of one job of a session, if the session is kept.
  const std::vector<CurvePoint>* curve(ConnectionId client, const std::string& session_id, std::uint32_t job) const;
  std::size_t sessions(const char* state) const;  // "running", "finished" or "gone"
  // Running sessions silent past stall_after() at `now`.
  std::size_t stalled_sessions(TimePoint now) const;
  // Jobs that ended, by outcome ("done", "interrupted", "failed"; "gone": its client left
  // before the job's last report), each counted once.
  const std::map<std::string, std::uint64_t>& ended_jobs() const { return jobs_ended_; }

 private:
  enum class SessionState { running, finished, gone };
  struct Job {
    rpc::SessionReport last;  // sanitized
    std::vector<CurvePoint> curve;
    std::map<std::string, std::uint32_t> failures;  // this session's counts by status, as last reported
    std::string json;                               // this job's document, rebuilt on each report
  };
  struct Session {
    ConnectionId client;
    std::string session_id;
    std::string id_json;      // "\"<conn>/<session>\""
    std::string client_json;  // the client's label, quoted
    SessionState state = SessionState::running;
    TimePoint started{};
    TimePoint updated{};
    TimePoint ended{};
    std::map<std::uint32_t, Job> jobs;
    std::deque<std::int64_t> intervals_ms;  // between its last reports, at most kIntervalsKept
    std::uint64_t eta_ms = 0;               // the ETA of its latest report (0: unknown)
  };
  using SessionKey = std::pair<ConnectionId, std::string>;
  struct Client {
    std::string label;       // "name (address)"
    std::string label_json;  // quoted
    std::string holder_json; // "\"client name (address)\""
    std::size_t live_sessions = 0;
  };
  struct DeviceCache {
    std::string head;  // {"id":N,"key":..,"name":..,"address":..,
    std::string caps;  // "caps":{...}}
  };
  struct HeldLease {
    ConnectionId client;
    std::string key;
    std::string device;
  };
  struct Loss {
    std::string key;
    std::string device;
    TimePoint at;
  };

  void record(DashboardEvent::Kind kind, std::string text, TimePoint now);
  void end_session(Session& session, SessionState state, TimePoint now);
  // The session's outcome: running, none; else "failed" when a job failed, "interrupted"
  // when one was, "done" when it finished; none when its client left without saying.
  static const char* outcome_of(const Session& session);
  static std::chrono::milliseconds typical_interval(const Session& session);
  static bool stalled(const Session& session, TimePoint now);
  void prune_ended();
  void prune_rate(TimePoint now);
  void count_failures(Job& job, const rpc::SessionReport& report);
  static void add_point(std::vector<CurvePoint>& curve, CurvePoint point);
  static void build_job_json(Job& job);

  std::string tracker_json(const Pool& pool, const TrackerFacts& facts, TimePoint now, double rate) const;
  // The pool's keys and its devices in (key, name, id) order, sorted only when a device
  // joined or left since the last build.
  PoolSummary pool_summary(const Pool& pool);
  void pool_json_inner(std::string& out, const Pool& pool, const PoolSummary& summary, const TrackerFacts& facts,
                       TimePoint now) const;
  std::string sessions_json(TimePoint now) const;
  std::string events_json(TimePoint now) const;
  std::string metrics_text(const Pool& pool, const PoolSummary& summary, const TrackerFacts& facts, TimePoint now,
                           double rate) const;

  std::deque<DashboardEvent> events_;
  std::deque<std::string> event_tails_;  // each event's ,"kind":..,"text":..} (parallel to events_)

  std::unordered_map<DeviceId, DeviceCache> devices_;
  std::vector<DeviceId> device_order_;  // as of the last build; emptied when a device joins or leaves
  std::string pool_inner_;              // the pool document's body, rebuilt in place at each build
  std::unordered_map<ConnectionId, Client> clients_;
  std::unordered_map<LeaseId, HeldLease> leases_;
  std::unordered_map<ConnectionId, std::vector<Loss>> losses_;  // lost leases, for requeues

  std::map<SessionKey, Session> sessions_;
  std::size_t live_sessions_ = 0;
  std::size_t jobs_ = 0;

  std::map<std::string, LeaseWaitHistogram> lease_waits_;  // by key
  std::map<std::string, std::uint64_t> requests_failed_;  // by reason
  std::map<std::string, std::uint64_t> measurement_failures_;  // by status
  std::map<std::string, std::uint64_t> jobs_ended_;            // by outcome
  std::uint64_t trials_total_ = 0;
  std::deque<std::pair<TimePoint, std::uint64_t>> recent_trials_;  // reported increments within kRateWindow
  std::uint64_t recent_trials_sum_ = 0;
  std::uint64_t device_losses_ = 0;
  std::chrono::nanoseconds last_build_{0};
};

}  // namespace kestrel::tracker
