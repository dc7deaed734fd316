// SessionReporter: TuneProgress -> rpc::SessionReport.
#include "kestrel/tuner/session_reporter.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <exception>
#include <limits>

#include "kestrel/base/log.h"

namespace kestrel::tuner {
namespace {

std::uint32_t clamp32(std::size_t n) {
  return static_cast<std::uint32_t>(std::min<std::size_t>(n, std::numeric_limits<std::uint32_t>::max()));
}

double finite(double x) { return std::isfinite(x) ? x : 0; }

}  // namespace

SessionReporter::SessionReporter(std::string session_id, Sink sink)
    : session_id_(std::move(session_id)), sink_(std::move(sink)) {}

SessionReporter::JobState& SessionReporter::job_state(std::size_t job) {
  if (jobs_.size() <= job) jobs_.resize(job + 1);
  return jobs_[job];
}

void SessionReporter::describe(std::size_t job, ReportedJob info) {
  JobState& state = job_state(job);
  state.info = std::move(info);
  state.described = true;
}

void SessionReporter::progress(std::size_t job, const TuneProgress& progress) {
  send(job, progress, false, "", nullptr, {});
}

void SessionReporter::finish(std::size_t job, const TuneProgress& progress) { finish(job, progress, nullptr); }

void SessionReporter::finish(std::size_t job, const TuneProgress& progress, const TuneResult* result) {
  const bool interrupted = result && result->stop_reason == StopReason::interrupted;
  send(job, progress, true, interrupted ? "interrupted" : "done", result, {});
}

void SessionReporter::fail(std::size_t job, const TuneProgress& progress, const std::string& message) {
  send(job, progress, true, "failed", nullptr, message);
}

void SessionReporter::fail_unfinished(const std::string& message, bool interrupted) {
  const char* outcome = interrupted ? "interrupted" : "failed";
  bool in_flight_found = false;
  for (std::size_t job = 0; job < jobs_.size(); ++job) {
    JobState& state = jobs_[job];
    if (state.finished) continue;
    if (state.last) {
      const TuneProgress last = *state.last;
      send(job, last, true, outcome, nullptr, message);
    } else if (state.described && !in_flight_found) {
      in_flight_found = true;
      send(job, TuneProgress{}, true, outcome, nullptr, message);
    }
  }
  // The session is over: nothing more is sent for any job.
  for (JobState& state : jobs_) state.finished = true;
}

void SessionReporter::send(std::size_t job, const TuneProgress& progress, bool finished, const char* outcome,
                           const TuneResult* result, const std::string& message) {
  if (!sink_) return;
  JobState& state = job_state(job);
  if (state.finished) return;
  if (finished) state.finished = true;
  state.last = progress;
  const ReportedJob& info = state.info;
  rpc::SessionReport r;
  r.session_id = session_id_;
  r.job = clamp32(job);
  r.label = info.label;
  r.op = info.op;
  r.workload = info.workload;
  r.strategy = info.strategy;
  r.target = info.target;
  r.key = info.key;
  r.phase = finished ? "done" : (progress.phase.empty() ? "tuning" : progress.phase);
  r.trials = clamp32(progress.trials);
  r.budget = clamp32(progress.total);
  r.this_session = clamp32(progress.this_session);
  // The wire carries GFLOP/s and the configuration's text.
  r.best_gflops = finite(progress.best_gflops());
  r.default_gflops = finite(progress.default_gflops());
  r.best_config = progress.best_config ? ops::format_config(*progress.best_config) : std::string();
  r.elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(progress.elapsed);
  for (const auto& [status, count] : progress.statuses) r.failures.emplace_back(status, clamp32(count));
  r.finished = finished;
  if (!finished && progress.eta) {
    r.eta = std::max(std::chrono::duration_cast<std::chrono::milliseconds>(*progress.eta), std::chrono::milliseconds(0));
  }
  if (finished) {
    r.outcome = outcome;
    r.message = message;
  }
  if (result) {
    if (const FinalEntry* recommendation = result->recommendation()) {
      r.final_gflops = finite(recommendation->gflops(result->flops));
      r.final_speedup = finite(recommendation->speedup);
      r.final_speedup_low = finite(recommendation->speedup_low);
      r.final_speedup_high = finite(recommendation->speedup_high);
    }
    r.verdict = result->verdict;
  }
  try {
    sink_(r);
  } catch (const std::exception& e) {
    log::debug("tune", "session report not sent: ", e.what());
  }
}

std::string new_report_session_id() {
  static std::atomic<unsigned> sessions{0};
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
  std::string name = host[0] ? host : "localhost";
  return name + ":" + std::to_string(::getpid()) + ":" + std::to_string(++sessions);
}

}  // namespace kestrel::tuner
