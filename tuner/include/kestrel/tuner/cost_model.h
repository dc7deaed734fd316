// The learned cost model: XGBoost (C API) with a ranking objective over feature vectors
// of configurations. It predicts a score per configuration: higher means faster.
#pragma once

#include <memory>
#include <string>
#include <vector>

namespace kestrel::tuner {

class CostModel {
 public:
  explicit CostModel(std::uint64_t seed = 1);
  ~CostModel();
  CostModel(const CostModel&) = delete;
  CostModel& operator=(const CostModel&) = delete;

  // Trains from scratch on (features, cost) pairs; cost in seconds, +infinity for
  // failed candidates (they rank below everything). Needs at least 2 distinct costs;
  // otherwise the model stays untrained. Throws std::runtime_error on an XGBoost error.
  void fit(const std::vector<std::vector<float>>& features, const std::vector<double>& costs);
  bool trained() const;
  // Scores, one per row; all zero while untrained.
  std::vector<float> predict(const std::vector<std::vector<float>>& features) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kestrel::tuner
