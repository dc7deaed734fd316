// The tuning session's wiring in `kestrel tune` and `kestrel bench --tune-trials`: Ctrl-C
// and the progress bar.
#include "tune_session.h"

#include <unistd.h>

#include <cmath>
#include <csignal>
#include <iomanip>
#include <iostream>
#include <optional>
#include <sstream>

#include "kestrel/frontend/errors.h"
#include "kestrel/frontend/session_runner.h"


namespace kestrel::tools {
namespace {

std::string duration_text(std::chrono::steady_clock::duration d) {
  auto s = std::chrono::duration_cast<std::chrono::seconds>(d).count();
  std::ostringstream out;
  if (s >= 3600) out << s / 3600 << "h" << std::setw(2) << std::setfill('0') << (s % 3600) / 60 << "m";
  else if (s >= 60) out << s / 60 << "m" << std::setw(2) << std::setfill('0') << s % 60 << "s";
  else out << s << "s";
  return out.str();
}

// Progress: a bar redrawn in place on a terminal, plain log lines otherwise.
class ProgressView {
 public:
  ProgressView(bool quiet, std::string prefix)
      : tty_(::isatty(STDERR_FILENO) == 1), quiet_(quiet), prefix_(std::move(prefix)) {}

  // `overall`: the time left for every job of the session, shown when there are several.
  void update(const tuner::TuneProgress& p, std::optional<std::chrono::steady_clock::duration> overall = {}) {
    if (quiet_) return;
    std::ostringstream line;
    std::size_t width = 24;
    std::size_t filled = p.total ? std::min(width, p.trials * width / p.total) : 0;
    line << prefix_ << "[" << std::string(filled, '#') << std::string(width - filled, '.') << "] " << p.trials << "/"
         << p.total << " trials";
    line << std::fixed << std::setprecision(1) << " | best " << p.best_gflops() << " GFLOP/s";
    if (std::isfinite(p.default_seconds) && std::isfinite(p.best_seconds)) {
      line << std::setprecision(2) << " (" << p.default_seconds / p.best_seconds << "x default)";
    }
    line << " | " << p.failures << " failed | " << duration_text(p.elapsed);
    if (p.eta) line << " | ETA " << duration_text(*p.eta);
    if (overall) line << " | overall ETA " << duration_text(*overall);
    if (p.phase == "final") line << " | re-measuring the best";
    if (tty_) {
      std::cerr << "\r\033[K" << line.str() << std::flush;
      if (p.phase == "done") std::cerr << "\n";
    } else if (p.trials != last_trials_ || p.phase != last_phase_) {
      std::cerr << "tune: " << line.str() << "\n";
    }
    last_trials_ = p.trials;
    last_phase_ = p.phase;
  }

 private:
  bool tty_;
  bool quiet_;
  std::string prefix_;
  std::size_t last_trials_ = static_cast<std::size_t>(-1);
  std::string last_phase_;
};

// The time left for a session of several jobs tuned in turn (kestrel datagen's workloads):
// the trials left at this session's pace so far, a job not started yet counted at the
// current job's trial budget (it may hold trials of earlier runs: then it ends sooner),
// each job's time capped by the per-job time budget.
class OverallEta {
 public:
  explicit OverallEta(std::chrono::seconds per_job_budget)
      : budget_(per_job_budget), started_(std::chrono::steady_clock::now()) {}

  // Returns nothing for a single job (its own ETA says it all) or before any measurement.
  std::optional<std::chrono::steady_clock::duration> update(std::size_t jobs, std::size_t job,
                                                             const tuner::TuneProgress& p) {
    if (latest_.size() != jobs) latest_.assign(jobs, std::nullopt);
    latest_[job] = p;
    std::size_t measured = 0;
    for (const auto& q : latest_) measured += q ? q->this_session : 0;
    if (jobs < 2 || measured == 0) return std::nullopt;
    const auto per_trial = (std::chrono::steady_clock::now() - started_) / static_cast<long>(measured);
    std::chrono::steady_clock::duration left{};
    for (std::size_t i = 0; i < jobs; ++i) {
      const auto& q = latest_[i];
      if (q && q->phase == "done") continue;
      std::chrono::steady_clock::duration time{};
      if (i == job && q->eta) {
        time = *q->eta;
      } else {
        const std::size_t total = q ? q->total : p.total, trials = q ? std::min(q->trials, total) : 0;
        time = per_trial * static_cast<long>(total - trials);
      }
      if (budget_.count() > 0) {
        const auto elapsed = q ? q->elapsed : std::chrono::steady_clock::duration{};
        time = std::min(time, std::max<std::chrono::steady_clock::duration>(budget_ - elapsed, {}));
      }
      left += time;
    }
    return left;
  }

 private:
  std::chrono::seconds budget_;
  std::chrono::steady_clock::time_point started_;
  std::vector<std::optional<tuner::TuneProgress>> latest_;
};

// One view for a whole model's scheduled session: trials over all tasks, tasks started,
// and the latency of the tuned part estimated from every task's best (occurrences x time
// per call) beside the same sum for the defaults.
class ModelProgressView {
 public:
  ModelProgressView(bool quiet, std::chrono::seconds budget)
      : tty_(::isatty(STDERR_FILENO) == 1), quiet_(quiet), budget_(budget), started_(std::chrono::steady_clock::now()) {}

  void update(const std::vector<tuner::TuneJob>& jobs, std::size_t job, const tuner::TuneProgress& p) {
    if (quiet_) return;
    if (latest_.size() != jobs.size()) latest_.assign(jobs.size(), {});
    latest_[job] = p;
    if (p.final_tasks > 0) {
      final_round(jobs, job, p);
      return;
    }
    std::size_t trials = 0, session = 0, started = 0;
    double best_s = 0, default_s = 0;
    bool complete = true;
    for (std::size_t i = 0; i < jobs.size(); ++i) {
      const auto& q = latest_[i];
      trials += q.trials;
      session += q.this_session;
      if (q.trials > 0) ++started;
      if (std::isfinite(q.best_seconds) && std::isfinite(q.default_seconds)) {
        best_s += jobs[i].weight * q.best_seconds;
        default_s += jobs[i].weight * q.default_seconds;
      } else {
        complete = false;
      }
    }
    auto elapsed = std::chrono::steady_clock::now() - started_;
    std::ostringstream line;
    line << "model: " << started << "/" << jobs.size() << " tasks | " << trials << " trials (" << session
         << " this session)";
    if (best_s > 0) {
      line << std::fixed << std::setprecision(2) << " | est. " << best_s * 1e3 << " ms";
      if (!complete) line << " of the tasks so far";
      line << " (" << default_s / best_s << "x the defaults)";
    }
    line << " | " << duration_text(elapsed);
    if (budget_.count() > 0 && elapsed < budget_) line << " | " << duration_text(budget_ - elapsed) << " left";
    line << " | " << (jobs[job].label.empty() ? std::string(jobs[job].op->name()) : jobs[job].label);
    if (p.phase == "final") line << ": re-measuring the best";
    auto now = std::chrono::steady_clock::now();
    if (tty_) {
      std::cerr << "\r\033[K" << line.str() << std::flush;
    } else if (now - last_line_ > std::chrono::seconds(5) || (p.phase != last_phase_ && p.phase == "done")) {
      std::cerr << "tune: " << line.str() << "\n";
      last_line_ = now;
    }
    last_phase_ = p.phase;
  }
  void done() {
    if (!quiet_ && tty_ && !final_started_) std::cerr << "\n";
  }

 private:
  bool tty_;
  bool quiet_;
  std::chrono::seconds budget_;
  std::chrono::steady_clock::time_point started_;
  std::chrono::steady_clock::time_point last_line_{};
  std::string last_phase_;
  std::vector<tuner::TuneProgress> latest_;
  bool final_started_ = false;

  // The final round: a line when it starts, a line per task when its re-measurement ends
  // (its place, verdict, speed-up, passes, or why it was cut), the bar in between on a
  // terminal.
  void final_round(const std::vector<tuner::TuneJob>& jobs, std::size_t job, const tuner::TuneProgress& p) {
    const auto elapsed = std::chrono::steady_clock::now() - started_;
    auto times = [&] {
      std::ostringstream t;
      if (p.eta) t << " | final round ETA " << duration_text(*p.eta);
      t << " | " << duration_text(elapsed);
      if (budget_.count() > 0) {
        if (elapsed < budget_) t << " | " << duration_text(budget_ - elapsed) << " left";
        else t << " | " << duration_text(elapsed - budget_) << " over the budget";
      }
      return t.str();
    };
    if (!final_started_) {
      final_started_ = true;
      if (tty_) std::cerr << "\r\033[K";
      std::cerr << "tune: final round: re-measuring the best of " << p.final_tasks
                << " tasks, the largest share of the model's latency first" << times() << "\n";
    }
    const std::string label = jobs[job].label.empty() ? std::string(jobs[job].op->name()) : jobs[job].label;
    std::ostringstream line;
    line << "final " << p.final_task << "/" << p.final_tasks << " " << label << ": ";
    if (p.phase != "done") {
      line << "re-measuring" << times();
      if (tty_) std::cerr << "\r\033[K" << line.str() << std::flush;
      return;
    }
    auto speedup = [&] {
      std::ostringstream s;
      if (p.speedup > 0) s << std::fixed << std::setprecision(2) << p.speedup << "x the default";
      return s.str();
    };
    if (p.final_cut == tuner::FinalCut::skipped) {
      line << "not re-measured (no time left in the budget): its best recorded stands";
      if (p.speedup > 0) line << ", " << speedup();
    } else if (p.passes == 0) {
      line << "no final round, its best recorded stands";
      if (p.speedup > 0) line << ", " << speedup();
    } else {
      line << (p.verdict.empty() ? "done" : p.verdict);
      if (p.speedup > 0) line << ", " << speedup();
      line << " (" << p.passes << (p.passes == 1 ? " pass" : " passes");
      if (p.final_cut == tuner::FinalCut::fewer_passes) line << ", cut by the time budget";
      line << ")";
    }
    line << times();
    if (tty_) std::cerr << "\r\033[K";
    std::cerr << "tune: " << line.str() << "\n";
  }
};

}  // namespace

tuner::SessionResult run_tune_session(const std::vector<tuner::TuneJob>& jobs, records::RecordStore& db,
                                      const TuneSessionOptions& options) {
  // One view per job, made once the session's jobs are known (make_jobs makes them when
  // the device is leased).
  std::vector<ProgressView> views;
  auto make_views = [&views, &options](const std::vector<tuner::TuneJob>& all) {
    views.clear();
    for (std::size_t i = 0; i < all.size(); ++i) {
      std::string prefix;
      if (all.size() > 1) {
        prefix = "(" + std::to_string(i + 1) + "/" + std::to_string(all.size()) + " " +
                 (all[i].label.empty() ? std::string(all[i].op->name()) : all[i].label) + ") ";
      }
      views.emplace_back(options.quiet, prefix);
    }
  };
  ModelProgressView model_view(options.quiet, options.session.time_budget);
  OverallEta overall(options.session.tune.time_budget);
  auto on_progress = [&](const std::vector<tuner::TuneJob>& all, std::size_t job, const tuner::TuneProgress& p) {
    if (options.session.scheduled) {
      model_view.update(all, job, p);
    } else {
      if (views.size() != all.size()) make_views(all);
      views[job].update(p, overall.update(all.size(), job, p));
    }
  };
  // Ctrl-C: stop now (the batch in flight is dropped, records kept); SIGTERM: stop now and
  // release the devices; a second signal, or one before any device is leased, quits at
  // once. Quitting at once leaves nothing half-written (every record is its own commit),
  // and the tracker ends the leases of a client whose connection closes.
  asio::io_context io;
  std::optional<asio::signal_set> signals;
  std::function<void()> wait_signal;
  int interrupts = 0;
  auto watch = [&](frontend::SessionControl& control) -> std::function<void()> {
    signals.emplace(control.io(), SIGINT, SIGTERM);
    wait_signal = [&] {
      signals->async_wait([&](std::error_code ec, int signo) {
        if (ec) return;
        const bool term = signo == SIGTERM;
        if (++interrupts > 1 || !(term ? control.terminate() : control.request_stop())) {
          std::cerr << "\n" << options.program << ": " << (term ? "terminated" : "interrupted")
                    << "; records so far are in " << control.records_location() << "\n";
          std::_Exit(term ? frontend::kExitTerminated : frontend::kExitInterrupted);
        }
        std::cerr << "\n" << options.program << ": signal " << signo
                  << (term ? ": stopping now and releasing the devices; records are kept\n"
                           : ": stopping now: the batch in flight is dropped (again to quit at once); records are kept\n");
        wait_signal();
      });
    };
    wait_signal();
    return [&signals] { signals->cancel(); };
  };
  tuner::SessionResult result = frontend::run_session(io, jobs, db, options.session, on_progress, watch);
  model_view.done();
  return result;
}

}  // namespace kestrel::tools
