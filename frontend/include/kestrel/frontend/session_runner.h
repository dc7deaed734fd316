// Running a tuning session (tuner::TuneSession) to its end on the calling thread, for
// every front end: `kestrel tune`, `kestrel bench --tune-trials`, `kestrel datagen` and
// Python's kestrel.tune. The runner owns the io_context and the session; the front end
// brings what differs: where progress goes (a bar on stderr, a Python callback) and what
// watches for a stop (SIGINT/SIGTERM in a command, Python's Ctrl-C handler), which acts
// through SessionControl.
#pragma once

#include <cstddef>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "kestrel/records/records.h"
#include "kestrel/rpc/asio.h"
#include "kestrel/tuner/session.h"

namespace kestrel::frontend {

// SIGTERM ended the session: the measurement in flight was abandoned, the leases were
// released, every record committed before is kept. Commands exit with status 143.
struct SessionTerminated : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// What a stop watcher may do to the running session. Called on the runner's thread (from
// handlers of its io_context).
class SessionControl {
 public:
  SessionControl(asio::io_context& io, tuner::TuneSession& session, const records::RecordStore& db)
      : io_(io), session_(session), db_(db) {}

  // Stops now: a wait for a device or a result ends, the batch in flight is dropped,
  // every record is kept, no further job is tuned. False when nothing is being tuned yet
  // (the pool is still being leased): nothing to stop gracefully.
  bool request_stop() { return session_.request_stop(); }
  // Stops at once (SIGTERM): the leases are released, run_session throws
  // SessionTerminated after the session unwound. False when no pool is leased yet.
  bool terminate() {
    if (!session_.abort()) return false;
    terminated_ = true;
    return true;
  }
  // Aborts without the SessionTerminated that terminate() leads to (a second Ctrl-C).
  bool abort() { return session_.abort(); }

  asio::io_context& io() { return io_; }
  const std::string& records_location() const { return db_.location(); }
  bool terminated() const { return terminated_; }

 private:
  asio::io_context& io_;
  tuner::TuneSession& session_;
  const records::RecordStore& db_;
  bool terminated_ = false;
};

// Gets each job's progress, with every job of the session (known once a device is
// leased when the session makes its jobs from the target).
using SessionProgress =
    std::function<void(const std::vector<tuner::TuneJob>& jobs, std::size_t job, const tuner::TuneProgress& progress)>;
// Starts the front end's waits for a stop on control.io() (a signal set, a timer) and
// returns what cancels them; the runner calls it when the session has ended, so that the
// io_context runs out. What the waits use must outlive the io_context's run (the caller
// owns both: declare the io_context first).
using StopWatcher = std::function<std::function<void()>(SessionControl& control)>;

// Runs the session to its end on `io` (fresh, run on the calling thread). Throws what
// tuner::TuneSession::run throws, and SessionTerminated when the watcher terminated it.
tuner::SessionResult run_session(asio::io_context& io, const std::vector<tuner::TuneJob>& jobs, records::RecordStore& db,
                                 const tuner::SessionOptions& options, const SessionProgress& on_progress,
                                 const StopWatcher& watch_for_stop);

}  // namespace kestrel::frontend
