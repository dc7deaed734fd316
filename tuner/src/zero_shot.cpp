// Zero-shot picks: a uniform valid sample of the space and the op's default scored by
// the cross-workload model, then annealing chains over the model's scores from the best
// of them; and the same scores, memoised per point, as the prior of a warm start. In a
// pick (not in a prior), a configuration whose register pressure is past any training
// workload's fastest one (OpModelInfo::register_limits) ranks below every one within it.
#include "kestrel/tuner/zero_shot.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <mutex>
#include <numeric>
#include <stdexcept>
#include <unordered_map>
#include <unordered_set>
#include <utility>

namespace kestrel::tuner {
namespace {

using Clock = std::chrono::steady_clock;

// Rows scored per predict call in the uniform phase (bounds the rows held at once).
constexpr std::size_t kBatch = 1024;
// Spaces of at most this many times `samples` points are scored whole (their valid points).
constexpr std::uint64_t kExhaustive = 4;
// Scores remembered by a prior at most (a long warm-started search asks for many points).
constexpr std::size_t kCacheLimit = std::size_t{1} << 20;
// Temperature at the start of the chains, in standard deviations of the sample's scores.
constexpr double kStartTemperature = 0.5;
// Subtracted from the score of a configuration whose register pressure is past the
// model's register_limits: below every configuration within them (ranking scores span a
// few units), still ordered among themselves when nothing else is valid.
constexpr float kBeyondLimits = 1000.0f;

// The model serving the op on `target`; throws std::invalid_argument when there is none.
const OpModelInfo& serving_model(const CrossModel& model, const ops::Op& op, const host::Target& target) {
  if (std::string missing = missing_model(model, op.name(), target); !missing.empty()) {
    throw std::invalid_argument(missing);
  }
  return *model.serving(op.name(), target_class(target));
}

// Scores of space points by the model, each point scored once (thread-safe).
class PointScorer {
 public:
  // `bounded`: configurations past the model's register limits score kBeyondLimits lower.
  PointScorer(std::shared_ptr<const CrossModel> model, const Space& space, const host::Target& target, bool bounded)
      : model_(std::move(model)), space_(&space), traits_(model_traits(target)) {
    const OpModelInfo& info = serving_model(*model_, space.op(), target);
    cls_ = target_class(target);
    if (!bounded) return;
    for (const auto& [name, limit] : info.register_limits) {
      auto it = std::find(info.feature_names.begin(), info.feature_names.end(), name);
      if (it != info.feature_names.end()) limits_.emplace_back(static_cast<std::size_t>(it - info.feature_names.begin()), limit);
    }
  }

  // Scores of `points` in their order; the ones not seen yet in one predict call.
  std::vector<float> operator()(const std::vector<std::uint64_t>& points) {
    std::lock_guard lock(mutex_);
    if (scores_.size() + points.size() > kCacheLimit) scores_.clear();
    std::vector<std::uint64_t> fresh;
    std::unordered_set<std::uint64_t> queued;
    for (std::uint64_t p : points) {
      if (!scores_.contains(p) && queued.insert(p).second) fresh.push_back(p);
    }
    if (!fresh.empty() && !names_checked_) {
      // A model of other features than the op now has would rank garbage: refused.
      const OpModelInfo* info = model_->serving(space_->op().name(), cls_);
      if (cross_feature_names(space_->op(), space_->params(), space_->config(fresh.front()), traits_) !=
          info->feature_names) {
        throw std::invalid_argument("the " + std::string(space_->op().name()) + "/" + info->target_class +
                                    " cost model was trained on other features than this op has: retrain with "
                                    "kestrel cost-model train");
      }
      names_checked_ = true;
    }
    for (std::size_t begin = 0; begin < fresh.size(); begin += kBatch) {
      const std::size_t end = std::min(fresh.size(), begin + kBatch);
      std::vector<std::vector<float>> rows;
      rows.reserve(end - begin);
      for (std::size_t i = begin; i < end; ++i) {
        rows.push_back(cross_features(space_->op(), space_->params(), space_->config(fresh[i]), traits_));
      }
      std::vector<float> scored = model_->score_rows(space_->op().name(), cls_, rows);
      for (std::size_t i = begin; i < end; ++i) {
        scores_.emplace(fresh[i], scored[i - begin] - (beyond_limits(rows[i - begin]) ? kBeyondLimits : 0.0f));
      }
    }
    std::vector<float> out;
    out.reserve(points.size());
    for (std::uint64_t p : points) out.push_back(scores_.at(p));
    return out;
  }

  // Every point scored so far with its score.
  const std::unordered_map<std::uint64_t, float>& scored() const { return scores_; }

 private:
  // Whether a configuration's register pressure is past what the model saw fast.
  bool beyond_limits(const std::vector<float>& row) const {
    for (const auto& [index, limit] : limits_) {
      if (index < row.size() && row[index] > limit + 1e-5f) return true;
    }
    return false;
  }

  std::vector<std::pair<std::size_t, float>> limits_;  // feature index, highest squashed value
  std::shared_ptr<const CrossModel> model_;
  const Space* space_;
  ops::TargetTraits traits_;
  std::string cls_;
  std::mutex mutex_;
  bool names_checked_ = false;
  std::unordered_map<std::uint64_t, float> scores_;
};

// The valid point of `space` nearest to a configuration of another workload (its text,
// ops::format_config): each knob's value moved to the closest one of this workload's
// domain (by ratio for positive values); nothing when a knob is missing or the point is
// invalid here.
std::optional<std::uint64_t> nearest_point(const Space& space, const std::string& text) {
  std::map<std::string, std::int64_t> values;
  try {
    values = ops::parse_pairs(text);
  } catch (const ops::OpError&) {
    return std::nullopt;
  }
  std::vector<std::uint32_t> digits;
  for (const ops::Knob& knob : space.knobs()) {
    auto it = values.find(knob.name);
    if (it == values.end() || knob.values.empty()) return std::nullopt;
    auto distance = [want = it->second](std::int64_t v) {
      if (want > 0 && v > 0) return std::fabs(std::log2(static_cast<double>(v) / static_cast<double>(want)));
      return std::fabs(static_cast<double>(v - want)) + 64.0;
    };
    std::size_t best = 0;
    for (std::size_t i = 1; i < knob.values.size(); ++i) {
      if (distance(knob.values[i]) < distance(knob.values[best])) best = i;
    }
    digits.push_back(static_cast<std::uint32_t>(best));
  }
  std::uint64_t point = space.from_digits(digits);
  if (!space.valid(point)) return std::nullopt;
  return point;
}

double standard_deviation(const std::vector<float>& values) {
  if (values.size() < 2) return 0;
  double mean = std::accumulate(values.begin(), values.end(), 0.0) / static_cast<double>(values.size());
  double sum = 0;
  for (float v : values) sum += (v - mean) * (v - mean);
  return std::sqrt(sum / static_cast<double>(values.size() - 1));
}

}  // namespace

std::string missing_model(const CrossModel& model, std::string_view op, const host::Target& target) {
  const std::string cls = target_class(target);
  if (model.serving(op, cls)) return {};
  std::string has;
  for (const OpModelInfo& m : model.models()) has += (has.empty() ? "" : ", ") + m.op + "/" + m.target_class;
  const std::string family = class_family(cls);
  return "the cost model has no model for " + std::string(op) + " on " + cls + " targets" +
         (family.empty() ? "" : " or their family (" + family + ")") + " (it has: " + (has.empty() ? "none" : has) +
         "); kestrel cost-model train fits one from records of that op and target class";
}

ZeroShotPick zero_shot_pick(const CrossModel& model, const Space& space, const host::Target& target,
                            const ZeroShotOptions& options) {
  const auto started = Clock::now();
  // The scorer shares the model only for the duration of this call.
  PointScorer score(std::shared_ptr<const CrossModel>(&model, [](const CrossModel*) {}), space, target, true);
  Rng rng(options.seed);

  // ---- a uniform sample of the valid points, and the op's default -----------------
  std::vector<std::uint64_t> sample;
  std::unordered_set<std::uint64_t> drawn;
  try {
    std::uint64_t default_index = space.index(space.op().default_config(space.params(), space.target()));
    if (space.valid(default_index) && drawn.insert(default_index).second) sample.push_back(default_index);
  } catch (const ops::OpError&) {
    // a default outside the knob domains (a bug of the op) only loses one candidate
  }
  // The configurations that were fastest on the model's training workloads, moved onto
  // this workload's knob domains (each value to the nearest one there): good register
  // tiles and blockings often carry over to other shapes, and a sample may miss them.
  if (const OpModelInfo* info = model.serving(space.op().name(), target_class(target))) {
    for (const std::string& text : info->exemplars) {
      if (auto p = nearest_point(space, text); p && drawn.insert(*p).second) sample.push_back(*p);
    }
  }
  if (space.size() <= kExhaustive * options.samples) {
    // A small space (a depthwise convolution's few hundred points): every valid point.
    for (std::uint64_t p = 0; p < space.size(); ++p) {
      if (space.valid(p) && drawn.insert(p).second) sample.push_back(p);
    }
  }
  // Rejection sampling: a space with few valid points gives up after a few misses in a
  // row instead of drawing forever (duplicates count as misses too).
  for (int misses = 0; sample.size() < options.samples + 1 && misses < 8;) {
    std::optional<std::uint64_t> p = space.sample_valid(rng);
    if (!p || !drawn.insert(*p).second) {
      ++misses;
      continue;
    }
    misses = 0;
    sample.push_back(*p);
  }
  if (sample.empty()) {
    throw std::invalid_argument("zero-shot: no valid configuration of " + std::string(space.op().name()) + " " +
                                ops::format_params(space.params()) + " was found to score");
  }
  std::vector<float> sample_scores = score(sample);

  // ---- annealing chains over the model's scores, from the best of the sample --------
  std::vector<std::size_t> order(sample.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return sample_scores[a] != sample_scores[b] ? sample_scores[a] > sample_scores[b] : sample[a] < sample[b];
  });
  const std::size_t chains = std::min<std::size_t>(options.chains, sample.size());
  std::vector<std::uint64_t> at(chains);
  std::vector<float> at_score(chains);
  for (std::size_t c = 0; c < chains; ++c) {
    at[c] = sample[order[c]];
    at_score[c] = sample_scores[order[c]];
  }
  // Scores have no unit: the temperature is a share of their spread over the sample,
  // falling linearly to zero.
  const double spread = std::max(standard_deviation(sample_scores), 1e-6);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  for (unsigned step = 0; step < options.steps && chains > 0; ++step) {
    const double temperature =
        kStartTemperature * spread * (1.0 - static_cast<double>(step) / static_cast<double>(options.steps));
    std::vector<std::uint64_t> proposals;
    std::vector<std::size_t> movers;
    for (std::size_t c = 0; c < chains; ++c) {
      if (auto next = space.random_neighbour(at[c], rng)) {
        proposals.push_back(*next);
        movers.push_back(c);
      }
    }
    if (proposals.empty()) break;
    std::vector<float> proposed = score(proposals);
    for (std::size_t k = 0; k < movers.size(); ++k) {
      const std::size_t c = movers[k];
      const double gain = static_cast<double>(proposed[k]) - static_cast<double>(at_score[c]);
      if (gain >= 0 || (temperature > 0 && uniform(rng) < std::exp(gain / temperature))) {
        at[c] = proposals[k];
        at_score[c] = proposed[k];
      }
    }
  }

  // ---- every scored point, best first -----------------------------------------------
  std::vector<std::pair<float, std::uint64_t>> ranked;
  ranked.reserve(score.scored().size());
  for (const auto& [point, s] : score.scored()) ranked.emplace_back(s, point);
  const std::size_t top = std::min(options.top, ranked.size());
  std::partial_sort(ranked.begin(), ranked.begin() + static_cast<std::ptrdiff_t>(top), ranked.end(),
                    [](const auto& a, const auto& b) { return a.first != b.first ? a.first > b.first : a.second < b.second; });
  ZeroShotPick pick;
  for (std::size_t i = 0; i < top; ++i) {
    pick.points.push_back(ranked[i].second);
    pick.scores.push_back(ranked[i].first);
  }
  pick.scored = ranked.size();
  pick.elapsed = Clock::now() - started;
  return pick;
}

std::function<std::vector<float>(const std::vector<std::uint64_t>&)> model_prior(
    std::shared_ptr<const CrossModel> model, const Space& space, const host::Target& target) {
  // Unbounded: a warm start's measurements correct the model, and a margin of -1000 would
  // keep the search off those configurations long after the prior has faded.
  auto scorer = std::make_shared<PointScorer>(std::move(model), space, target, false);
  return [scorer](const std::vector<std::uint64_t>& points) { return (*scorer)(points); };
}

}  // namespace kestrel::tuner
