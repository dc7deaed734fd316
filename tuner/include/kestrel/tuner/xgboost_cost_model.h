// The cost model on XGBoost's C API: a pairwise ranking objective over feature vectors
// (see xgboost_cost_model.cpp for the choices). Files are XGBoost's own model format:
// JSON for a path ending in ".json", else XGBoost's binary format.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kestrel/tuner/cost_model.h"

namespace kestrel::tuner {

class XgboostCostModel final : public CostModel {
 public:
  explicit XgboostCostModel(std::uint64_t seed = 1);
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

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kestrel::tuner
