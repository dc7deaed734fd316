// The wiring of a tuning session in a command: an io_context, Ctrl-C (stop after the
// batch in flight; again to quit at once), SIGTERM (stop now, leases released) and the
// progress bar on stderr. The session
// itself is tuner::TuneSession.
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

// SIGTERM ended the session: the measurement in flight was abandoned, the leases were
// released, every record committed before is kept. Commands exit with status 143.
struct SessionTerminated : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Runs the session to its end. Ctrl-C (SIGINT) stops after the batch in flight; SIGTERM
// stops now (TuneSession::abort) and throws SessionTerminated once the leases are
// released. A second signal (or one before any device is leased) exits the process at
// once with status 130 (SIGINT) or 143 (SIGTERM). Otherwise throws what
// tuner::TuneSession::run throws.
tuner::SessionResult run_tune_session(const std::vector<tuner::TuneJob>& jobs, records::RecordStore& db,
                                      const TuneSessionOptions& options);

}  // namespace kestrel::tools
