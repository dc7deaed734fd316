// "sa": simulated annealing over the predictions of a learned cost model, after AutoTVM's
// XGBTuner. Until enough points are measured (max(batch, 16), counting transfer records
// from other workloads) a batch is uniformly random. After that, each batch refits the
// model on every observation plus the transfer records, then runs `sa_chains` parallel
// chains for `sa_steps` steps over the model's scores: chains start at the best measured
// points and at random valid points, step to random valid neighbours, and accept by the
// Metropolis rule at a temperature falling linearly to zero (scaled by the spread of the
// scores at the start points, since a ranking model's scores have no fixed unit). The
// best-scored unvisited points seen make up (1 - random_fraction) of the batch; the rest
// is random, to keep exploring where the model is wrong.
//
// Each step scores all chains' candidates with one predict call; feature vectors are
// cached per point. Everything is reproducible from options.seed.
#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <stdexcept>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "fresh_points.h"
#include "kestrel/tuner/cost_model.h"
#include "kestrel/tuner/features.h"
#include "strategies.h"

namespace kestrel::tuner {
namespace {

constexpr std::size_t kMinObservations = 16;  // before the model is trusted
constexpr unsigned kEarlyStop = 50;           // steps without a change to the best points
constexpr std::size_t kFeatureCacheLimit = std::size_t{1} << 17;
constexpr double kInf = std::numeric_limits<double>::infinity();

class ModelAnnealing final : public Strategy {
 public:
  ModelAnnealing(const Space& space, const StrategyOptions& options)
      : space_(&space), options_(options), fresh_(space), rng_(options.seed), model_(make_xgboost_model(options.seed)) {
    columns_ = feature_vector(space, 0).size();
    for (const auto& record : options_.transfer) {
      if (record.features.size() != columns_) {
        throw std::invalid_argument("sa: a transfer record has " + std::to_string(record.features.size()) +
                                    " features but " + std::string(space.op().name()) + " configurations have " +
                                    std::to_string(columns_));
      }
    }
  }

  std::string_view name() const override { return "sa"; }

  std::vector<std::uint64_t> propose(std::size_t n) override {
    std::vector<std::uint64_t> out;
    if (n == 0) return out;
    const std::size_t known = observations_.size() + options_.transfer.size();
    if (known >= std::max(n, kMinObservations)) {
      if (dirty_) refit();
      if (model_->trained()) {
        double share = std::clamp(options_.random_fraction, 0.0, 1.0);
        auto random = static_cast<std::size_t>(std::llround(share * static_cast<double>(n)));
        for (std::uint64_t index : anneal(n - std::min(random, n))) {
          fresh_.mark(index);
          out.push_back(index);
        }
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
      if (o.index >= space_->size()) continue;  // not a point of this space (a stale record)
      fresh_.mark(o.index);
      bool ok = o.ok && std::isfinite(o.cost) && o.cost > 0;
      observations_.push_back({o.index, ok ? o.cost : kInf, ok});
      dirty_ = true;
    }
  }

 private:
  const std::vector<float>& features(std::uint64_t index) {
    auto it = cache_.find(index);
    if (it == cache_.end()) it = cache_.emplace(index, feature_vector(*space_, index)).first;
    return it->second;
  }

  std::vector<float> predict(const std::vector<std::uint64_t>& points) {
    std::vector<std::vector<float>> rows;
    rows.reserve(points.size());
    for (auto index : points) rows.push_back(features(index));
    return model_->predict(rows);
  }

  void refit() {
    std::vector<std::vector<float>> rows;
    std::vector<double> costs;
    rows.reserve(observations_.size() + options_.transfer.size());
    for (const auto& record : options_.transfer) {
      rows.push_back(record.features);
      costs.push_back(record.cost > 0 ? record.cost : kInf);
    }
    for (const auto& o : observations_) {
      rows.push_back(features(o.index));
      costs.push_back(o.cost);
    }
    model_->fit(rows, costs);
    dirty_ = false;
  }

  // Up to `count` unvisited points with the best predicted scores found by the chains,
  // best first.
  std::vector<std::uint64_t> anneal(std::size_t count) {
    if (count == 0) return {};
    if (cache_.size() > kFeatureCacheLimit) cache_.clear();
    const std::size_t chains = std::max(1u, options_.sa_chains);

    // Start points: the best measured points (up to half the chains), then random ones.
    std::vector<Observation> measured;
    for (const auto& o : observations_) {
      if (o.ok) measured.push_back(o);
    }
    std::sort(measured.begin(), measured.end(), [](const Observation& a, const Observation& b) {
      return a.cost != b.cost ? a.cost < b.cost : a.index < b.index;
    });
    std::vector<std::uint64_t> points;
    for (const auto& o : measured) {
      if (points.size() >= chains / 2) break;
      if (std::find(points.begin(), points.end(), o.index) == points.end()) points.push_back(o.index);
    }
    while (points.size() < chains) {
      auto index = space_->sample_valid(rng_, 1'000);
      if (!index) break;
      points.push_back(*index);
    }
    if (points.empty()) return {};

    // The best unvisited points so far, ordered by (score, index); `top.begin()` is the
    // worst of them.
    std::set<std::pair<float, std::uint64_t>> top;
    std::unordered_set<std::uint64_t> in_top;
    bool changed = false;
    auto consider = [&](std::uint64_t index, float score) {
      if (in_top.count(index) != 0 || fresh_.taken(index)) return;
      std::pair<float, std::uint64_t> entry{score, index};
      if (top.size() >= count) {
        if (!(*top.begin() < entry)) return;
        in_top.erase(top.begin()->second);
        top.erase(top.begin());
      }
      top.insert(entry);
      in_top.insert(index);
      changed = true;
    };

    std::vector<float> scores = predict(points);
    for (std::size_t i = 0; i < points.size(); ++i) consider(points[i], scores[i]);
    const double initial_temperature = spread(scores);

    std::uniform_real_distribution<double> uniform(0.0, 1.0);
    std::vector<std::uint64_t> candidates(points.size());
    const unsigned steps = options_.sa_steps;
    unsigned quiet = 0;
    for (unsigned step = 0; step < steps && quiet < kEarlyStop; ++step) {
      const double temperature =
          initial_temperature * (1.0 - static_cast<double>(step) / static_cast<double>(steps)) + 1e-9;
      for (std::size_t i = 0; i < points.size(); ++i) {
        candidates[i] = space_->random_neighbour(points[i], rng_).value_or(points[i]);
      }
      std::vector<float> next = predict(candidates);
      changed = false;
      for (std::size_t i = 0; i < points.size(); ++i) {
        double gain = static_cast<double>(next[i]) - static_cast<double>(scores[i]);
        if (gain >= 0 || uniform(rng_) < std::exp(gain / temperature)) {
          points[i] = candidates[i];
          scores[i] = next[i];
        }
        consider(candidates[i], next[i]);
      }
      quiet = changed ? 0 : quiet + 1;
    }

    std::vector<std::uint64_t> best;
    best.reserve(top.size());
    for (auto it = top.rbegin(); it != top.rend(); ++it) best.push_back(it->second);
    return best;
  }

  // The standard deviation of the scores, or 1 if they are all equal.
  static double spread(const std::vector<float>& scores) {
    double mean = 0;
    for (float s : scores) mean += s;
    mean /= static_cast<double>(scores.size());
    double variance = 0;
    for (float s : scores) variance += (s - mean) * (s - mean);
    double deviation = std::sqrt(variance / static_cast<double>(scores.size()));
    return deviation > 1e-12 ? deviation : 1.0;
  }

  const Space* space_;
  StrategyOptions options_;
  detail::FreshPoints fresh_;
  Rng rng_;
  std::unique_ptr<CostModel> model_;
  std::size_t columns_ = 0;
  std::vector<Observation> observations_;
  bool dirty_ = true;
  std::unordered_map<std::uint64_t, std::vector<float>> cache_;
};

}  // namespace

std::unique_ptr<Strategy> make_model_annealing(const Space& space, const StrategyOptions& options) {
  return std::make_unique<ModelAnnealing>(space, options);
}

}  // namespace kestrel::tuner
