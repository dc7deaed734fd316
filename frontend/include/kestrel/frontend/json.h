// One JSON form per result type, for every front end: what `kestrel tune --json` prints
// and what Python's kestrel.tune returns and its callback gets (converted to Python
// objects, with configurations as dicts beside their text).
#pragma once

#include <nlohmann/json.hpp>

#include "kestrel/tuner/tuning_loop.h"

namespace kestrel::frontend {

// The results carry seconds and typed configurations and statuses; these forms carry
// GFLOP/s (tuner::to_gflops with the task's flops) and the text of configurations
// (ops::format_config) and statuses (kernel::to_string).

// config (text), median_s, gflops (at `flops` per call: the task's, TuneResult::flops),
// status (text), spread, noisy, is_default, implementation, recommended; speedup,
// speedup_low, speedup_high (against the default) when known.
nlohmann::json to_json(const tuner::FinalEntry& entry, double flops);
// session, op, workload, target, traits, trials, this_session, resumed,
// transfer_records, statuses, stop_reason, default_gflops, default_is_best, final,
// best_recorded, best (the recommendation: the final round's choice, else the best
// recorded; null when nothing ran), verdict, passes, zero_shot, prior, vendors.
nlohmann::json to_json(const tuner::TuneResult& result);
// trials, total, this_session, failures, statuses, best_gflops, default_gflops,
// best_config (text), elapsed_s, eta_s (null when unknown), phase.
nlohmann::json to_json(const tuner::TuneProgress& progress);

}  // namespace kestrel::frontend
