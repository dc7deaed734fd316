// One JSON form per result type, for every front end: what `kestrel tune --json` prints
// and what Python's kestrel.tune returns and its callback gets (converted to Python
// objects, with configurations as dicts beside their text).
#pragma once

#include <nlohmann/json.hpp>

#include "kestrel/tuner/tuning_loop.h"

namespace kestrel::frontend {

// config (text), median_s, gflops, status, spread, noisy, is_default, implementation,
// recommended; speedup, speedup_low, speedup_high (against the default) when known.
nlohmann::json to_json(const tuner::FinalEntry& entry);
// session, op, workload, target, traits, trials, this_session, resumed,
// transfer_records, statuses, stop_reason, default_gflops, default_is_best, final,
// best_recorded, best (the recommendation: the final round's choice, else the best
// recorded; null when nothing ran), verdict, passes, zero_shot, prior, vendors.
nlohmann::json to_json(const tuner::TuneResult& result);
// trials, total, this_session, failures, statuses, best_gflops, default_gflops,
// best_config (text), elapsed_s, eta_s (null when unknown), phase.
nlohmann::json to_json(const tuner::TuneProgress& progress);

}  // namespace kestrel::frontend
