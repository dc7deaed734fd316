// One tuning session over a list of workloads, shared by `kestrel tune` (one workload
// or a --workloads set) and `kestrel bench --tune-trials`: leases the devices once
// (or starts the embedded local pool), tunes each workload in turn into one records
// database, and stops cleanly on Ctrl-C.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "args.h"
#include "kestrel/host/target.h"
#include "kestrel/ops/op.h"
#include "kestrel/tuner/records.h"
#include "kestrel/tuner/tuning_loop.h"
#include "measure_args.h"

namespace kestrel::tools {

struct TuneJob {
  std::string label;       // shown in progress lines; may be empty
  const ops::Op* op = nullptr;
  ops::Params params;
};

struct TuneSessionOptions {
  PoolChoice pool;
  unsigned devices = 1;
  unsigned compile_threads = 0;
  std::chrono::milliseconds reconnect_window{120'000};
  tuner::TuneOptions tune;
  bool quiet = false;  // no progress output on stderr
  // Picks the compile target from the leased device (see resolve_target).
  const Args* target_args = nullptr;
  // Where each job's op is looked up again for the target's backend (a GPU target tunes
  // the op's GPU variant, with its own knobs); null: the jobs' ops as given.
  const ops::Registry* registry = nullptr;
  std::string program = "kestrel tune";  // prefix of messages on stderr
};

struct TuneSessionResult {
  std::vector<tuner::TuneResult> results;  // one per job tuned, in order
  bool interrupted = false;                // Ctrl-C: the remaining jobs were not tuned
};

// Tunes the jobs in turn. Throws what the tracker client, the compiler or the tuning
// loop throw (rpc errors, ops::OpError, tuner::RecordsError); a second Ctrl-C exits the
// process with status 130.
TuneSessionResult run_tune_session(const std::vector<TuneJob>& jobs, tuner::RecordStore& db,
                                   const TuneSessionOptions& options);

}  // namespace kestrel::tools
