// A tuning session in a command: the progress bar on stderr and the signals (Ctrl-C:
// stop now; again to quit at once; SIGTERM: stop now, leases released) around
// frontend::run_session, which runs the tuner::TuneSession.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

#include "kestrel/records/records.h"
#include "kestrel/tuner/session.h"

namespace kestrel::tools {

struct TuneSessionOptions {
  tuner::SessionOptions session;
  bool quiet = false;                    // no progress output on stderr
  std::string program = "kestrel tune";  // prefix of messages on stderr
};

// Runs the session to its end (frontend::run_session) with a progress view on stderr.
// Ctrl-C (SIGINT) stops now, dropping the batch in flight; SIGTERM stops now
// (TuneSession::abort) and throws frontend::SessionTerminated once the leases are
// released. A second signal (or one before any device is leased) exits the process at
// once with status 130 (SIGINT) or 143 (SIGTERM). Otherwise throws what
// tuner::TuneSession::run throws.
tuner::SessionResult run_tune_session(const std::vector<tuner::TuneJob>& jobs, records::RecordStore& db,
                                      const TuneSessionOptions& options);

}  // namespace kestrel::tools
