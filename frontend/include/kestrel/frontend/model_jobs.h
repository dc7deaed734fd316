// Tuning jobs from an ONNX model's tasks (kestrel tune --model, kestrel datagen --model).
#pragma once

#include <cstdint>
#include <vector>

#include "kestrel/host/target.h"
#include "kestrel/model/buckets.h"
#include "kestrel/model/graph.h"
#include "kestrel/ops/op.h"
#include "kestrel/tuner/session.h"

namespace kestrel::frontend {

// The tasks of a model at every bucket, for `target`: one job per distinct task,
// weighted by its occurrences (the most of any bucket). `block` 0: the target's floats
// per vector; `winograd` as model::PlanOptions::winograd. Throws model::ModelError when
// the model has no operator Kestrel tunes.
std::vector<tuner::TuneJob> model_jobs(const model::Model& model, const std::vector<model::Binding>& buckets,
                                       std::int64_t block, const ops::Registry& registry, const host::Target& target,
                                       bool winograd = true);

}  // namespace kestrel::frontend
