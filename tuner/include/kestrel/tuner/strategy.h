// Search strategies behind one interface. A strategy proposes configurations (space
// indices) to measure and learns from the outcomes. Every strategy is reproducible
// from its seed. Strategies never propose a point twice, including points fed to
// observe() from earlier sessions (resume).
#pragma once

#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kestrel/tuner/space.h"

namespace kestrel::tuner {

// One measured point. cost: seconds per call (lower is better); failed candidates
// (any status but ok) have ok == false and cost == +infinity.
struct Observation {
  std::uint64_t index = 0;
  double cost = std::numeric_limits<double>::infinity();
  bool ok = false;
};

class Strategy {
 public:
  virtual ~Strategy() = default;
  virtual std::string_view name() const = 0;
  // Up to `n` new valid points to measure next (fewer when the space runs out).
  virtual std::vector<std::uint64_t> propose(std::size_t n) = 0;
  // Outcomes of proposed points, or of points measured before (warm start).
  virtual void observe(const std::vector<Observation>& observations) = 0;
};

struct StrategyOptions {
  std::uint64_t seed = 1;
  // Model-based annealing ("sa"): parallel chains, steps per chain, share of random picks.
  unsigned sa_chains = 64;
  unsigned sa_steps = 200;
  double random_fraction = 0.1;
  // Genetic algorithm ("ga").
  unsigned ga_population = 32;
  double ga_mutation = 0.1;
  // Records of the same op on other workloads (same target), to seed the cost model.
  struct Transfer {
    std::vector<float> features;
    double cost = 0;
  };
  std::vector<Transfer> transfer;
  // A prior over configurations for a warm start (a cross-workload model's scores of
  // space points, higher = faster; cross_model.h). Empty: none. "sa" plans its first
  // batch from the prior instead of random points, and adds prior_weight x the prior's
  // standardised score as a base margin of its own model, the weight falling linearly
  // from 1 to 0 over the first prior_fade measured trials (then the prior is gone).
  std::function<std::vector<float>(const std::vector<std::uint64_t>& points)> prior;
  std::size_t prior_fade = 64;
};

// "random", "grid", "ga", "sa" (annealing over an XGBoost cost model, the default),
// "anneal" (model-free annealing on measured costs) and "bo" (Bayesian optimisation over a
// tree-ensemble surrogate). Throws std::invalid_argument for
// any other name, listing these.
std::unique_ptr<Strategy> make_strategy(std::string_view name, const Space& space, const StrategyOptions& options);
const std::vector<std::string>& strategy_names();

}  // namespace kestrel::tuner
