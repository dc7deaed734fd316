// A tuning session's progress as the tracker's dashboard sees it: each job's cumulative
// counts and its best-so-far point, one rpc::SessionReport after each batch and a last
// one (finished) when the job is done. The reports go to a sink (the pool's tracker
// connection: host::MeasureClient::report), fire and forget.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "kestrel/rpc/session_report.h"
#include "kestrel/tuner/tuning_loop.h"

namespace kestrel::tuner {

// What a report says about a job besides its progress.
struct ReportedJob {
  std::string label;
  std::string op;
  std::string workload;
  std::string strategy;
  std::string target;
  std::string key;
};

class SessionReporter {
 public:
  using Sink = std::function<void(const rpc::SessionReport&)>;

  // `sink` may be empty (nothing is sent). What it throws is swallowed: a report never
  // fails a session.
  SessionReporter(std::string session_id, Sink sink);

  // Names job `job` (before its first progress); a job never described is reported with
  // empty names.
  void describe(std::size_t job, ReportedJob info);
  // A report of the job's progress (phase as the progress says; not finished).
  void progress(std::size_t job, const TuneProgress& progress);
  // The job's last report: phase "done", finished. Later calls for the job send nothing.
  void finish(std::size_t job, const TuneProgress& progress);

  const std::string& session_id() const { return session_id_; }

 private:
  void send(std::size_t job, const TuneProgress& progress, bool finished);

  std::string session_id_;
  Sink sink_;
  std::vector<ReportedJob> jobs_;
  std::vector<bool> finished_;
};

// A session id unique across the processes reporting to one tracker:
// "<hostname>:<pid>:<n>", n counting this process's sessions from 1.
std::string new_report_session_id();

}  // namespace kestrel::tuner
