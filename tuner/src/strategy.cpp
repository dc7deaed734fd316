// make_strategy(): the strategy names and the dispatch to their constructors.
#include <stdexcept>

#include "strategies.h"

namespace kestrel::tuner {

const std::vector<std::string>& strategy_names() {
  static const std::vector<std::string> names = {"sa", "bo", "anneal", "ga", "random", "grid"};
  return names;
}

std::unique_ptr<Strategy> make_strategy(std::string_view name, const Space& space, const StrategyOptions& options) {
  if (name == "sa") return make_cost_model_annealing(space, options);
  if (name == "bo") return make_bayes_opt(space, options);
  if (name == "anneal") return make_annealing(space, options);
  if (name == "ga") return make_genetic(space, options);
  if (name == "random") return make_random_search(space, options);
  if (name == "grid") return make_grid_search(space, options);
  std::string known;
  for (const auto& n : strategy_names()) known += (known.empty() ? "" : ", ") + n;
  throw std::invalid_argument("unknown search strategy '" + std::string(name) + "' (strategies: " + known + ")");
}

}  // namespace kestrel::tuner
