// A tuning session: a list of jobs (op + workload) tuned into one records database on one
// leased pool (a tracker's devices, or the embedded local pool). In turn, each to its end
// (`kestrel tune` of one workload or a --workloads set, `kestrel bench --tune-trials`), or
// interleaved, a step at a time, by a TaskScheduler that gives the trials to the jobs
// expected to cut a model's latency most (`kestrel tune --model`).
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "kestrel/host/leased_pool.h"
#include "kestrel/host/target.h"
#include "kestrel/ops/op.h"
#include "kestrel/ops/workload_sets.h"
#include "kestrel/records/records.h"
#include "kestrel/tuner/scheduler.h"
#include "kestrel/tuner/session_devices.h"
#include "kestrel/tuner/session_reporter.h"
#include "kestrel/tuner/tuning_loop.h"

namespace kestrel::tuner {

// A job of a session: a workload (ops::Workload: its label, shown in progress lines and
// possibly empty; the op, borrowed, which must outlive the session; its parameters) with
// the weight a scheduled session gives it (its occurrences in the model).
struct TuneJob : ops::Workload {
  double weight = 1;
};

struct SessionOptions {
  // The pool the front end leases (LeasedDevices) and the compiler's threads (0: one per
  // core); the session reads the pool's key for its records and reports.
  host::PoolOptions pool;
  unsigned compile_threads = 0;
  TuneOptions tune;              // its device_key is the pool's key
  // The compile target for the leased device (throws to refuse it); empty: the device's CPU.
  std::function<host::Target(const rpc::DeviceInfo&)> choose_target;
  // The compile target when it is known without a device. A session that measures
  // nothing (tune.zero_shot with tune.zero_shot_verify 0) then leases no pool at all:
  // its jobs are picked for this target. Otherwise unused (choose_target decides).
  std::optional<host::Target> target;
  // Where each job's op is looked up again for the target's backend (a GPU target tunes
  // the op's GPU variant, with its own knobs); null: the jobs' ops as given.
  const ops::Registry* registry = nullptr;
  // Interleave the jobs (TaskScheduler) instead of tuning them in turn. Each job then
  // stops at tune.trials (its own total, earlier sessions included; tune.time_budget is
  // not used per job) and the session at time_budget (0: when every job is done).
  // time_budget covers the final round too: the search stops early enough to leave the
  // jobs' final rounds the time their minimum passes are expected to take (from what the
  // search measured; at most final_share of the budget), and the final round re-measures
  // the jobs that matter most first (weight x best time), each within what is left
  // (FinalLimit): the others get fewer passes, or none when no time is left (their best
  // recorded configuration stands).
  bool scheduled = false;
  // When set, the jobs are made from the target once the device is leased (a model's
  // tasks depend on the target's vector width), replacing the constructor's.
  std::function<std::vector<TuneJob>(const host::Target&)> make_jobs;
  SchedulerOptions scheduler;
  std::chrono::seconds time_budget{0};
  double final_share = 0.5;
  // Where the jobs' progress goes as rpc::SessionReports (after each batch, and a last
  // one, finished, when a job is done: SessionReporter); empty: the devices' tracker
  // (SessionDevices::report), which shows them on its dashboard when it takes them.
  SessionReporter::Sink report;
  // The id the reports carry; empty: a fresh new_report_session_id().
  std::string report_id;
};

struct SessionResult {
  std::vector<TuneResult> results;  // one per job tuned, in order
  bool interrupted = false;         // request_stop(): the remaining jobs were not tuned
  bool aborted = false;             // abort(): the job in flight has no result either
  StopReason stop_reason = StopReason::none;  // scheduled: trials, time_budget or interrupted
  // Scheduled sessions' final round: the jobs whose final round ran in full, was cut to
  // fewer passes, or was skipped for time (TuneResult::final_cut); the time the search
  // left for it when the budget stopped the search (its estimate), and what it took.
  std::size_t final_full = 0, final_fewer = 0, final_skipped = 0;
  std::chrono::steady_clock::duration final_reserved{}, final_time{};
};

class TuneSession {
 public:
  // `db` and `devices` are borrowed and must outlive the session.
  TuneSession(std::vector<TuneJob> jobs, records::RecordStore& db, SessionOptions options, SessionDevices& devices);

  // Opens the devices, tunes the jobs (in turn, or interleaved), closes the devices
  // (opens none for a zero-shot session that measures nothing on a known target:
  // SessionOptions::target). `on_progress` gets the job's index with each progress
  // report. Throws what the devices, the compiler or the loop throw (rpc errors,
  // ops::OpError, RecordsError), after closing the devices.
  rpc::awaitable<SessionResult> run(std::function<void(std::size_t job, const TuneProgress&)> on_progress = {});

  // Stops now and tunes no further job: a wait for a device or for a result ends at once
  // (SessionDevices::interrupt: the batch in flight is dropped, what arrived before is
  // kept); the job in flight ends "interrupted" with the best recorded configuration, no
  // final round. Returns false when no job is being tuned yet (the pool is still being
  // leased): nothing to stop gracefully.
  bool request_stop();
  // Stops now (SIGTERM): the measurement in flight is abandoned (nothing more recorded),
  // the devices' leases end (SessionDevices::abort), and run() returns (interrupted,
  // aborted) once it has unwound. Returns false when no device is open yet (nothing to
  // stop: the caller may simply exit).
  bool abort();

  const std::vector<TuneJob>& jobs() const { return jobs_; }

 private:
  std::vector<TuneJob> jobs_;
  records::RecordStore& db_;
  SessionOptions options_;
  rpc::awaitable<void> run_in_turn(Evaluator& evaluator, const host::Target& target, const TuneOptions& tune,
                                   SessionResult& session, SessionReporter& reporter,
                                   const std::function<void(std::size_t, const TuneProgress&)>& on_progress);
  rpc::awaitable<void> run_scheduled(Evaluator& evaluator, const host::Target& target, const TuneOptions& tune,
                                     SessionResult& session, SessionReporter& reporter,
                                     const std::function<void(std::size_t, const TuneProgress&)>& on_progress);
  Task task_of(const TuneJob& job, const host::Target& target) const;
  ReportedJob reported_job(std::size_t job, const Task& task, const TuneOptions& tune) const;

  SessionDevices& devices_;
  bool devices_open_ = false;  // while run() holds them
  bool aborted_ = false;
  TuningLoop* loop_ = nullptr;
  std::vector<TuningLoop*> loops_;  // scheduled: every job's loop
  bool stop_ = false;
};

}  // namespace kestrel::tuner
