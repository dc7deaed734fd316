// TuneSession: one leased pool; the jobs in turn, or interleaved by a TaskScheduler.
#include "kestrel/tuner/session.h"

#include <memory>
#include <stdexcept>

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
  TuneOptions per_job = tune;
  per_job.time_budget = std::chrono::seconds(0);  // the session's budget is shared by all jobs
  std::vector<std::unique_ptr<TuningLoop>> loops;
  std::vector<SchedulerTask> tasks;
  for (std::size_t i = 0; i < jobs_.size(); ++i) {
    Task task = task_of(jobs_[i], target);
    tasks.push_back({jobs_[i].weight, task.flops(), std::string(task.op->name())});
    reporter.describe(i, reported_job(i, task, per_job));
    loops.push_back(std::make_unique<TuningLoop>(std::move(task), db_, evaluator, per_job));
    loops.back()->on_progress([&on_progress, &reporter, i](const TuneProgress& p) {
      reporter.progress(i, p);
      if (on_progress) on_progress(i, p);
    });
  }
  TaskScheduler scheduler(tasks, options_.scheduler);
  const auto started = std::chrono::steady_clock::now();
  auto out_of_time = [&] {
    return options_.time_budget.count() > 0 && std::chrono::steady_clock::now() - started >= options_.time_budget;
  };
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
  while (!stop_) {
    if (out_of_time()) {
      session.stop_reason = StopReason::time_budget;
      break;
    }
    std::optional<std::size_t> pick = scheduler.next();
    if (!pick) break;
    loop_ = loops[*pick].get();
    std::optional<TuneProgress> p = co_await loops[*pick]->step();
    if (!p) {
      scheduler.retire(*pick);
      continue;
    }
    scheduler.observe(*pick, p->best_seconds, p->trials);
  }
  if (stop_) session.stop_reason = StopReason::interrupted;
  // Each job's final round (not after an interruption: its loop then takes the best recorded).
  for (std::size_t i = 0; i < loops.size(); ++i) {
    if (!live[i]) continue;
    loop_ = loops[i].get();
    session.results.push_back(co_await loops[i]->finish());
    reporter.finish(i, loops[i]->progress(), &session.results.back());
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
