// Constructors of the individual strategies, one per file; make_strategy() picks one.
#pragma once

#include <memory>

#include "kestrel/tuner/strategy.h"

namespace kestrel::tuner {

// random_search.cpp
std::unique_ptr<Strategy> make_random_search(const Space& space, const StrategyOptions& options);
// grid_search.cpp
std::unique_ptr<Strategy> make_grid_search(const Space& space, const StrategyOptions& options);
// genetic.cpp
std::unique_ptr<Strategy> make_genetic(const Space& space, const StrategyOptions& options);
// annealing.cpp
std::unique_ptr<Strategy> make_annealing(const Space& space, const StrategyOptions& options);
// cost_model_annealing.cpp
std::unique_ptr<Strategy> make_cost_model_annealing(const Space& space, const StrategyOptions& options);
// bayes_opt.cpp
std::unique_ptr<Strategy> make_bayes_opt(const Space& space, const StrategyOptions& options);

}  // namespace kestrel::tuner
