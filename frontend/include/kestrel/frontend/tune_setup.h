// How a tuning session is set up from what a user asked for, shared by `kestrel tune`
// and Python's kestrel.tune: a model's tasks as the jobs, a cost model as prior or for
// zero-shot picks, and the records the session writes to.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kestrel/frontend/options.h"
#include "kestrel/model/buckets.h"
#include "kestrel/model/graph.h"
#include "kestrel/ops/op.h"
#include "kestrel/records/records.h"
#include "kestrel/tuner/cross_model.h"
#include "kestrel/tuner/session.h"

namespace kestrel::frontend {

// The --block value: 0 (the target's floats per vector), 4, 8 or 16; UsageError naming
// `option` otherwise.
std::int64_t checked_block(const std::string& option, std::int64_t block);

// A model's tasks, tuned as `kestrel tune --model` does: the jobs are made for the leased
// device's target (its vector width decides the tasks), interleaved by the scheduler
// (each to options.tune.trials, the session to options.time_budget). Fails now, before a
// device is leased, when the model has no task to tune (model::ModelError). `on_jobs`
// hears the jobs once they are made. The model is shared with the session. `winograd` as
// model::PlanOptions::winograd.
void tune_model_tasks(tuner::SessionOptions& options, std::shared_ptr<const model::Model> model,
                      std::vector<model::Binding> buckets, std::int64_t block, const ops::Registry& registry,
                      std::function<void(const std::vector<tuner::TuneJob>&, const host::Target&)> on_jobs = {},
                      bool winograd = true);

// The help of the model commands' --no-winograd (tasks, tune, export, run).
inline constexpr const char* kNoWinogradHelp =
    "run 3x3 stride-1 convolutions on the direct kernel (conv2d_nchwc) instead of Winograd's (conv2d_winograd), "
    "whose fp32 results differ from the direct sum in the last bits; tune, export and run plan the same tasks only "
    "when all or none of them are given it";

// A cost model used by a session: as the search's prior, or to pick without searching.
struct CostModelUse {
  std::shared_ptr<const tuner::CrossModel> model;
  std::string path;             // for messages
  bool zero_shot = false;       // pick instead of searching
  std::size_t zero_shot_verify = 0;  // with zero_shot: measure the top N and the default once
};

// The cost model Kestrel ships (share/cost-model/kestrel.kcm in the source tree): the file
// $KESTREL_COST_MODEL names, else share/kestrel/cost-model.kcm beside the directory of the
// running executable (an installed layout), else the source tree's. Empty when none of
// them exists.
std::string shipped_cost_model_path();
// The places shipped_cost_model_path() looks, for messages.
std::string shipped_cost_model_places();

// The cost model a command uses: `file` when given, else with `zero_shot` the shipped one
// (tuner::ModelFileError saying where it looked when there is none), else none; loaded
// (tuner::ModelFileError when it is missing or not a cost model). `zero_shot_option` and
// `file_option` are the options as the caller spells them ("--zero-shot", "cost_model="),
// for the message.
CostModelUse load_cost_model(const std::string& file, bool zero_shot, const std::string& zero_shot_option,
                             const std::string& file_option);

// The cost-model options (cost_model_option_specs): the file loaded (tuner::ModelFileError
// when it is missing or not a cost model); --zero-shot without --cost-model uses the
// shipped model (tuner::ModelFileError when there is none). UsageError for
// --zero-shot-verify without --zero-shot. A session of a model's tasks gives each its own
// pick, as one of a set's workloads.
CostModelUse cost_model_use(OptionSource& source);

// Sets the session up to use `use`: the prior (or the zero-shot pick) on options.tune,
// and for a pick that measures nothing, the target when it is known without a device
// (`target` names it, or it is this machine's: no tracker and target auto), so that no
// pool starts. `single_op`: the session tunes one workload of this op (looked up again in
// `registry` for the target's backend); then a cost model without a model for its op and
// the target's class is an error (tuner::ModelFileError naming the file), checked when
// the target is known. Sets options.choose_target (the target policy, then that check).
void use_cost_model(tuner::SessionOptions& options, const CostModelUse& use, const TargetPolicy& target,
                    const ops::Op* single_op, const ops::Registry& registry);

// Whether a session with `use` measures anything (a zero-shot pick without
// verification does not).
bool measures(const CostModelUse& use);

// The records a session writes to: `location` opened for writing when it measures; for a
// pick that measures nothing, read-only when it exists, else an empty store in memory
// (nothing is created).
std::unique_ptr<records::RecordStore> open_session_records(const std::string& location, bool measures);

}  // namespace kestrel::frontend
