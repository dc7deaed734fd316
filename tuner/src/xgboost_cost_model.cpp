// The learned cost model on XGBoost's C API.
//
// Objective: "rank:pairwise" with every row in one query group, as AutoTVM's XGBTuner
// ("rank" loss). The search only needs an order over configurations, and a pairwise
// ranking is insensitive to the scale of the costs, which differs by orders of magnitude
// across workloads and devices; failed candidates simply get the lowest label. Labels
// are relative throughputs, best_cost / cost in (0, 1], and 0 for failures, so every
// failure ranks below every success in training. Four pairs are sampled per row and
// round (XGBoost's default is one): on the synthetic tests this took the share of
// held-out failure/success pairs ordered correctly from 0.996 to 1.0 and the held-out
// rank correlation from 0.935 to 0.95. A regression on -log(cost) (failures one unit
// below the slowest success; kObjective below) did about as well (0.944, and 0.92 vs
// 0.92 across workloads); ranking stays the choice for its scale invariance.
//
// Booster: gbtree, depth 6, eta 0.3, 80 rounds, exact tree method, one thread, the
// constructor's seed: deterministic; ~40 ms to train on 200 rows of ~45 features.
//
// Other parameters (XgboostParams) are for other uses: the cross-workload model trains
// with more rounds, a lower eta and subsampling (cross_model.cpp says why).
//
// save/load use XGBoost's model files (XGBoosterSaveModel / XGBoosterLoadModel): the
// trees, the objective and the number of features, which is all predict() needs.
#include "kestrel/tuner/xgboost_cost_model.h"

#include <xgboost/c_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <stdexcept>

namespace kestrel::tuner {
namespace {

enum class Objective { rank_pairwise, regression_log_cost };
constexpr Objective kObjective = Objective::rank_pairwise;

void check(int rc, const char* what) {
  if (rc != 0) throw std::runtime_error(std::string("xgboost: ") + what + " failed: " + XGBGetLastError());
}

// Move-only owners of XGBoost handles.
class DMatrix {
 public:
  // Rows of equal length `cols`, copied into XGBoost's own storage.
  DMatrix(const std::vector<std::vector<float>>& rows, std::size_t cols) {
    std::vector<float> dense;
    dense.reserve(rows.size() * cols);
    for (const auto& row : rows) dense.insert(dense.end(), row.begin(), row.end());
    check(XGDMatrixCreateFromMat(dense.data(), rows.size(), cols, std::numeric_limits<float>::quiet_NaN(), &handle_),
          "creating a DMatrix");
  }
  ~DMatrix() {
    if (handle_) XGDMatrixFree(handle_);
  }
  DMatrix(const DMatrix&) = delete;
  DMatrix& operator=(const DMatrix&) = delete;
  DMatrixHandle get() const { return handle_; }

 private:
  DMatrixHandle handle_ = nullptr;
};

class Booster {
 public:
  // An empty booster, to load a model into.
  Booster() { check(XGBoosterCreate(nullptr, 0, &handle_), "creating a booster"); }
  explicit Booster(const DMatrix& train) {
    DMatrixHandle cache[] = {train.get()};
    check(XGBoosterCreate(cache, 1, &handle_), "creating a booster");
  }
  ~Booster() {
    if (handle_) XGBoosterFree(handle_);
  }
  Booster(const Booster&) = delete;
  Booster& operator=(const Booster&) = delete;
  BoosterHandle get() const { return handle_; }
  void set(const char* name, const std::string& value) {
    check(XGBoosterSetParam(handle_, name, value.c_str()), ("setting parameter " + std::string(name)).c_str());
  }

 private:
  BoosterHandle handle_ = nullptr;
};

void silence_xgboost() {
  // Global (process-wide) and idempotent: XGBoost warns about nothing we want printed.
  static const int rc = XGBSetGlobalConfig(R"({"verbosity": 0})");
  check(rc, "setting the global verbosity");
}

bool failed(double cost) { return !(cost > 0) || !std::isfinite(cost); }

}  // namespace

struct XgboostCostModel::Impl {
  std::uint64_t seed = 1;
  XgboostParams params;
  std::size_t columns = 0;
  std::unique_ptr<Booster> booster;  // null while untrained
};

XgboostCostModel::XgboostCostModel(std::uint64_t seed, XgboostParams params) : impl_(std::make_unique<Impl>()) {
  impl_->seed = seed;
  impl_->params = params;
  silence_xgboost();
}

XgboostCostModel::~XgboostCostModel() = default;

void XgboostCostModel::fit(const std::vector<std::vector<float>>& features, const std::vector<double>& costs) {
  fit(features, costs, {}, {});
}

void XgboostCostModel::fit(const std::vector<std::vector<float>>& features, const std::vector<double>& costs,
                           const std::vector<unsigned>& groups, const std::vector<float>& base_margin) {
  if (features.size() != costs.size()) {
    throw std::invalid_argument("cost model: " + std::to_string(features.size()) + " feature rows but " +
                                std::to_string(costs.size()) + " costs");
  }
  if (!base_margin.empty() && base_margin.size() != features.size()) {
    throw std::invalid_argument("cost model: " + std::to_string(features.size()) + " feature rows but " +
                                std::to_string(base_margin.size()) + " base margins");
  }
  std::size_t grouped = 0;
  for (unsigned size : groups) grouped += size;
  if (!groups.empty() && grouped != features.size()) {
    throw std::invalid_argument("cost model: groups of " + std::to_string(grouped) + " rows in all for " +
                                std::to_string(features.size()) + " feature rows");
  }
  impl_->booster.reset();
  impl_->columns = 0;
  if (features.empty()) return;
  const std::size_t columns = features.front().size();
  for (const auto& row : features) {
    if (row.size() != columns) {
      throw std::invalid_argument("cost model: feature rows of different lengths (" + std::to_string(columns) +
                                  " and " + std::to_string(row.size()) + ")");
    }
  }
  if (columns == 0) return;

  // One group of everything when none are given.
  std::vector<unsigned> sizes = groups;
  if (sizes.empty()) sizes.push_back(static_cast<unsigned>(features.size()));

  // Labels within each group; training needs two distinct outcomes in some group.
  std::vector<float> labels(costs.size());
  bool learnable = false;
  std::size_t begin = 0;
  for (unsigned size : sizes) {
    const std::size_t end = begin + size;
    std::vector<double> distinct;
    double best = std::numeric_limits<double>::infinity(), worst = 0;
    for (std::size_t i = begin; i < end; ++i) {
      double key = failed(costs[i]) ? std::numeric_limits<double>::infinity() : costs[i];
      if (std::find(distinct.begin(), distinct.end(), key) == distinct.end()) distinct.push_back(key);
      if (!failed(costs[i])) {
        best = std::min(best, costs[i]);
        worst = std::max(worst, costs[i]);
      }
    }
    if (distinct.size() >= 2) learnable = true;
    for (std::size_t i = begin; i < end; ++i) {
      if (kObjective == Objective::rank_pairwise) {
        labels[i] = failed(costs[i]) ? 0.0f : static_cast<float>(best / costs[i]);
      } else {
        // -log(cost); failures one unit (a factor e) below the slowest success.
        double floor = std::isinf(best) ? 0.0 : -std::log(worst) - 1.0;
        labels[i] = static_cast<float>(failed(costs[i]) ? floor : -std::log(costs[i]));
      }
    }
    begin = end;
  }
  if (!learnable) return;

  DMatrix train(features, columns);
  check(XGDMatrixSetFloatInfo(train.get(), "label", labels.data(), labels.size()), "setting labels");
  if (kObjective == Objective::rank_pairwise) {
    check(XGDMatrixSetUIntInfo(train.get(), "group", sizes.data(), sizes.size()), "setting the query groups");
  }
  if (!base_margin.empty()) {
    check(XGDMatrixSetFloatInfo(train.get(), "base_margin", base_margin.data(), base_margin.size()),
          "setting the base margin");
  }
  auto booster = std::make_unique<Booster>(train);
  booster->set("verbosity", "0");
  booster->set("booster", "gbtree");
  booster->set("objective", kObjective == Objective::rank_pairwise ? "rank:pairwise" : "reg:squarederror");
  booster->set("tree_method", "exact");
  const XgboostParams& p = impl_->params;
  booster->set("max_depth", std::to_string(p.max_depth));
  booster->set("eta", std::to_string(p.eta));
  booster->set("gamma", "0.0001");
  booster->set("min_child_weight", std::to_string(p.min_child_weight));
  booster->set("subsample", std::to_string(p.subsample));
  booster->set("colsample_bytree", std::to_string(p.colsample_bytree));
  booster->set("lambda", "1");
  booster->set("alpha", "0");
  booster->set("nthread", "1");
  if (kObjective == Objective::rank_pairwise) booster->set("num_pairsample", std::to_string(p.num_pairsample));
  booster->set("seed", std::to_string(impl_->seed % 2147483647u));
  for (int round = 0; round < p.rounds; ++round) {
    check(XGBoosterUpdateOneIter(booster->get(), round, train.get()), "training a round");
  }
  impl_->booster = std::move(booster);
  impl_->columns = columns;
}

bool XgboostCostModel::trained() const { return impl_->booster != nullptr; }

std::vector<float> XgboostCostModel::predict(const std::vector<std::vector<float>>& features) const {
  return predict(features, {});
}

std::vector<float> XgboostCostModel::predict(const std::vector<std::vector<float>>& features,
                                             const std::vector<float>& base_margin) const {
  if (!base_margin.empty() && base_margin.size() != features.size()) {
    throw std::invalid_argument("cost model: " + std::to_string(features.size()) + " feature rows but " +
                                std::to_string(base_margin.size()) + " base margins");
  }
  if (!impl_->booster || features.empty()) {
    return base_margin.empty() ? std::vector<float>(features.size(), 0.0f) : base_margin;
  }
  for (const auto& row : features) {
    if (row.size() != impl_->columns) {
      throw std::invalid_argument("cost model: a feature row has " + std::to_string(row.size()) +
                                  " values, the model was trained on " + std::to_string(impl_->columns));
    }
  }
  DMatrix rows(features, impl_->columns);
  if (!base_margin.empty()) {
    check(XGDMatrixSetFloatInfo(rows.get(), "base_margin", base_margin.data(), base_margin.size()),
          "setting the base margin");
  }
  bst_ulong length = 0;
  const float* result = nullptr;
  // Option 1 (output_margin): the raw sum of the trees plus the base margin; for a
  // ranking objective the same order as the plain prediction.
  check(XGBoosterPredict(impl_->booster->get(), rows.get(), base_margin.empty() ? 0 : 1, 0, 0, &length, &result),
        "predicting");
  if (length != features.size()) {
    throw std::runtime_error("xgboost: predicted " + std::to_string(length) + " values for " +
                             std::to_string(features.size()) + " rows");
  }
  return std::vector<float>(result, result + length);
}

void XgboostCostModel::save(const std::string& path) const {
  if (!impl_->booster) throw std::runtime_error("cost model: cannot save to '" + path + "': the model is not trained");
  if (XGBoosterSaveModel(impl_->booster->get(), path.c_str()) != 0) {
    throw std::runtime_error("cost model: cannot save to '" + path + "': " + XGBGetLastError());
  }
}

void XgboostCostModel::load(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    throw std::runtime_error("cost model: cannot load '" + path + "': no such file");
  }
  auto booster = std::make_unique<Booster>();
  if (XGBoosterLoadModel(booster->get(), path.c_str()) != 0) {
    throw std::runtime_error("cost model: cannot load '" + path + "' (not an XGBoost model?): " + XGBGetLastError());
  }
  bst_ulong columns = 0;
  check(XGBoosterGetNumFeature(booster->get(), &columns), "reading the number of features");
  if (columns == 0) throw std::runtime_error("cost model: cannot load '" + path + "': the model has no features");
  booster->set("nthread", "1");
  impl_->booster = std::move(booster);
  impl_->columns = static_cast<std::size_t>(columns);
}

std::string XgboostCostModel::save_to_buffer() const {
  if (!impl_->booster) throw std::runtime_error("cost model: cannot save: the model is not trained");
  bst_ulong length = 0;
  const char* bytes = nullptr;
  check(XGBoosterSaveModelToBuffer(impl_->booster->get(), R"({"format": "ubj"})", &length, &bytes),
        "saving the model to a buffer");
  return std::string(bytes, bytes + length);
}

void XgboostCostModel::load_from_buffer(std::string_view bytes) {
  auto booster = std::make_unique<Booster>();
  if (XGBoosterLoadModelFromBuffer(booster->get(), bytes.data(), bytes.size()) != 0) {
    throw std::runtime_error(std::string("cost model: not an XGBoost model: ") + XGBGetLastError());
  }
  bst_ulong columns = 0;
  check(XGBoosterGetNumFeature(booster->get(), &columns), "reading the number of features");
  if (columns == 0) throw std::runtime_error("cost model: the model has no features");
  booster->set("nthread", "1");
  impl_->booster = std::move(booster);
  impl_->columns = static_cast<std::size_t>(columns);
}

std::size_t XgboostCostModel::columns() const { return impl_->booster ? impl_->columns : 0; }

std::unique_ptr<CostModel> make_xgboost_model(std::uint64_t seed) { return std::make_unique<XgboostCostModel>(seed); }

}  // namespace kestrel::tuner
