// "bo": Bayesian optimisation over a tree-ensemble surrogate. Until enough points are
// measured (max(batch, 16)) a batch is uniformly random. After that, each batch fits
// kMembers XGBoost regressors of log(cost) on bootstrap samples of the observations
// (each with its own seed and column sampling); their mean and spread at a point stand in
// for a posterior, and the candidates are ranked by expected improvement over the best
// measured log cost. Failures (+inf) are learned as one unit of log cost (a factor e)
// above the slowest success, so the surrogate steers away from them without a scale
// that depends on how they failed. Candidates: kRandomCandidates random valid unvisited
// points plus every valid unvisited point one knob away from the kNeighbourSeeds best
// measured points, and two knobs away from the best one. The batch is picked from the
// candidates with the best expected improvement, greedily with a penalty for closeness
// to points already in the batch or measured (batch_pick.h). Never proposes a point
// twice; reproducible from the seed.
#include <xgboost/c_api.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <numbers>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "batch_pick.h"
#include "fresh_points.h"
#include "kestrel/tuner/features.h"
#include "strategies.h"

namespace kestrel::tuner {
namespace {

constexpr std::size_t kMinObservations = 16;
constexpr int kMembers = 8;                  // regressors in the ensemble
constexpr int kRounds = 40;                  // boosting rounds of each
constexpr int kRandomCandidates = 1024;
constexpr std::size_t kNeighbourSeeds = 8;
constexpr std::size_t kPoolFactor = 4;       // EI pool per batch slot
constexpr double kMinSpread = 1e-3;          // floor of the ensemble's spread (log cost)
constexpr double kInf = std::numeric_limits<double>::infinity();

void check(int rc, const char* what) {
  if (rc != 0) throw std::runtime_error(std::string("bo: xgboost ") + what + " failed: " + XGBGetLastError());
}

// One XGBoost regressor (owner of its handles).
class Regressor {
 public:
  Regressor(const std::vector<float>& dense, std::size_t rows, std::size_t cols, const std::vector<float>& labels,
            std::uint64_t seed) {
    check(XGDMatrixCreateFromMat(dense.data(), rows, cols, std::numeric_limits<float>::quiet_NaN(), &train_),
          "creating a DMatrix");
    check(XGDMatrixSetFloatInfo(train_, "label", labels.data(), labels.size()), "setting labels");
    DMatrixHandle cache[] = {train_};
    check(XGBoosterCreate(cache, 1, &booster_), "creating a booster");
    const std::pair<const char*, std::string> params[] = {
        {"verbosity", "0"},      {"booster", "gbtree"},        {"objective", "reg:squarederror"},
        {"tree_method", "exact"}, {"max_depth", "5"},            {"eta", "0.3"},
        {"min_child_weight", "1"}, {"colsample_bytree", "0.8"}, {"nthread", "1"},
        {"seed", std::to_string(seed % 2147483647u)}};
    for (const auto& [name, value] : params) check(XGBoosterSetParam(booster_, name, value.c_str()), name);
    for (int round = 0; round < kRounds; ++round) check(XGBoosterUpdateOneIter(booster_, round, train_), "training");
  }
  ~Regressor() {
    if (booster_) XGBoosterFree(booster_);
    if (train_) XGDMatrixFree(train_);
  }
  Regressor(const Regressor&) = delete;
  Regressor& operator=(const Regressor&) = delete;

  std::vector<float> predict(const std::vector<float>& dense, std::size_t rows, std::size_t cols) const {
    DMatrixHandle matrix = nullptr;
    check(XGDMatrixCreateFromMat(dense.data(), rows, cols, std::numeric_limits<float>::quiet_NaN(), &matrix),
          "creating a DMatrix");
    bst_ulong length = 0;
    const float* result = nullptr;
    int rc = XGBoosterPredict(booster_, matrix, 0, 0, 0, &length, &result);
    std::vector<float> out;
    if (rc == 0) out.assign(result, result + length);
    XGDMatrixFree(matrix);
    check(rc, "predicting");
    if (out.size() != rows) throw std::runtime_error("bo: xgboost predicted the wrong number of rows");
    return out;
  }

 private:
  DMatrixHandle train_ = nullptr;
  BoosterHandle booster_ = nullptr;
};

double normal_pdf(double z) { return std::exp(-0.5 * z * z) / std::sqrt(2 * std::numbers::pi); }
double normal_cdf(double z) { return 0.5 * std::erfc(-z / std::sqrt(2.0)); }

class BayesOpt final : public Strategy {
 public:
  BayesOpt(const Space& space, const StrategyOptions& options)
      : space_(&space), fresh_(space), rng_(options.seed), seed_(options.seed) {
    static const int silenced = XGBSetGlobalConfig(R"({"verbosity": 0})");
    check(silenced, "setting the global verbosity");
    columns_ = feature_vector(space, 0).size();
  }

  std::string_view name() const override { return "bo"; }

  std::vector<std::uint64_t> propose(std::size_t n) override {
    std::vector<std::uint64_t> out;
    if (n == 0) return out;
    std::size_t successes = 0;
    for (const auto& o : observations_) successes += o.ok;
    if (observations_.size() >= std::max(n, kMinObservations) && successes >= 2) {
      for (std::uint64_t index : plan(n)) {
        fresh_.mark(index);
        out.push_back(index);
      }
    }
    while (out.size() < n) {
      auto index = fresh_.take_random(rng_);
      if (!index) break;
      out.push_back(*index);
    }
    return out;
  }

  void observe(const std::vector<Observation>& observations) override {
    for (const auto& o : observations) {
      if (o.index >= space_->size()) continue;
      fresh_.mark(o.index);
      bool ok = o.ok && std::isfinite(o.cost) && o.cost > 0;
      observations_.push_back({o.index, ok ? o.cost : kInf, ok});
    }
  }

 private:
  const std::vector<float>& features(std::uint64_t index) {
    auto it = cache_.find(index);
    if (it == cache_.end()) it = cache_.emplace(index, feature_vector(*space_, index)).first;
    return it->second;
  }

  // Valid unvisited candidates: random ones and the neighbourhoods of the best measured.
  std::vector<std::uint64_t> candidates() {
    std::unordered_set<std::uint64_t> seen;
    std::vector<std::uint64_t> out;
    auto add = [&](std::uint64_t index) {
      if (!fresh_.taken(index) && seen.insert(index).second && space_->valid(index)) out.push_back(index);
    };
    std::vector<Observation> best;
    for (const auto& o : observations_) {
      if (o.ok) best.push_back(o);
    }
    std::sort(best.begin(), best.end(), [](const Observation& a, const Observation& b) {
      return a.cost != b.cost ? a.cost < b.cost : a.index < b.index;
    });
    if (best.size() > kNeighbourSeeds) best.resize(kNeighbourSeeds);
    for (std::size_t i = 0; i < best.size(); ++i) {
      for (auto near : space_->neighbours(best[i].index)) {
        add(near);
        if (i == 0) {
          for (auto farther : space_->neighbours(near)) add(farther);
        }
      }
    }
    for (int i = 0; i < kRandomCandidates; ++i) {
      auto index = space_->sample_valid(rng_, 100);
      if (index) add(*index);
    }
    return out;
  }

  std::vector<std::uint64_t> plan(std::size_t count) {
    // Training data: log cost; failures a unit above the slowest success.
    double worst = -kInf, best = kInf;
    for (const auto& o : observations_) {
      if (!o.ok) continue;
      worst = std::max(worst, std::log(o.cost));
      best = std::min(best, std::log(o.cost));
    }
    if (!std::isfinite(worst)) worst = 0;  // no success yet: failures all at one label
    const std::size_t rows = observations_.size();
    std::vector<float> dense;
    dense.reserve(rows * columns_);
    std::vector<float> labels;
    labels.reserve(rows);
    for (const auto& o : observations_) {
      const auto& f = features(o.index);
      dense.insert(dense.end(), f.begin(), f.end());
      labels.push_back(static_cast<float>(o.ok ? std::log(o.cost) : worst + 1.0));
    }

    std::vector<std::uint64_t> pool = candidates();
    if (pool.empty()) return {};
    std::vector<float> query;
    query.reserve(pool.size() * columns_);
    for (auto index : pool) {
      const auto& f = features(index);
      query.insert(query.end(), f.begin(), f.end());
    }
    if (cache_.size() > (std::size_t{1} << 17)) cache_.clear();

    std::vector<double> sum(pool.size(), 0.0), square(pool.size(), 0.0);
    std::uniform_int_distribution<std::size_t> draw(0, rows - 1);
    for (int m = 0; m < kMembers; ++m) {
      // A bootstrap sample of the rows.
      std::vector<float> sample_dense;
      std::vector<float> sample_labels;
      sample_dense.reserve(dense.size());
      sample_labels.reserve(rows);
      for (std::size_t r = 0; r < rows; ++r) {
        std::size_t pick = draw(rng_);
        sample_dense.insert(sample_dense.end(), dense.begin() + static_cast<std::ptrdiff_t>(pick * columns_),
                            dense.begin() + static_cast<std::ptrdiff_t>((pick + 1) * columns_));
        sample_labels.push_back(labels[pick]);
      }
      Regressor member(sample_dense, rows, columns_, sample_labels, seed_ * 7919 + static_cast<std::uint64_t>(m));
      std::vector<float> predicted = member.predict(query, pool.size(), columns_);
      for (std::size_t i = 0; i < pool.size(); ++i) {
        sum[i] += predicted[i];
        square[i] += static_cast<double>(predicted[i]) * predicted[i];
      }
    }

    // Expected improvement (minimising log cost) of each candidate.
    std::vector<detail::Scored> scored(pool.size());
    for (std::size_t i = 0; i < pool.size(); ++i) {
      double mean = sum[i] / kMembers;
      double spread = std::sqrt(std::max(0.0, square[i] / kMembers - mean * mean));
      spread = std::max(spread, kMinSpread);
      double gain = best - mean;
      double z = gain / spread;
      scored[i] = {pool[i], gain * normal_cdf(z) + spread * normal_pdf(z)};
    }
    const std::size_t keep = std::min(scored.size(), count * kPoolFactor);
    std::partial_sort(scored.begin(), scored.begin() + static_cast<std::ptrdiff_t>(keep), scored.end(),
                      [](const detail::Scored& a, const detail::Scored& b) {
                        return a.score != b.score ? a.score > b.score : a.index < b.index;
                      });
    scored.resize(keep);
    std::vector<std::uint64_t> measured;
    measured.reserve(observations_.size());
    for (const auto& o : observations_) measured.push_back(o.index);
    return detail::pick_diverse(*space_, scored, count, measured);
  }

  const Space* space_;
  detail::FreshPoints fresh_;
  Rng rng_;
  std::uint64_t seed_;
  std::size_t columns_ = 0;
  std::vector<Observation> observations_;
  std::unordered_map<std::uint64_t, std::vector<float>> cache_;
};

}  // namespace

std::unique_ptr<Strategy> make_bayes_opt(const Space& space, const StrategyOptions& options) {
  return std::make_unique<BayesOpt>(space, options);
}

}  // namespace kestrel::tuner
