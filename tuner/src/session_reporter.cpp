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

void SessionReporter::describe(std::size_t job, ReportedJob info) {
  if (jobs_.size() <= job) {
    jobs_.resize(job + 1);
    finished_.resize(job + 1, false);
  }
  jobs_[job] = std::move(info);
}

void SessionReporter::progress(std::size_t job, const TuneProgress& progress) { send(job, progress, false); }

void SessionReporter::finish(std::size_t job, const TuneProgress& progress) { send(job, progress, true); }

void SessionReporter::send(std::size_t job, const TuneProgress& progress, bool finished) {
  if (!sink_) return;
  if (jobs_.size() <= job) describe(job, {});
  if (finished_[job]) return;
  if (finished) finished_[job] = true;
  const ReportedJob& info = jobs_[job];
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
  r.best_gflops = finite(progress.best_gflops);
  r.default_gflops = finite(progress.default_gflops);
  r.best_config = progress.best_config;
  r.elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(progress.elapsed);
  for (const auto& [status, count] : progress.statuses) r.failures.emplace_back(status, clamp32(count));
  r.finished = finished;
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
