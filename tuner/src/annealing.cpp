// "anneal": model-free simulated annealing on measured costs. A few chains each hold a
// current point; each proposal is an unmeasured random valid neighbour of a chain's
// current point, and when its cost arrives the chain moves there by the Metropolis rule
// on log costs (costs span orders of magnitude), at a temperature that decays with the
// number of observations. A chain restarts at a random valid point when it has no
// unmeasured neighbours left or has rejected too many moves in a row. Chains start at
// the best points of a warm start, if any, else at random valid points.
#include <algorithm>
#include <cmath>
#include <limits>
#include <unordered_map>

#include "fresh_points.h"
#include "strategies.h"

namespace kestrel::tuner {
namespace {

constexpr std::size_t kChains = 8;
// In log-cost units: a move to a 2x slower point (+0.69) is first taken with
// probability ~25%, and after ~400 observations almost never.
constexpr double kInitialTemperature = 0.5;
constexpr double kCooling = 0.99;  // per observation
constexpr double kMinTemperature = 0.01;
constexpr int kPatience = 32;       // rejections in a row before a chain restarts
constexpr int kNeighbourDraws = 16;  // random neighbours tried before enumerating them
constexpr double kInf = std::numeric_limits<double>::infinity();

struct Chain {
  std::optional<std::uint64_t> current;
  double cost = kInf;  // log cost of `current`; infinite until measured (or if it failed)
  int rejections = 0;
  std::uint64_t epoch = 0;  // bumped at each restart; outcomes of older proposals are ignored
};

struct Owner {
  std::size_t chain = 0;
  std::uint64_t epoch = 0;
};

class Annealing final : public Strategy {
 public:
  Annealing(const Space& space, const StrategyOptions& options)
      : space_(&space), fresh_(space), rng_(options.seed), chains_(kChains) {}

  std::string_view name() const override { return "anneal"; }

  std::vector<std::uint64_t> propose(std::size_t n) override {
    if (!started_) start();
    std::vector<std::uint64_t> out;
    // Round robin over the chains until n points or a full round without one.
    for (std::size_t idle = 0; out.size() < n && idle < chains_.size(); next_ = (next_ + 1) % chains_.size()) {
      auto index = step(chains_[next_]);
      if (!index) {
        ++idle;
        continue;
      }
      idle = 0;
      owners_[*index] = {next_, chains_[next_].epoch};
      out.push_back(*index);
    }
    return out;
  }

  void observe(const std::vector<Observation>& observations) override {
    for (const auto& o : observations) {
      fresh_.mark(o.index);
      ++observed_;
      double cost = o.ok && o.cost > 0 && std::isfinite(o.cost) ? std::log(o.cost) : kInf;
      auto owner = owners_.find(o.index);
      if (owner == owners_.end()) {
        if (!started_ && cost < kInf) warm_.push_back({o.index, cost, true});
        continue;
      }
      Chain& chain = chains_[owner->second.chain];
      bool current_epoch = owner->second.epoch == chain.epoch;
      owners_.erase(owner);
      if (!current_epoch) continue;
      if (chain.current == o.index) {
        chain.cost = cost;
      } else if (accept(cost, chain.cost)) {
        chain.current = o.index;
        chain.cost = cost;
        chain.rejections = 0;
      } else {
        ++chain.rejections;
      }
    }
  }

 private:
  // Seeds up to half of the chains with the best warm-start points.
  void start() {
    started_ = true;
    std::sort(warm_.begin(), warm_.end(), [](const Observation& a, const Observation& b) {
      return a.cost != b.cost ? a.cost < b.cost : a.index < b.index;
    });
    for (std::size_t c = 0; c < chains_.size() / 2 && c < warm_.size(); ++c) {
      chains_[c].current = warm_[c].index;
      chains_[c].cost = warm_[c].cost;
    }
    warm_.clear();
  }

  double temperature() const {
    return std::max(kMinTemperature, kInitialTemperature * std::pow(kCooling, static_cast<double>(observed_)));
  }

  bool accept(double cost, double current) {
    if (cost == kInf) return false;
    if (cost <= current) return true;
    std::uniform_real_distribution<double> uniform(0.0, 1.0);
    return uniform(rng_) < std::exp(-(cost - current) / temperature());
  }

  std::optional<std::uint64_t> step(Chain& chain) {
    if (!chain.current || chain.rejections >= kPatience) return restart(chain);
    for (int i = 0; i < kNeighbourDraws; ++i) {
      auto near = space_->random_neighbour(*chain.current, rng_, 4);
      if (near && fresh_.mark(*near)) return near;
    }
    std::vector<std::uint64_t> candidates;
    for (auto near : space_->neighbours(*chain.current)) {
      if (fresh_.fresh(near)) candidates.push_back(near);
    }
    if (candidates.empty()) return restart(chain);
    std::uniform_int_distribution<std::size_t> pick(0, candidates.size() - 1);
    std::uint64_t near = candidates[pick(rng_)];
    fresh_.mark(near);
    return near;
  }

  // Moves the chain to a random valid unmeasured point (proposed at once), or leaves it
  // as it is when the space has none left.
  std::optional<std::uint64_t> restart(Chain& chain) {
    auto index = fresh_.take_random(rng_);
    if (!index) return std::nullopt;
    chain.current = index;
    chain.cost = kInf;
    chain.rejections = 0;
    ++chain.epoch;
    return index;
  }

  const Space* space_;
  detail::FreshPoints fresh_;
  Rng rng_;
  std::vector<Chain> chains_;
  std::size_t next_ = 0;
  bool started_ = false;
  std::uint64_t observed_ = 0;
  std::vector<Observation> warm_;  // measured before the first proposal (cost: log)
  std::unordered_map<std::uint64_t, Owner> owners_;  // proposed, not yet observed
};

}  // namespace

std::unique_ptr<Strategy> make_annealing(const Space& space, const StrategyOptions& options) {
  return std::make_unique<Annealing>(space, options);
}

}  // namespace kestrel::tuner
