// Zero-shot configuration picks: the configurations a cross-workload model (cross_model.h)
// ranks first for a workload it has no measurements of, found without measuring anything.
// The search scores a large uniform sample of the valid space (every valid point of a
// space of at most 4 x samples points), the op's default and the model's exemplars (the
// fastest configurations of its training workloads, moved onto this workload's knob
// domains), then runs annealing chains over the model's scores from the best of them, all
// in batched predict calls; a few seconds for spaces of 10^9 points. Configurations whose
// register pressure is past the model's register_limits rank below all others.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kestrel/host/target.h"
#include "kestrel/tuner/cross_model.h"
#include "kestrel/tuner/space.h"

namespace kestrel::tuner {

struct ZeroShotOptions {
  std::size_t top = 1;           // picks to return, best first
  std::size_t samples = 4096;    // uniform valid points scored first
  unsigned chains = 32;          // annealing chains from the best-scored points
  unsigned steps = 100;          // steps per chain
  std::uint64_t seed = 1;
};

struct ZeroShotPick {
  std::vector<std::uint64_t> points;  // space indices, best-scored first (distinct, valid)
  std::vector<float> scores;          // the model's score of each
  std::size_t scored = 0;             // configurations scored in all
  std::chrono::duration<double> elapsed{};
};

// Empty when a model of `model` serves `op` on `target`'s class (CrossModel::serving: the
// class's own or its family's); otherwise a message saying it has none and naming the
// ones it has ("the cost model has no model for gemm on neon targets or their family
// (arm) (it has: gemm/x86, ...); ...").
std::string missing_model(const CrossModel& model, std::string_view op, const host::Target& target);

// Throws std::invalid_argument when no model of `model` serves the space's op on
// target_class(target) (naming the ones it has).
// Throws std::invalid_argument as well when the space has no valid point to score.
ZeroShotPick zero_shot_pick(const CrossModel& model, const Space& space, const host::Target& target,
                            const ZeroShotOptions& options = {});

// The model's scores of space points (higher = faster), each point's features computed
// and scored once and remembered: StrategyOptions::prior for a warm start. The function
// shares `model` and borrows `space`, which must outlive it; it may be called from any
// thread. The register limits do not apply here (measurements correct the model). Throws
// std::invalid_argument as zero_shot_pick does.
std::function<std::vector<float>(const std::vector<std::uint64_t>&)> model_prior(
    std::shared_ptr<const CrossModel> model, const Space& space, const host::Target& target);

}  // namespace kestrel::tuner
