// The cost model on XGBoost's C API: a pairwise ranking objective over feature vectors
// (see xgboost_cost_model.cpp for the choices). Files are XGBoost's own model format:
// JSON for a path ending in ".json", else XGBoost's binary format; in memory, XGBoost's
// UBJSON (what model files that embed a booster, such as the .kcm, hold).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kestrel/tuner/cost_model.h"

namespace kestrel::tuner {

// The booster's training parameters. The defaults are the per-session model's (tuned on
// the tuning loop's few hundred rows of one workload; see xgboost_cost_model.cpp); the
// cross-workload model (cross_model.cpp) trains with its own.
struct XgboostParams {
  int rounds = 80;
  double eta = 0.3;
  int max_depth = 6;
  double min_child_weight = 1;
  double subsample = 1;          // share of rows each tree sees
  double colsample_bytree = 1;   // share of features each tree sees
  int num_pairsample = 4;        // pairs sampled per row and round (rank:pairwise)
};

class XgboostCostModel final : public CostModel {
 public:
  explicit XgboostCostModel(std::uint64_t seed = 1, XgboostParams params = {});
  ~XgboostCostModel() override;
  XgboostCostModel(const XgboostCostModel&) = delete;
  XgboostCostModel& operator=(const XgboostCostModel&) = delete;

  void fit(const std::vector<std::vector<float>>& features, const std::vector<double>& costs) override;
  bool trained() const override;
  void fit(const std::vector<std::vector<float>>& features, const std::vector<double>& costs,
           const std::vector<unsigned>& groups, const std::vector<float>& base_margin) override;
  std::vector<float> predict(const std::vector<std::vector<float>>& features) const override;
  std::vector<float> predict(const std::vector<std::vector<float>>& features,
                             const std::vector<float>& base_margin) const override;
  void save(const std::string& path) const override;
  void load(const std::string& path) override;
  // The trained model as XGBoost's UBJSON bytes / replaces this model with such bytes.
  // Throw std::runtime_error (untrained model; bytes that are not an XGBoost model).
  std::string save_to_buffer() const;
  void load_from_buffer(std::string_view bytes);
  // Features per row of the trained model (0 while untrained).
  std::size_t columns() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kestrel::tuner
