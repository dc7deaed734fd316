// Tests of zero-shot picks: a cross-workload model trained on synthetic records of
// several gemm workloads picks, for workloads it never saw, distinct valid configurations
// best-scored first, in seconds, and clearly better than a random configuration; a model
// without the op is refused naming what it has.
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "kestrel/tuner/space.h"
#include "kestrel/tuner/tuning_loop.h"
#include "kestrel/tuner/zero_shot.h"
#include "tuner/synthetic_gemm.h"

namespace {

using namespace kestrel;
using Catch::Matchers::Contains;

// Costs of `n` random valid configurations of the space, sorted.
std::vector<double> random_costs(const tuner::Space& space, std::size_t n, std::uint64_t seed) {
  tuner::Rng rng(seed);
  std::vector<double> costs;
  while (costs.size() < n) {
    auto index = space.sample_valid(rng);
    REQUIRE(index);
    costs.push_back(test::synthetic_gemm_seconds(space.params(), space.config(*index)));
  }
  std::sort(costs.begin(), costs.end());
  return costs;
}

}  // namespace

TEST_CASE("zero-shot: picks for unseen workloads are distinct, valid, sorted and clearly better than random",
          "[zero_shot]") {
  const ops::Registry registry = ops::builtin_ops();
  const ops::Op& gemm = registry.get("gemm");
  const host::Target target = test::synthetic_target();
  const tuner::CrossModel& model = test::synthetic_gemm_model();

  for (const ops::Params& workload : test::synthetic_unseen_workloads()) {
    INFO(ops::format_params(workload));
    const tuner::Space space(gemm, workload, target.traits);
    tuner::ZeroShotOptions options;
    options.top = 8;
    const tuner::ZeroShotPick pick = tuner::zero_shot_pick(model, space, target, options);

    REQUIRE(pick.points.size() == 8);
    REQUIRE(pick.scores.size() == 8);
    CHECK(std::set<std::uint64_t>(pick.points.begin(), pick.points.end()).size() == 8);
    for (std::uint64_t p : pick.points) CHECK(space.valid(p));
    CHECK(std::is_sorted(pick.scores.begin(), pick.scores.end(), std::greater<>()));
    // The sample and the chains: thousands of configurations, one at a time never.
    CHECK(pick.scored > options.samples);
    // Seconds, not minutes (the bound is 5 s per workload; this space is small).
    CHECK(pick.elapsed.count() < 5.0);

    // The scores are the model's: the same as scoring the picks directly.
    std::vector<ops::Config> configs;
    for (std::uint64_t p : pick.points) configs.push_back(space.config(p));
    const std::vector<float> direct = model.score(gemm, workload, configs, target);
    for (std::size_t i = 0; i < direct.size(); ++i) CHECK(direct[i] == Approx(pick.scores[i]));

    // Clearly better than a random configuration: the first pick is within the best
    // tenth of random valid configurations.
    const std::vector<double> costs = random_costs(space, 400, 7);
    const double picked = test::synthetic_gemm_seconds(workload, space.config(pick.points.front()));
    CHECK(picked < costs[costs.size() / 2]);
    CHECK(picked <= costs[costs.size() / 10]);
  }
}

TEST_CASE("zero-shot: picks are reproducible from the seed", "[zero_shot]") {
  const ops::Registry registry = ops::builtin_ops();
  const host::Target target = test::synthetic_target();
  const tuner::Space space(registry.get("gemm"), test::synthetic_unseen_workloads().front(), target.traits);
  tuner::ZeroShotOptions options;
  options.top = 4;
  options.samples = 512;
  const auto a = tuner::zero_shot_pick(test::synthetic_gemm_model(), space, target, options);
  const auto b = tuner::zero_shot_pick(test::synthetic_gemm_model(), space, target, options);
  CHECK(a.points == b.points);
  CHECK(a.scored == b.scored);
}

TEST_CASE("zero-shot: a model without the op or the target class is refused, naming what it has", "[zero_shot]") {
  const ops::Registry registry = ops::builtin_ops();
  const tuner::CrossModel& model = test::synthetic_gemm_model();

  // Another op.
  const host::Target avx2 = test::synthetic_target();
  const ops::Op& conv = registry.get("conv2d_nchwc");
  const ops::Params conv_workload =
      ops::parse_params(conv, "N=1,C=16,H=14,W=14,K=16,R=3,S=3,stride=1,pad=1,block=8");
  const tuner::Space conv_space(conv, conv_workload, avx2.traits);
  CHECK_THROWS_MATCHES(tuner::zero_shot_pick(model, conv_space, avx2), std::invalid_argument,
                       Catch::Matchers::Predicate<std::invalid_argument>([](const std::invalid_argument& e) {
                         const std::string what = e.what();
                         return what.find("conv2d_nchwc") != std::string::npos &&
                                what.find("gemm/x86") != std::string::npos;
                       }));
  CHECK_THAT(tuner::missing_model(model, "conv2d_nchwc", avx2), Contains("gemm/x86"));
  CHECK(tuner::missing_model(model, "gemm", avx2).empty());

  // Another class of the family: the family's model answers.
  const host::Target avx512 = host::parse_target("x86_64-linux-gnu", "skylake-avx512");
  CHECK(tuner::missing_model(model, "gemm", avx512).empty());
  const tuner::Space wide_space(registry.get("gemm"), test::synthetic_unseen_workloads().front(), avx512.traits);
  CHECK_FALSE(tuner::zero_shot_pick(model, wide_space, avx512).points.empty());

  // The same op on a target of another family (AArch64 NEON).
  const host::Target neon = host::parse_target("aarch64-linux-gnu", "cortex-a72");
  const tuner::Space gemm_space(registry.get("gemm"), test::synthetic_unseen_workloads().front(), neon.traits);
  CHECK_THROWS_AS(tuner::zero_shot_pick(model, gemm_space, neon), std::invalid_argument);
  CHECK_THAT(tuner::missing_model(model, "gemm", neon),
             Contains("neon") && Contains("family (arm)") && Contains("gemm/x86"));
  CHECK_THROWS_AS(tuner::model_prior(std::shared_ptr<const tuner::CrossModel>(&model, [](const tuner::CrossModel*) {}),
                                     gemm_space, neon),
                  std::invalid_argument);
}

TEST_CASE("zero-shot: the prior scores points as the model does, each point once", "[zero_shot]") {
  const ops::Registry registry = ops::builtin_ops();
  const ops::Op& gemm = registry.get("gemm");
  const host::Target target = test::synthetic_target();
  const ops::Params workload = test::synthetic_unseen_workloads().back();
  const tuner::Space space(gemm, workload, target.traits);
  const tuner::CrossModel& model = test::synthetic_gemm_model();
  auto prior = tuner::model_prior(std::shared_ptr<const tuner::CrossModel>(&model, [](const tuner::CrossModel*) {}),
                                  space, target);

  tuner::Rng rng(3);
  std::vector<std::uint64_t> points;
  for (int i = 0; i < 20; ++i) points.push_back(*space.sample_valid(rng));
  points.push_back(points.front());  // a repeat scores the same
  const std::vector<float> scores = prior(points);
  REQUIRE(scores.size() == points.size());
  CHECK(scores.back() == scores.front());
  std::vector<ops::Config> configs;
  for (std::uint64_t p : points) configs.push_back(space.config(p));
  const std::vector<float> direct = model.score(gemm, workload, configs, target);
  for (std::size_t i = 0; i < scores.size(); ++i) CHECK(scores[i] == Approx(direct[i]));
  // Asked again (from the cache), the same.
  CHECK(prior(points) == scores);
}

TEST_CASE("zero-shot: picks stay within the register pressure of the training workloads' fastest configurations",
          "[zero_shot]") {
  const ops::Registry registry = ops::builtin_ops();
  const ops::Op& gemm = registry.get("gemm");
  const host::Target target = test::synthetic_target();
  const ops::Params workload = test::synthetic_unseen_workloads().front();
  const tuner::Space space(gemm, workload, target.traits);
  const ops::TargetTraits traits = tuner::model_traits(target);
  tuner::Rng rng(1);
  const auto names = tuner::cross_feature_names(gemm, workload, space.config(*space.sample_valid(rng)), traits);
  auto index_of = [&](const std::string& name) {
    auto it = std::find(names.begin(), names.end(), name);
    REQUIRE(it != names.end());
    return static_cast<std::size_t>(it - names.begin());
  };
  tuner::ZeroShotOptions options;
  options.top = 8;
  auto within = [&](const tuner::CrossModel& model, const std::vector<std::pair<std::string, float>>& limits) {
    const tuner::ZeroShotPick pick = tuner::zero_shot_pick(model, space, target, options);
    REQUIRE_FALSE(pick.points.empty());
    for (std::uint64_t p : pick.points) {
      const auto row = tuner::cross_features(gemm, workload, space.config(p), traits);
      for (const auto& [name, limit] : limits) CHECK(row[index_of(name)] <= limit + 1e-5f);
    }
  };

  // The model's own limits: one per register feature, from its training data.
  const tuner::CrossModel& model = test::synthetic_gemm_model();
  const auto& limits = model.models().front().register_limits;
  REQUIRE(limits.size() == 2);  // gemm's register and accumulator shares
  within(model, limits);

  // A tighter limit (the op's default's own pressure) binds: every pick is at or below it,
  // and the file keeps it.
  const auto default_row = tuner::cross_features(gemm, workload, gemm.default_config(workload, target.traits), traits);
  const std::string path = (std::filesystem::temp_directory_path() / ("kestrel-limits-" + tuner::new_session_id() + ".kcm")).string();
  model.save(path);
  nlohmann::json file = nlohmann::json::parse(std::ifstream(path));
  std::vector<std::pair<std::string, float>> tight;
  for (const auto& [name, limit] : limits) {
    tight.emplace_back(name, default_row[index_of(name)]);
    file["models"][0]["register_limits"][name] = tight.back().second;
  }
  std::ofstream(path) << file.dump();
  const tuner::CrossModel tightened = tuner::CrossModel::load(path);
  CHECK(tightened.models().front().register_limits == tight);
  within(tightened, tight);
  // A limit naming no feature of the model is a damaged file.
  file["models"][0]["register_limits"]["cross.nothing/registers"] = 1.0;
  std::ofstream(path) << file.dump();
  CHECK_THROWS_WITH(tuner::CrossModel::load(path), Contains("register limit") && Contains("cross.nothing/registers"));
  std::filesystem::remove(path);
}
