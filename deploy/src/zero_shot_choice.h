// The zero-shot fallback of records::ChoiceRules, shared by `kestrel export` and the
// kernels `kestrel run` compiles: a task without a record gets the cost model's pick.
#pragma once

#include <optional>
#include <set>
#include <string>
#include <vector>

#include "kestrel/host/target.h"
#include "kestrel/ops/op.h"
#include "kestrel/tuner/cross_model.h"
#include "kestrel/tuner/space.h"
#include "kestrel/tuner/zero_shot.h"

namespace kestrel::deploy::detail {

// The cost model's first pick for `op` at `params` on `target`, or nothing (the op's
// default stands) with a note: once per op in `unmodelled` when the model has none for
// it, or for a space without a valid point to score.
inline std::optional<ops::Config> zero_shot_choice(const tuner::CrossModel& model, const ops::Op& op,
                                                   const ops::Params& params, const host::Target& target,
                                                   std::set<std::string>& unmodelled, std::vector<std::string>& notes) {
  const std::string op_name(op.name());
  if (std::string missing = tuner::missing_model(model, op_name, target); !missing.empty()) {
    if (unmodelled.insert(op_name).second) {
      notes.push_back(op_name + ": " + missing + "; its tasks without a record are at the op's default");
    }
    return std::nullopt;
  }
  const tuner::Space space(op, params, target.traits);
  try {
    const tuner::ZeroShotPick pick = tuner::zero_shot_pick(model, space, target);
    return space.config(pick.points.front());
  } catch (const std::invalid_argument& e) {  // no valid point to score
    notes.push_back(op_name + " " + ops::format_params(params) + ": " + e.what() + "; at the op's default");
    return std::nullopt;
  }
}

}  // namespace kestrel::deploy::detail
