// The XGBoost cost model and the model-based annealing strategy ("sa") on synthetic costs
// over the gemm space: ranking quality on held-out points, failures ranked last, the
// untrained model, saving and loading, "sa" against random search, and transfer across
// workloads.
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <numeric>
#include <set>
#include <unordered_set>

#include "support/traits.h"
#include "kestrel/ops/op.h"
#include "kestrel/tuner/cost_model.h"
#include "kestrel/tuner/xgboost_cost_model.h"
#include "kestrel/tuner/features.h"
#include "kestrel/tuner/space.h"
#include "kestrel/tuner/strategy.h"

using namespace kestrel;
using namespace kestrel::tuner;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

double square(double x) { return x * x; }

// A smooth synthetic cost in seconds: a bowl in log2 of the tile sizes around a
// "good" configuration, penalties for some discrete choices, padding waste of the
// workload, all scaled by the workload's FLOPs (so workloads differ in magnitude).
double synthetic_cost(const ops::Params& p, const ops::Config& c) {
  auto l = [&](const char* knob) { return std::log2(static_cast<double>(c.at(knob))); };
  auto waste = [&](const char* dim, const char* tile) {
    double n = static_cast<double>(p.at(dim)), t = static_cast<double>(c.at(tile));
    double padded = std::ceil(n / t) * t;
    return (padded - n) / padded;
  };
  double x = 0.3 * square(l("mc") - 6) + 0.2 * square(l("nc") - 8) + 0.3 * square(l("kc") - 7) +
             0.6 * square(l("mr") - 2.5) + 0.5 * square(l("nr") - 4) + 0.5 * square(l("vec") - 3) +
             0.1 * square(l("unroll") - 1.5);
  x += c.at("order") == 1 ? 0.2 : 0.0;
  x += c.at("pack_b") == 0 ? 0.3 : 0.0;
  x += c.at("split") != 2 ? 0.1 : 0.0;
  x += 2.0 * (waste("M", "mc") + waste("N", "nc") + waste("K", "kc"));
  double flops = 2.0 * static_cast<double>(p.at("M") * p.at("N") * p.at("K"));
  return flops / 1e11 * std::exp(x);
}

double synthetic_cost(const Space& space, std::uint64_t index) {
  return synthetic_cost(space.params(), space.config(index));
}

// `count` distinct valid points.
std::vector<std::uint64_t> sample_points(const Space& space, std::size_t count, std::uint64_t seed) {
  Rng rng(seed);
  std::vector<std::uint64_t> out;
  std::unordered_set<std::uint64_t> seen;
  while (out.size() < count) {
    auto index = space.sample_valid(rng);
    REQUIRE(index);
    if (seen.insert(*index).second) out.push_back(*index);
  }
  return out;
}

std::vector<double> ranks(const std::vector<double>& values) {
  std::vector<std::size_t> order(values.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return values[a] < values[b]; });
  std::vector<double> out(values.size());
  for (std::size_t i = 0; i < order.size();) {
    std::size_t j = i;
    while (j + 1 < order.size() && values[order[j + 1]] == values[order[i]]) ++j;
    for (std::size_t k = i; k <= j; ++k) out[order[k]] = (static_cast<double>(i) + static_cast<double>(j)) / 2.0;
    i = j + 1;
  }
  return out;
}

// Spearman's rank correlation (ties get average ranks).
double spearman(const std::vector<double>& a, const std::vector<double>& b) {
  auto ra = ranks(a), rb = ranks(b);
  double n = static_cast<double>(a.size());
  double ma = std::accumulate(ra.begin(), ra.end(), 0.0) / n, mb = std::accumulate(rb.begin(), rb.end(), 0.0) / n;
  double cov = 0, va = 0, vb = 0;
  for (std::size_t i = 0; i < ra.size(); ++i) {
    cov += (ra[i] - ma) * (rb[i] - mb);
    va += square(ra[i] - ma);
    vb += square(rb[i] - mb);
  }
  return cov / std::sqrt(va * vb);
}

// Correlation of the model's scores with speed (-cost) on `points`.
double ranking_quality(const CostModel& model, const Space& space, const std::vector<std::uint64_t>& points) {
  std::vector<std::vector<float>> rows;
  std::vector<double> speed;
  for (auto index : points) {
    rows.push_back(feature_vector(space, index));
    speed.push_back(-synthetic_cost(space, index));
  }
  auto scores = model.predict(rows);
  return spearman(std::vector<double>(scores.begin(), scores.end()), speed);
}

ops::Params gemm_params(std::int64_t m, std::int64_t n, std::int64_t k) { return {{"M", m}, {"N", n}, {"K", k}}; }

}  // namespace

TEST_CASE("features have the same names for every workload and are finite", "[tuner][features]") {
  auto registry = ops::builtin_ops();
  const auto& gemm = registry.get("gemm");
  Space a(gemm, gemm_params(256, 256, 256), test::fixed_traits()), b(gemm, gemm_params(7, 1000, 33), test::fixed_traits());
  auto names = feature_names(gemm, a.params(), a.config(0));
  CHECK(names == feature_names(gemm, b.params(), b.config(b.size() - 1)));
  CHECK(std::set<std::string>(names.begin(), names.end()).size() == names.size());
  Rng rng(3);
  for (int i = 0; i < 50; ++i) {
    for (const Space* space : {&a, &b}) {
      auto index = space->sample_valid(rng);
      REQUIRE(index);
      auto row = feature_vector(*space, *index);
      REQUIRE(row.size() == names.size());
      for (float v : row) CHECK(std::isfinite(v));
    }
  }
  // The signed log transform: log2(1 + x), and -log2(1 + |x|) below zero.
  struct Fake final : ops::Op {
    std::string_view name() const override { return "fake"; }
    std::string_view description() const override { return "fake"; }
    std::vector<ops::ParamSpec> params() const override { return {}; }
    void validate(const ops::Params&) const override {}
    std::vector<ops::TensorSpec> tensors(const ops::Params&) const override { return {}; }
    double flops(const ops::Params&) const override { return 0; }
    std::vector<ops::Knob> knobs(const ops::Params&) const override { return {}; }
    std::string check(const ops::Params&, const ops::Config&, const ops::TargetTraits&) const override { return {}; }
    ops::Config default_config(const ops::Params&, const ops::TargetTraits&) const override { return {}; }
    std::vector<ops::Backend> backends() const override { return {}; }
    ops::KernelSource source(ops::Backend, const ops::Params&, const ops::Config&) const override { return {}; }
    ops::KernelSource reference(const ops::Params&) const override { return {}; }
    double tolerance(const ops::Params&) const override { return 0; }
  } fake;
  auto row = feature_vector(fake, {{"a", 0}, {"b", 3}, {"c", -7}}, {{"x", 255}});
  CHECK(row == std::vector<float>{0.0f, 2.0f, -3.0f, 8.0f});
}

TEST_CASE("an untrained cost model predicts zeros", "[tuner][cost_model]") {
  XgboostCostModel model(1);
  CHECK(!model.trained());
  CHECK(model.predict({{1, 2}, {3, 4}}) == std::vector<float>{0, 0});
  // One distinct outcome is nothing to learn from.
  model.fit({{1, 2}, {3, 4}}, {1.0, 1.0});
  CHECK(!model.trained());
  model.fit({{1, 2}, {3, 4}}, {kInf, kInf});
  CHECK(!model.trained());
  CHECK(model.predict({{1, 2}}) == std::vector<float>{0});
  CHECK_THROWS_AS(model.fit({{1, 2}}, {1.0, 2.0}), std::invalid_argument);
  model.fit({{1, 2}, {3, 4}}, {1.0, 2.0});
  CHECK(model.trained());
  CHECK_THROWS_AS(model.predict({{1, 2, 3}}), std::invalid_argument);
}

TEST_CASE("the cost model learns a synthetic ranking", "[tuner][cost_model]") {
  auto registry = ops::builtin_ops();
  Space space(registry.get("gemm"), gemm_params(256, 256, 256), test::fixed_traits());
  auto points = sample_points(space, 400, 11);
  std::vector<std::uint64_t> train(points.begin(), points.begin() + 200), held_out(points.begin() + 200, points.end());
  std::vector<std::vector<float>> rows;
  std::vector<double> costs;
  for (auto index : train) {
    rows.push_back(feature_vector(space, index));
    costs.push_back(synthetic_cost(space, index));
  }
  XgboostCostModel model(7);
  auto start = std::chrono::steady_clock::now();
  model.fit(rows, costs);
  auto fit_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  REQUIRE(model.trained());
  double rho = ranking_quality(model, space, held_out);
  INFO("Spearman on held-out points " << rho << ", fit " << fit_ms << " ms");
  CHECK(rho > 0.7);
  // Deterministic from the seed.
  XgboostCostModel again(7);
  again.fit(rows, costs);
  CHECK(again.predict({rows[0], rows[1]}) == model.predict({rows[0], rows[1]}));
}

TEST_CASE("a saved and loaded cost model predicts the same scores", "[tuner][cost_model]") {
  auto registry = ops::builtin_ops();
  Space space(registry.get("gemm"), gemm_params(256, 256, 256), test::fixed_traits());
  auto points = sample_points(space, 300, 13);
  std::vector<std::vector<float>> rows, held_out;
  std::vector<double> costs;
  for (std::size_t i = 0; i < points.size(); ++i) {
    (i < 150 ? rows : held_out).push_back(feature_vector(space, points[i]));
    if (i < 150) costs.push_back(i % 10 == 0 ? kInf : synthetic_cost(space, points[i]));
  }
  std::unique_ptr<CostModel> model = make_xgboost_model(4);
  CHECK_THROWS_WITH(model->save("/nonexistent/never.json"), Catch::Contains("not trained"));
  model->fit(rows, costs);
  REQUIRE(model->trained());
  const auto expected = model->predict(held_out);

  std::string dir_pattern = (std::filesystem::temp_directory_path() / "kestrel-model-XXXXXX").string();
  REQUIRE(mkdtemp(dir_pattern.data()) != nullptr);
  const std::filesystem::path dir = dir_pattern;
  for (const char* name : {"model.json", "model.bin"}) {
    INFO(name);
    const std::string path = (dir / name).string();
    model->save(path);
    std::unique_ptr<CostModel> loaded = make_xgboost_model(99);  // the seed does not matter once trained
    CHECK(!loaded->trained());
    loaded->load(path);
    CHECK(loaded->trained());
    CHECK(loaded->predict(held_out) == expected);
    CHECK_THROWS_AS(loaded->predict({{1.0f, 2.0f}}), std::invalid_argument);  // knows its feature count
  }

  // Errors name the path.
  XgboostCostModel fresh(1);
  const std::string missing = (dir / "missing.json").string();
  CHECK_THROWS_WITH(fresh.load(missing), Catch::Contains(missing));
  const std::string garbage = (dir / "garbage.json").string();
  std::ofstream(garbage) << "this is not a model\n";
  CHECK_THROWS_WITH(fresh.load(garbage), Catch::Contains(garbage));
  CHECK(!fresh.trained());  // a failed load leaves the model as it was
  CHECK_THROWS_WITH(model->save((dir / "no" / "such" / "dir.json").string()), Catch::Contains("no/such/dir.json"));
  std::filesystem::remove_all(dir);
}

TEST_CASE("failed candidates rank below every success", "[tuner][cost_model]") {
  auto registry = ops::builtin_ops();
  Space space(registry.get("gemm"), gemm_params(256, 256, 256), test::fixed_traits());
  auto points = sample_points(space, 400, 12);
  // Configurations with an 8-fold k-loop unroll "fail".
  auto cost = [&](std::uint64_t index) {
    return space.config(index).at("unroll") == 8 ? kInf : synthetic_cost(space, index);
  };
  std::vector<std::vector<float>> rows;
  std::vector<double> costs;
  for (std::size_t i = 0; i < 200; ++i) {
    rows.push_back(feature_vector(space, points[i]));
    costs.push_back(cost(points[i]));
  }
  REQUIRE(std::count(costs.begin(), costs.end(), kInf) > 20);
  XgboostCostModel model(3);
  model.fit(rows, costs);
  REQUIRE(model.trained());
  // In training, every failure scores below every success.
  auto scores = model.predict(rows);
  float worst_success = std::numeric_limits<float>::infinity(), best_failure = -worst_success;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    if (std::isinf(costs[i])) {
      best_failure = std::max(best_failure, scores[i]);
    } else {
      worst_success = std::min(worst_success, scores[i]);
    }
  }
  CHECK(best_failure < worst_success);
  // On held-out points, (almost) every failure/success pair is ordered right.
  std::vector<float> failures, successes;
  for (std::size_t i = 200; i < points.size(); ++i) {
    float score = model.predict({feature_vector(space, points[i])})[0];
    (std::isinf(cost(points[i])) ? failures : successes).push_back(score);
  }
  REQUIRE(!failures.empty());
  std::size_t right = 0;
  for (float f : failures) {
    for (float s : successes) right += f < s ? 1 : 0;
  }
  double share = static_cast<double>(right) / static_cast<double>(failures.size() * successes.size());
  INFO("failure/success pairs ordered right: " << share);
  CHECK(share > 0.98);
}

TEST_CASE("a model trained on another workload ranks a new one (transfer)", "[tuner][cost_model]") {
  auto registry = ops::builtin_ops();
  const auto& gemm = registry.get("gemm");
  Space source(gemm, gemm_params(256, 256, 256), test::fixed_traits()), target(gemm, gemm_params(384, 192, 512), test::fixed_traits());
  std::vector<std::vector<float>> rows;
  std::vector<double> costs;
  for (auto index : sample_points(source, 200, 21)) {
    auto config = source.config(index);
    rows.push_back(feature_vector(gemm, source.params(), config));
    costs.push_back(synthetic_cost(source.params(), config));
  }
  XgboostCostModel model(5);
  model.fit(rows, costs);
  double rho = ranking_quality(model, target, sample_points(target, 200, 22));
  INFO("Spearman on the new workload " << rho);
  CHECK(rho > 0.3);
}

namespace {

// The best synthetic cost `strategy` finds in `batches` batches of `size`.
double best_found(Strategy& strategy, const Space& space, int batches, std::size_t size) {
  double best = kInf;
  std::unordered_set<std::uint64_t> seen;
  for (int b = 0; b < batches; ++b) {
    auto batch = strategy.propose(size);
    REQUIRE(batch.size() == size);
    std::vector<Observation> outcomes;
    for (auto index : batch) {
      CHECK(space.valid(index));
      CHECK(seen.insert(index).second);
      double cost = synthetic_cost(space, index);
      outcomes.push_back({index, cost, true});
      best = std::min(best, cost);
    }
    strategy.observe(outcomes);
  }
  return best;
}

}  // namespace

TEST_CASE("sa beats random search on a synthetic cost", "[tuner][sa]") {
  auto registry = ops::builtin_ops();
  Space space(registry.get("gemm"), gemm_params(256, 256, 256), test::fixed_traits());
  double sa_log = 0, random_log = 0;
  for (std::uint64_t seed = 1; seed <= 3; ++seed) {
    StrategyOptions options;
    options.seed = seed;
    auto sa = make_strategy("sa", space, options);
    CHECK(sa->name() == "sa");
    auto random = make_strategy("random", space, options);
    double sa_best = best_found(*sa, space, 8, 16), random_best = best_found(*random, space, 8, 16);
    INFO("seed " << seed << ": sa " << sa_best << ", random " << random_best);
    sa_log += std::log(sa_best) / 3;
    random_log += std::log(random_best) / 3;
  }
  INFO("mean log best: sa " << sa_log << ", random " << random_log);
  CHECK(sa_log < random_log);
}

TEST_CASE("sa is reproducible from its seed and fast enough", "[tuner][sa]") {
  auto registry = ops::builtin_ops();
  Space space(registry.get("gemm"), gemm_params(256, 256, 256), test::fixed_traits());
  StrategyOptions options;
  options.seed = 9;
  auto a = make_strategy("sa", space, options), b = make_strategy("sa", space, options);
  std::vector<Observation> history;
  for (auto index : sample_points(space, 200, 31)) history.push_back({index, synthetic_cost(space, index), true});
  history[5] = {history[5].index, kInf, false};  // a failure among them
  a->observe(history);
  b->observe(history);
  auto start = std::chrono::steady_clock::now();
  auto first = a->propose(16);
  auto propose_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  INFO("sa propose(16) with 200 observations: " << propose_ms << " ms");
  CHECK(first == b->propose(16));
  REQUIRE(first.size() == 16);
  std::unordered_set<std::uint64_t> measured;
  for (const auto& o : history) measured.insert(o.index);
  for (auto index : first) {
    CHECK(space.valid(index));
    CHECK(measured.count(index) == 0);
  }
  // The model's picks are better than the history on average.
  double history_mean = 0, picked_mean = 0;
  for (std::size_t i = 0; i < history.size(); ++i) {
    if (history[i].ok) history_mean += std::log(history[i].cost) / static_cast<double>(history.size() - 1);
  }
  for (auto index : first) picked_mean += std::log(synthetic_cost(space, index)) / 16;
  CHECK(picked_mean < history_mean);
  CHECK(propose_ms < 5000);
}

TEST_CASE("sa uses transfer records before measuring anything", "[tuner][sa]") {
  auto registry = ops::builtin_ops();
  const auto& gemm = registry.get("gemm");
  Space source(gemm, gemm_params(256, 256, 256), test::fixed_traits()), target(gemm, gemm_params(384, 192, 512), test::fixed_traits());
  StrategyOptions options;
  for (auto index : sample_points(source, 200, 41)) {
    auto config = source.config(index);
    options.transfer.push_back({feature_vector(gemm, source.params(), config), synthetic_cost(source.params(), config)});
  }
  options.random_fraction = 0;
  auto sa = make_strategy("sa", target, options);
  double picked = 0, random = 0;
  for (auto index : sa->propose(16)) picked += std::log(synthetic_cost(target, index)) / 16;
  for (auto index : sample_points(target, 200, 42)) random += std::log(synthetic_cost(target, index)) / 200;
  INFO("mean log cost: sa with transfer " << picked << ", random " << random);
  CHECK(picked < random);

  StrategyOptions wrong;
  wrong.transfer.push_back({{1.0f, 2.0f}, 1.0});
  CHECK_THROWS_AS(make_strategy("sa", target, wrong), std::invalid_argument);
}
