// A tuning session's progress as the tracker's dashboard sees it: each job's cumulative
// counts, its best-so-far point and its ETA, one rpc::SessionReport after each batch and
// a last one (finished) when the job ends: with its result (the final round's
// re-measured recommendation, speed-up and verdict) and its outcome ("done",
// "interrupted", or "failed" with the error). The reports go to a sink (the pool's
// tracker connection: host::MeasureClient::report), fire and forget. The costs arrive as
// seconds (TuneProgress, TuneResult) and leave as the wire's GFLOP/s (to_gflops with the
// task's flops), configurations as their text.
#pragma once

#include <cstddef>
#include <functional>
#include <optional>
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
  // A report of the job's progress (phase as the progress says, its ETA; not finished).
  void progress(std::size_t job, const TuneProgress& progress);
  // The job's last report: phase "done", finished, outcome "done". Later calls for the
  // job send nothing.
  void finish(std::size_t job, const TuneProgress& progress);
  // The same with the job's result (null: none): the recommendation's GFLOP/s
  // (TuneResult::recommendation(), re-measured in the final round when there was one),
  // its speed-up over the default with the 95% interval and the verdict; outcome
  // "interrupted" when the result's stop_reason is "interrupted", else "done".
  void finish(std::size_t job, const TuneProgress& progress, const TuneResult* result);
  // The job's last report when it ended with an exception: phase "done", finished,
  // outcome "failed", `message` saying why.
  void fail(std::size_t job, const TuneProgress& progress, const std::string& message);
  // A session that ended with an exception: fail() each job that reported and did not
  // finish, with the progress it last reported, and the first described job that never
  // reported (the one in flight when it failed before its first report). `interrupted`
  // (abort() ended the session): outcome "interrupted" instead of "failed". Nothing is
  // sent for any job afterwards.
  void fail_unfinished(const std::string& message, bool interrupted = false);

  const std::string& session_id() const { return session_id_; }

 private:
  struct JobState {
    ReportedJob info;
    bool described = false;
    bool finished = false;
    std::optional<TuneProgress> last;  // the progress last reported
  };
  JobState& job_state(std::size_t job);
  // Sends the report of `progress`; `finished` with `outcome`, `result` and `message`.
  void send(std::size_t job, const TuneProgress& progress, bool finished, const char* outcome,
            const TuneResult* result, const std::string& message);

  std::string session_id_;
  Sink sink_;
  std::vector<JobState> jobs_;
};

// A session id unique across the processes reporting to one tracker:
// "<hostname>:<pid>:<n>", n counting this process's sessions from 1.
std::string new_report_session_id();

}  // namespace kestrel::tuner
