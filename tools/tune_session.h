// The wiring of a tuning session in a command: an io_context, Ctrl-C (stop after the
// batch in flight; again to quit at once) and the progress bar on stderr. The session
// itself is tuner::TuneSession.
#pragma once

#include <string>
#include <vector>

#include "kestrel/tuner/records.h"
#include "kestrel/tuner/session.h"

namespace kestrel::tools {

struct TuneSessionOptions {
  tuner::SessionOptions session;
  bool quiet = false;                    // no progress output on stderr
  std::string program = "kestrel tune";  // prefix of messages on stderr
};

// Runs the session to its end. Throws what tuner::TuneSession::run throws; a second
// Ctrl-C (or one before any job started) exits the process with status 130.
tuner::SessionResult run_tune_session(const std::vector<tuner::TuneJob>& jobs, tuner::RecordStore& db,
                                      const TuneSessionOptions& options);

}  // namespace kestrel::tools
