// TuneSession: one leased pool; the jobs in turn, or interleaved by a TaskScheduler.
#include "kestrel/tuner/session.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>
#include <stdexcept>

#include "kestrel/base/log.h"
#include "kestrel/rpc/errors.h"
#include "kestrel/tuner/evaluator.h"

namespace kestrel::tuner {
namespace {

// The evaluator of a session that measures nothing (zero-shot picks without
// verification): a call is a bug.
class NoDeviceEvaluator final : public Evaluator {
 public:
  rpc::awaitable<std::vector<Evaluation>> evaluate(const Task& task, const std::vector<ops::Config>&,
                                                   const rpc::MeasureSettings&, ResultCallback) override {
    throw std::logic_error("a zero-shot session without a device was asked to measure " + task.key());
  }
  rpc::awaitable<std::vector<Evaluation>> evaluate_vendors(const Task& task, const std::vector<ops::VendorKernel>&,
                                                           const rpc::MeasureSettings&, ResultCallback) override {
    throw std::logic_error("a zero-shot session without a device was asked to measure vendors for " + task.key());
  }
};

// A session that ended with an exception: the jobs in flight are reported "failed" with
// its message ("interrupted" when abort() ended it). The loops are gone by now: each
// job's last reported progress stands.
void report_failure(SessionReporter& reporter, std::exception_ptr failure, bool aborted) {
  std::string message = "unknown error";
  try {
    std::rethrow_exception(failure);
  } catch (const std::exception& e) {
    message = e.what();
  } catch (...) {
  }
  reporter.fail_unfinished(message, aborted);
}

// A scheduled session's final round, as each job's progress reports it.
struct FinalRoundState {
  std::size_t position = 0, tasks = 0;  // the job re-measured now (1-based), of how many; 0: searching
  std::function<std::optional<std::chrono::steady_clock::duration>()> eta;  // the round's time left
};

}  // namespace

TuneSession::TuneSession(std::vector<TuneJob> jobs, records::RecordStore& db, SessionOptions options,
                         SessionDevices& devices)
    : jobs_(std::move(jobs)), db_(db), options_(std::move(options)), devices_(devices) {}

bool TuneSession::request_stop() {
  stop_ = true;
  if (!loop_) return false;
  loop_->request_stop();
  for (TuningLoop* loop : loops_) loop->request_stop();
  // Waits for a device or a result end now; what was measured is kept.
  if (devices_open_) devices_.interrupt();
  return true;
}

bool TuneSession::abort() {
  request_stop();
  if (!devices_open_) return false;
  aborted_ = true;
  devices_.abort();
  return true;
}

Task TuneSession::task_of(const TuneJob& job, const host::Target& target) const {
  Task task;
  static_cast<ops::Workload&>(task) = job;
  // OpError when the op has no kernel for the target's backend.
  if (options_.registry) task.op = &options_.registry->get(job.op->name(), target.backend);
  task.target = target;
  return task;
}

ReportedJob TuneSession::reported_job(std::size_t job, const Task& task, const TuneOptions& tune) const {
  return {jobs_[job].label, task.op_name(), task.workload(), tune.strategy, task.target_name(), options_.pool.key};
}

rpc::awaitable<void> TuneSession::run_in_turn(Evaluator& evaluator, const host::Target& target,
                                              const TuneOptions& tune, SessionResult& session,
                                              SessionReporter& reporter,
                                              const std::function<void(std::size_t, const TuneProgress&)>& on_progress) {
  for (std::size_t i = 0; i < jobs_.size() && !stop_; ++i) {
    Task task = task_of(jobs_[i], target);
    reporter.describe(i, reported_job(i, task, tune));
    TuningLoop loop(std::move(task), db_, evaluator, tune);
    loop_ = &loop;
    TuneResult result = co_await loop.run([&](const TuneProgress& p) {
      reporter.progress(i, p);
      if (on_progress) on_progress(i, p);
    });
    loop_ = nullptr;
    reporter.finish(i, loop.progress(), &result);
    if (result.stop_reason == StopReason::interrupted) stop_ = true;
    session.results.push_back(std::move(result));
  }
}

rpc::awaitable<void> TuneSession::run_scheduled(Evaluator& evaluator, const host::Target& target,
                                                const TuneOptions& tune, SessionResult& session,
                                                SessionReporter& reporter,
                                                const std::function<void(std::size_t, const TuneProgress&)>& on_progress) {
  using Clock = std::chrono::steady_clock;
  TuneOptions per_job = tune;
  per_job.time_budget = std::chrono::seconds(0);  // the session's budget is shared by all jobs
  std::vector<std::unique_ptr<TuningLoop>> loops;
  std::vector<SchedulerTask> tasks;
  // In the final round, each report says the job's place in it and the round's ETA.
  FinalRoundState final_state;
  for (std::size_t i = 0; i < jobs_.size(); ++i) {
    Task task = task_of(jobs_[i], target);
    tasks.push_back({jobs_[i].weight, task.flops(), std::string(task.op->name())});
    reporter.describe(i, reported_job(i, task, per_job));
    loops.push_back(std::make_unique<TuningLoop>(std::move(task), db_, evaluator, per_job));
    loops.back()->on_progress([&on_progress, &reporter, &final_state, i](const TuneProgress& p) {
      if (final_state.tasks == 0 || p.phase == "tuning") {
        reporter.progress(i, p);
        if (on_progress) on_progress(i, p);
        return;
      }
      TuneProgress q = p;
      q.final_task = final_state.position;
      q.final_tasks = final_state.tasks;
      if (final_state.eta) q.eta = final_state.eta();
      reporter.progress(i, q);
      if (on_progress) on_progress(i, q);
    });
  }
  TaskScheduler scheduler(tasks, options_.scheduler);
  auto now = [&tune] { return tune.clock ? tune.clock() : Clock::now(); };
  const Clock::time_point started = now();
  std::optional<Clock::time_point> deadline;
  if (options_.time_budget.count() > 0) deadline = started + options_.time_budget;
  auto out_of_time = [&] { return deadline && now() >= *deadline; };
  session.stop_reason = StopReason::trials;
  std::vector<bool> live(loops.size(), false);
  for (std::size_t i = 0; i < loops.size(); ++i) loops_.push_back(loops[i].get());
  // Start every job: resume its records, measure its default (the baseline of its gain).
  for (std::size_t i = 0; i < loops.size() && !stop_ && !out_of_time(); ++i) {
    loop_ = loops[i].get();
    co_await loops[i]->start();
    live[i] = true;
    scheduler.observe(i, loops[i]->progress().best_seconds, loops[i]->progress().trials);
  }
  for (std::size_t i = 0; i < loops.size(); ++i) {
    if (!live[i]) scheduler.retire(i);
  }
  // The final round's expected time: every started job's minimum passes (a job with
  // nothing measured this session to go by is reckoned at the others' mean).
  auto entry_pass_fallback = [&] {
    Clock::duration sum{};
    long n = 0;
    for (const auto& loop : loops) {
      if (auto t = loop->entry_pass_time()) {
        sum += *t;
        ++n;
      }
    }
    return n > 0 ? sum / n : Clock::duration{};
  };
  auto final_reserve = [&] {
    const Clock::duration fallback = entry_pass_fallback();
    Clock::duration sum{};
    for (std::size_t i = 0; i < loops.size(); ++i) {
      if (live[i]) sum += loops[i]->final_estimate(fallback);
    }
    return sum;
  };
  const Clock::duration reserve_cap = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(static_cast<double>(options_.time_budget.count()) * options_.final_share));
  Clock::duration steps_time{};
  long steps = 0;
  while (!stop_) {
    if (out_of_time()) {
      session.stop_reason = StopReason::time_budget;
      break;
    }
    std::optional<std::size_t> pick = scheduler.next();
    if (!pick) break;
    if (deadline) {
      // Stop while the next step (as long as this job's last, else the mean step) still
      // leaves the final round its time.
      const Clock::duration reserve = std::min(final_reserve(), reserve_cap);
      Clock::duration next = loops[*pick]->last_step();
      if (next == Clock::duration{} && steps > 0) next = steps_time / steps;
      if (now() + reserve + next >= *deadline) {
        session.stop_reason = StopReason::time_budget;
        session.final_reserved = reserve;
        break;
      }
    }
    loop_ = loops[*pick].get();
    const Clock::time_point step_started = now();
    std::optional<TuneProgress> p = co_await loops[*pick]->step();
    steps_time += now() - step_started;
    ++steps;
    if (!p) {
      scheduler.retire(*pick);
      continue;
    }
    scheduler.observe(*pick, p->best_seconds, p->trials);
  }
  if (stop_) session.stop_reason = StopReason::interrupted;

  // ---- the final round: the jobs that matter most (weight x best time) first --------
  // (Not after an interruption: each loop then takes its best recorded.)
  std::vector<std::size_t> order;
  for (std::size_t i = 0; i < loops.size(); ++i) {
    if (live[i]) order.push_back(i);
  }
  auto share = [&](std::size_t i) {
    const double best = loops[i]->progress().best_seconds;
    return std::isfinite(best) ? jobs_[i].weight * best : -1.0;
  };
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return share(a) > share(b); });
  std::vector<Clock::duration> estimate(loops.size());
  const Clock::duration fallback = entry_pass_fallback();
  for (std::size_t i : order) estimate[i] = loops[i]->final_estimate(fallback);
  const Clock::time_point final_started = now();
  Clock::time_point task_started = final_started;
  Clock::duration estimated_done{}, took_done{};
  std::size_t current = 0;
  final_state.tasks = order.size();
  final_state.eta = [&]() -> std::optional<Clock::duration> {
    // The estimates of the jobs left, scaled by how the finished ones compared.
    const double scale = estimated_done.count() > 0 && took_done.count() > 0
                             ? std::chrono::duration<double>(took_done) / std::chrono::duration<double>(estimated_done)
                             : 1.0;
    double left = 0;
    for (std::size_t k = current + 1; k < order.size(); ++k) left += std::chrono::duration<double>(estimate[order[k]]).count();
    const double in_current = std::chrono::duration<double>(now() - task_started).count();
    const double current_left =
        std::max(0.0, scale * std::chrono::duration<double>(estimate[order[current]]).count() - in_current);
    Clock::duration eta =
        std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(scale * left + current_left));
    if (deadline) eta = std::min(eta, std::max(Clock::duration{}, *deadline - now()));
    return eta;
  };
  std::vector<std::optional<TuneResult>> results(loops.size());
  for (std::size_t k = 0; k < order.size(); ++k) {
    const std::size_t i = order[k];
    current = k;
    final_state.position = k + 1;
    task_started = now();
    FinalLimit limit;
    if (deadline) {
      // Passes beyond the minimum leave the later jobs their minimum passes.
      Clock::duration later{};
      for (std::size_t j = k + 1; j < order.size(); ++j) later += estimate[order[j]];
      limit.deadline = *deadline;
      limit.extra_deadline = *deadline - later;
      limit.entry_pass = fallback;
    }
    loop_ = loops[i].get();
    TuneResult result = co_await loops[i]->finish(limit);
    if (result.passes > 0) {  // (the ETA's scale: the jobs whose final round ran)
      took_done += now() - task_started;
      estimated_done += estimate[i];
    }
    if (result.final_cut == FinalCut::skipped) {
      ++session.final_skipped;
    } else if (result.final_cut == FinalCut::fewer_passes) {
      ++session.final_fewer;
    } else if (result.passes > 0) {
      ++session.final_full;
    }
    reporter.finish(i, loops[i]->progress(), &result);
    results[i] = std::move(result);
  }
  session.final_time = now() - final_started;
  log::info("tune", "final round: the jobs re-measured were expected to take ",
            std::chrono::duration<double>(estimated_done).count(), " s and took ",
            std::chrono::duration<double>(took_done).count(), " s; the round took ",
            std::chrono::duration<double>(session.final_time).count(), " s");
  final_state = {};
  for (auto& result : results) {
    if (result) session.results.push_back(std::move(*result));
  }
  loop_ = nullptr;
  loops_.clear();
}

rpc::awaitable<SessionResult> TuneSession::run(std::function<void(std::size_t, const TuneProgress&)> on_progress) {
  SessionResult session;
  if (jobs_.empty() && !options_.make_jobs) co_return session;
  SessionReporter::Sink sink = options_.report;
  if (!sink) {
    sink = [this](const rpc::SessionReport& report) {
      if (devices_open_) devices_.report(report);
    };
  }
  SessionReporter reporter(options_.report_id.empty() ? new_report_session_id() : options_.report_id,
                           std::move(sink));
  if (options_.target && options_.tune.zero_shot && options_.tune.zero_shot_verify == 0) {
    // Nothing will be measured and the target is known: no pool, no device.
    if (options_.make_jobs) jobs_ = options_.make_jobs(*options_.target);
    NoDeviceEvaluator evaluator;
    TuneOptions tune = options_.tune;
    tune.device_key = options_.pool.key;
    try {
      if (options_.scheduled) {
        co_await run_scheduled(evaluator, *options_.target, tune, session, reporter, on_progress);
      } else {
        co_await run_in_turn(evaluator, *options_.target, tune, session, reporter, on_progress);
      }
    } catch (...) {
      report_failure(reporter, std::current_exception(), aborted_);
      loop_ = nullptr;
      loops_.clear();
      throw;
    }
    session.interrupted = stop_;
    co_return session;
  }
  std::exception_ptr failure;
  try {
    co_await devices_.open();
    devices_open_ = true;
    const rpc::DeviceInfo& device = devices_.device();
    host::Target target = options_.choose_target ? options_.choose_target(device) : host::target_for_device(device);
    if (options_.make_jobs) jobs_ = options_.make_jobs(target);
    Evaluator& evaluator = devices_.evaluator();
    TuneOptions tune = options_.tune;
    tune.device_key = options_.pool.key;
    tune.device_class = devices_.device_class(target);
    if (options_.scheduled) {
      co_await run_scheduled(evaluator, target, tune, session, reporter, on_progress);
    } else {
      co_await run_in_turn(evaluator, target, tune, session, reporter, on_progress);
    }
  } catch (...) {
    report_failure(reporter, std::current_exception(), aborted_);
    loop_ = nullptr;
    loops_.clear();
    failure = std::current_exception();
  }
  co_await devices_.close();
  devices_open_ = false;
  if (failure && aborted_) {
    // abort() closed the tracker connection: the measurement in flight throws
    // RpcError(cancelled), a lease request in flight connection_lost. The stop asked for.
    try {
      std::rethrow_exception(failure);
    } catch (const rpc::RpcError&) {
      failure = nullptr;
    } catch (...) {
    }
  }
  if (failure) std::rethrow_exception(failure);
  session.interrupted = stop_;
  session.aborted = aborted_;
  co_return session;
}

}  // namespace kestrel::tuner
