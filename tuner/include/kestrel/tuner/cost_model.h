// The learned cost model: predicts, from feature vectors of configurations (features.h),
// a score per configuration: higher means faster. Only the order of the scores means
// anything. XGBoost is the one implementation (xgboost_cost_model.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace kestrel::tuner {

class CostModel {
 public:
  virtual ~CostModel() = default;

  // Trains from scratch on (features, cost) pairs; cost in seconds, +infinity for
  // failed candidates (they rank below everything). Needs at least 2 distinct costs;
  // otherwise the model stays untrained. Throws std::invalid_argument on rows of
  // different lengths, std::runtime_error on an error of the implementation.
  virtual void fit(const std::vector<std::vector<float>>& features, const std::vector<double>& costs) = 0;
  // The same with ranking groups (`groups`: sizes of consecutive runs of rows that are
  // comparable, e.g. one workload on one device class, summing to the row count; empty:
  // one group; labels are relative to each group's best) and a base margin per row
  // (added to the model's output in training, so the model learns a correction to it;
  // empty: none). Throws std::invalid_argument on sizes that do not add up.
  virtual void fit(const std::vector<std::vector<float>>& features, const std::vector<double>& costs,
                   const std::vector<unsigned>& groups, const std::vector<float>& base_margin) = 0;
  virtual bool trained() const = 0;
  // Scores, one per row; all zero while untrained. Throws std::invalid_argument for rows
  // of another length than the model was trained on.
  virtual std::vector<float> predict(const std::vector<std::vector<float>>& features) const = 0;
  // Scores with a base margin per row added (as fitted with one; it replaces the model's
  // global bias, so scores move by the margin up to a constant); an empty margin is none.
  virtual std::vector<float> predict(const std::vector<std::vector<float>>& features,
                                     const std::vector<float>& base_margin) const = 0;
  // Writes the trained model to `path` / replaces this model with the one at `path`.
  // Throw std::runtime_error naming the path (untrained model, unreadable or unwritable
  // file, not a model).
  virtual void save(const std::string& path) const = 0;
  virtual void load(const std::string& path) = 0;
};

// An XGBoost model (XgboostCostModel), deterministic for a seed.
std::unique_ptr<CostModel> make_xgboost_model(std::uint64_t seed = 1);

}  // namespace kestrel::tuner
