// Every search strategy on a synthetic cost over a toy op's space (a product of
// per-knob penalties around an optimum, an interaction term, an invalid region and a
// region that fails at run time): it improves on its first batch, the learning ones
// beat random search, it never proposes a point twice or an invalid one, is
// reproducible from its seed, honours a warm start, and runs a tiny space dry. Plus a
// smoke run of each on the real gemm space.
#include <catch2/catch.hpp>
#include <cmath>
#include <functional>
#include <limits>
#include <set>

#include "support/traits.h"
#include "kestrel/ops/op.h"
#include "tuner/toy_op.h"
#include "kestrel/tuner/strategy.h"

using namespace kestrel;
using kestrel::test::ToyOp;
using kestrel::tuner::Observation;
using kestrel::tuner::Rng;
using kestrel::tuner::Space;
using kestrel::tuner::StrategyOptions;

namespace {

const std::vector<std::string> kStrategies = {"random", "grid", "ga", "anneal", "sa"};
constexpr double kInf = std::numeric_limits<double>::infinity();


// Six knobs of eight values (262144 points); k0 + k1 > 11 and k2 = k3 = 7 are invalid.
ToyOp synthetic_op() {
  std::vector<ops::Knob> knobs;
  for (int k = 0; k < 6; ++k) knobs.push_back({"k" + std::to_string(k), {0, 1, 2, 3, 4, 5, 6, 7}, ""});
  return ToyOp(std::move(knobs), [](const ops::Config& c) {
    return c.at("k0") + c.at("k1") <= 11 && !(c.at("k2") == 7 && c.at("k3") == 7);
  });
}

// Seconds per call: 1 ms at the optimum (5,2,6,3,4,5), more the farther each knob is
// from it, with an interaction between k4 and k5; k0 = k5 = 0 fails at run time.
Observation synthetic_cost(const Space& space, std::uint64_t index) {
  static const std::int64_t kOptimum[6] = {5, 2, 6, 3, 4, 5};
  auto config = space.config(index);
  if (config.at("k0") == 0 && config.at("k5") == 0) return {index, kInf, false};
  double cost = 1e-3;
  for (int k = 0; k < 6; ++k) {
    double distance = std::abs(static_cast<double>(config.at("k" + std::to_string(k)) - kOptimum[k]));
    cost *= 1 + 0.25 * std::pow(distance, 1.5);
  }
  cost *= 1 + 0.2 * static_cast<double>((config.at("k4") + config.at("k5")) % 3);
  return {index, cost, true};
}

struct Run {
  std::vector<std::uint64_t> proposals;
  double first_best = kInf;
  double best = kInf;
};

// `batches` rounds of propose(batch) and observe() on the synthetic cost, checking that
// every proposal is valid, new, and not among `warm` (observed before the first round).
Run tune(const std::string& name, const Space& space, std::uint64_t seed, int batches, std::size_t batch,
         const std::vector<Observation>& warm = {}) {
  StrategyOptions options;
  options.seed = seed;
  auto strategy = tuner::make_strategy(name, space, options);
  REQUIRE(strategy->name() == name);
  std::set<std::uint64_t> seen;
  for (const auto& o : warm) seen.insert(o.index);
  if (!warm.empty()) strategy->observe(warm);
  Run run;
  for (int b = 0; b < batches; ++b) {
    auto proposals = strategy->propose(batch);
    REQUIRE(proposals.size() == batch);
    std::vector<Observation> observations;
    for (auto index : proposals) {
      INFO(name << " seed " << seed << " batch " << b << " index " << index);
      REQUIRE(index < space.size());
      REQUIRE(space.valid(index));
      REQUIRE(seen.insert(index).second);
      observations.push_back(synthetic_cost(space, index));
      run.best = std::min(run.best, observations.back().cost);
    }
    if (b == 0) run.first_best = run.best;
    run.proposals.insert(run.proposals.end(), proposals.begin(), proposals.end());
    strategy->observe(observations);
  }
  return run;
}

}  // namespace

TEST_CASE("strategies: names and the unknown-name error", "[tuner][strategy]") {
  const auto& names = tuner::strategy_names();
  for (const auto& name : kStrategies) CHECK(std::find(names.begin(), names.end(), name) != names.end());
  CHECK(names.size() == kStrategies.size());
  ToyOp op = synthetic_op();
  Space space(op, {}, test::fixed_traits());
  for (const auto& name : kStrategies) CHECK(tuner::make_strategy(name, space, {})->name() == name);
  CHECK_THROWS_AS(tuner::make_strategy("bayes", space, {}), std::invalid_argument);
  CHECK_THROWS_WITH(tuner::make_strategy("bayes", space, {}),
                    Catch::Contains("bayes") && Catch::Contains("random") && Catch::Contains("grid") &&
                        Catch::Contains("ga") && Catch::Contains("anneal") && Catch::Contains("sa"));
}

TEST_CASE("strategies: each improves on its first batch, never repeating a point", "[tuner][strategy]") {
  ToyOp op = synthetic_op();
  Space space(op, {}, test::fixed_traits());
  for (const auto& name : kStrategies) {
    double ratio = 0;
    for (std::uint64_t seed : {1, 2, 3}) {
      Run run = tune(name, space, seed, 10, 16);
      REQUIRE(std::isfinite(run.first_best));
      ratio += run.best / run.first_best / 3;
    }
    INFO(name << ": best after 10 batches / best of the first, averaged over 3 seeds = " << ratio);
    CHECK(ratio < 1.0);
  }
}

TEST_CASE("strategies: the learning ones beat random search", "[tuner][strategy]") {
  ToyOp op = synthetic_op();
  Space space(op, {}, test::fixed_traits());
  auto mean_best = [&](const std::string& name) {
    double sum = 0;
    for (std::uint64_t seed : {1, 2, 3}) sum += tune(name, space, seed, 20, 16).best / 3;
    return sum;
  };
  double random = mean_best("random");
  for (const auto& name : {"ga", "anneal", "sa"}) {
    double best = mean_best(name);
    INFO(name << ": mean best " << best << " s, random search " << random << " s");
    CHECK(best < random);
  }
}

TEST_CASE("strategies: the same seed gives the same proposals", "[tuner][strategy]") {
  ToyOp op = synthetic_op();
  Space space(op, {}, test::fixed_traits());
  for (const auto& name : kStrategies) {
    INFO(name);
    CHECK(tune(name, space, 7, 4, 16).proposals == tune(name, space, 7, 4, 16).proposals);
  }
  // And seeds matter (grid search has nothing random about it).
  for (const auto& name : {"random", "ga", "anneal", "sa"}) {
    INFO(name);
    CHECK(tune(name, space, 7, 2, 16).proposals != tune(name, space, 8, 2, 16).proposals);
  }
}

TEST_CASE("strategies: points observed before the first proposal are never proposed", "[tuner][strategy]") {
  ToyOp op = synthetic_op();
  Space space(op, {}, test::fixed_traits());
  // 300 earlier measurements, including the grid's first points and some near the optimum.
  std::vector<Observation> warm;
  std::set<std::uint64_t> taken;
  Rng rng(99);
  auto add = [&](std::uint64_t index) {
    if (space.valid(index) && taken.insert(index).second) warm.push_back(synthetic_cost(space, index));
  };
  for (std::uint64_t index = 0; index < 40; ++index) add(index);
  std::uint64_t optimum = space.index({{"k0", 5}, {"k1", 2}, {"k2", 6}, {"k3", 3}, {"k4", 4}, {"k5", 5}});
  add(optimum);
  for (auto near : space.neighbours(optimum)) add(near);
  while (warm.size() < 300) add(*space.sample_valid(rng));
  for (const auto& name : kStrategies) {
    INFO(name);
    tune(name, space, 3, 6, 16, warm);  // checks every proposal against `warm`
  }
}

TEST_CASE("strategies: a tiny space runs dry", "[tuner][strategy]") {
  // 3 x 3 points, 6 valid (a != b).
  ToyOp op({{"a", {1, 2, 3}, ""}, {"b", {1, 2, 3}, ""}}, [](const ops::Config& c) { return c.at("a") != c.at("b"); });
  Space space(op, {}, test::fixed_traits());
  std::set<std::uint64_t> valid;
  for (std::uint64_t i = 0; i < space.size(); ++i) {
    if (space.valid(i)) valid.insert(i);
  }
  REQUIRE(valid.size() == 6);
  auto cost = [](std::uint64_t index) { return Observation{index, 1e-3 * static_cast<double>(index + 1), true}; };

  for (const auto& name : kStrategies) {
    INFO(name);
    auto strategy = tuner::make_strategy(name, space, {});
    std::set<std::uint64_t> proposed;
    auto first = strategy->propose(16);
    CHECK(first.size() <= 6);
    CHECK(!first.empty());
    std::vector<std::uint64_t> batch = first;
    for (int round = 0; round < 20 && !batch.empty(); ++round) {
      std::vector<Observation> observations;
      for (auto index : batch) {
        REQUIRE(valid.count(index) == 1);
        REQUIRE(proposed.insert(index).second);
        observations.push_back(cost(index));
      }
      strategy->observe(observations);
      batch = strategy->propose(4);
    }
    CHECK(batch.empty());
    CHECK(proposed == valid);
    CHECK(strategy->propose(16).empty());
  }

  // With four of the six measured before, exactly the other two come back.
  for (const auto& name : kStrategies) {
    INFO(name);
    auto strategy = tuner::make_strategy(name, space, {});
    std::vector<Observation> warm;
    std::set<std::uint64_t> rest = valid;
    for (auto index : valid) {
      if (warm.size() == 4) break;
      warm.push_back(cost(index));
      rest.erase(index);
    }
    strategy->observe(warm);
    auto proposals = strategy->propose(16);
    std::set<std::uint64_t> got(proposals.begin(), proposals.end());
    CHECK(proposals.size() == 2);
    CHECK(got == rest);
  }
}

TEST_CASE("strategies: each runs on the real gemm space", "[tuner][strategy]") {
  ops::Registry registry = ops::builtin_ops();
  const ops::Op& gemm = registry.get("gemm");
  Space space(gemm, ops::parse_params(gemm, "M=512,N=512,K=512"), test::fixed_traits());
  // Synthetic: best near mc=64, nc=256, kc=256, mr=6, nr=16, vec=8.
  auto cost = [&](std::uint64_t index) {
    auto c = space.config(index);
    double log_cost = std::abs(std::log2(double(c.at("mc")) / 64)) + std::abs(std::log2(double(c.at("nc")) / 256)) +
                      std::abs(std::log2(double(c.at("kc")) / 256)) + std::abs(double(c.at("mr")) - 6) / 2 +
                      std::abs(std::log2(double(c.at("nr")) / 16)) + std::abs(std::log2(double(c.at("vec")) / 8));
    return Observation{index, 1e-3 * std::exp2(log_cost), true};
  };
  for (const auto& name : kStrategies) {
    INFO(name);
    auto strategy = tuner::make_strategy(name, space, {});
    std::set<std::uint64_t> seen;
    for (int b = 0; b < 3; ++b) {
      auto proposals = strategy->propose(16);
      REQUIRE(proposals.size() == 16);
      std::vector<Observation> observations;
      for (auto index : proposals) {
        REQUIRE(space.valid(index));
        REQUIRE(seen.insert(index).second);
        observations.push_back(cost(index));
      }
      strategy->observe(observations);
    }
  }
}
