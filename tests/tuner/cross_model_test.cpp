// The cross-workload cost model: target classes, cross features, training on records of
// many gemm workloads measured by a synthetic cost function, held-out ranking quality
// above chance, the .kcm file (save/load round trip, strict refusals, atomic save) and
// the errors for records too few to learn from.
#include "kestrel/tuner/cross_model.h"

#include <catch2/catch.hpp>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "kestrel/host/target.h"
#include "kestrel/tuner/features.h"
#include "kestrel/tuner/space.h"
#include "support/traits.h"

using namespace kestrel;
using namespace kestrel::tuner;
using namespace kestrel::records;
using Catch::Matchers::Contains;

namespace {

namespace fs = std::filesystem;

class TempDir {
 public:
  TempDir() {
    char pattern[] = "/tmp/kestrel-cross-XXXXXX";
    if (::mkdtemp(pattern) == nullptr) FAIL("mkdtemp failed");
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string file(const std::string& name) const { return path_ + "/" + name; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// A cost in seconds for a gemm configuration that depends on what carries across shapes:
// vector width against the target's, micro-tile size, padding waste, the packed block's
// footprint against L2, and parallel-free flops.
double synthetic_cost(const ops::Params& p, const ops::Config& c) {
  const double m = static_cast<double>(p.at("M")), n = static_cast<double>(p.at("N")),
               k = static_cast<double>(p.at("K"));
  const double mr = static_cast<double>(c.at("mr")), nr = static_cast<double>(c.at("nr")),
               vec = static_cast<double>(c.at("vec")), kc = static_cast<double>(c.at("kc")),
               nc = static_cast<double>(c.at("nc"));
  double efficiency = vec == 8 ? 1.0 : vec == 16 ? 0.6 : vec == 4 ? 0.45 : 0.15;
  efficiency *= std::min(1.0, mr * nr / 48.0) * 0.8 + 0.2;
  const double padded = std::ceil(m / mr) * mr * std::ceil(n / nr) * nr;
  efficiency *= (m * n) / padded;
  const double block = std::min(kc, k) * std::min(nc, n) * 4;
  if (block > 512.0 * 1024) efficiency *= 0.6;
  efficiency *= c.at("unroll") >= 4 ? 1.0 : 0.9;
  return 2 * m * n * k / (efficiency * 50e9);
}

const ops::TargetId kTarget = *ops::TargetId::parse("x86_64-linux-gnu (znver3)");

std::vector<Record> make_records(const ops::Op& op, const std::vector<std::string>& shapes, int per_workload,
                                 std::uint64_t seed, const ops::TargetId& target = kTarget) {
  std::vector<Record> out;
  Rng rng(seed);
  const ops::TargetTraits traits = traits_of_record_target(target);
  for (const auto& shape : shapes) {
    const ops::Params params = ops::parse_params(op, shape);
    Space space(op, params, traits);
    for (int i = 0; i < per_workload; ++i) {
      auto index = space.sample_valid(rng);
      REQUIRE(index);
      Record r;
      r.op = std::string(op.name());
      r.workload = params;
      r.target = target;
      r.device_class = {"local", "AMD EPYC", "fp"};
      r.config = space.config(*index);
      r.cost = synthetic_cost(params, r.config);
      r.status = kernel::Status::ok;
      if (i % 13 == 5) {  // some failures
        r.status = kernel::Status::wrong_answer;
        r.cost = std::numeric_limits<double>::infinity();
      }
      out.push_back(r);
    }
  }
  return out;
}

const std::vector<std::string> kTrainShapes = {"64x256x128",  "128x128x512", "256x64x256",  "96x384x192",
                                               "200x100x300", "512x256x64",  "32x1024x256", "160x96x768",
                                               "384x384x128", "48x200x1000"};
const std::vector<std::string> kTestShapes = {"128x512x256", "300x200x100", "72x640x320"};

host::Target avx2_target() { return host::parse_target("x86_64-linux-gnu", "znver3"); }

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void write(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

}  // namespace

TEST_CASE("target classes come from targets and from records' target texts", "[tuner][cross_model]") {
  CHECK(target_class(*ops::TargetId::parse("x86_64-linux-gnu (znver3)")) == "avx2");
  CHECK(target_class(*ops::TargetId::parse("x86_64-linux-gnu (skylake-avx512)")) == "avx512");
  CHECK(target_class(*ops::TargetId::parse("x86_64-linux-gnu")) == "sse");
  CHECK(target_class(*ops::TargetId::parse("x86_64-linux-gnu (+avx2,+fma)")) == "avx2");
  CHECK(target_class(*ops::TargetId::parse("aarch64-linux-gnu (cortex-a72)")) == "neon");
  CHECK(target_class(*ops::TargetId::parse("cuda sm_90")) == "cuda");
  CHECK(target_class(*ops::TargetId::parse("opencl")) == "opencl");
  CHECK(target_class(*ops::TargetId::parse("mips-linux-gnu")).empty());
  CHECK(target_class(avx2_target()) == "avx2");
  CHECK(traits_of_record_target(*ops::TargetId::parse("x86_64-linux-gnu (znver3)")).vector_floats == 8);
  CHECK_THROWS_AS(traits_of_record_target(*ops::TargetId::parse("sparc")), std::invalid_argument);
}

TEST_CASE("cross features add cache shares and the register file under fixed names", "[tuner][cross_model]") {
  auto registry = ops::builtin_ops();
  const ops::Op& gemm = registry.get("gemm");
  const auto traits = test::fixed_traits();
  const ops::Params a = ops::parse_params(gemm, "64x64x64"), b = ops::parse_params(gemm, "1024x512x2048");
  const ops::Config ca = gemm.default_config(a, traits), cb = gemm.default_config(b, traits);
  const auto names = cross_feature_names(gemm, a, ca, traits);
  CHECK(names == cross_feature_names(gemm, b, cb, ops::TargetTraits::of(ops::Isa::avx512)));
  CHECK(cross_features(gemm, a, ca, traits).size() == names.size());
  const auto find = [&](const std::string& name) {
    auto it = std::find(names.begin(), names.end(), name);
    REQUIRE(it != names.end());
    return static_cast<std::size_t>(it - names.begin());
  };
  const auto row = cross_features(gemm, b, cb, traits);
  // b_block_bytes over L2 is the squashed ratio of the op's own feature to 512 KiB.
  const auto op_features = gemm.features(b, cb);
  double bytes = 0;
  for (const auto& [name, value] : op_features) {
    if (name == "gemm.b_block_bytes") bytes = value;
  }
  CHECK(row[find("cross.gemm.b_block_bytes/l2")] == Approx(std::log2(1 + bytes / (512 << 10))));
  CHECK(row[find("target.vector_floats")] == Approx(std::log2(9.0)));
  CHECK(row[find("target.fma")] == Approx(1.0));
}

TEST_CASE("a cross model trained on some gemm workloads ranks unseen ones well above chance",
          "[tuner][cross_model]") {
  auto registry = ops::builtin_ops();
  const ops::Op& gemm = registry.get("gemm");
  const auto records = make_records(gemm, kTrainShapes, 40, 7);
  TrainOptions options;
  options.folds = 5;
  std::vector<std::string> progress;
  options.progress = [&](const std::string& line) { progress.push_back(line); };
  const CrossModel model = CrossModel::train(records, registry, options);
  REQUIRE(model.models().size() == 1);
  const OpModelInfo& info = model.models()[0];
  CHECK(info.op == "gemm");
  CHECK(info.target_class == "x86");  // the family's model, trained on avx2 records
  CHECK(info.trained_classes == std::vector<std::string>{"avx2"});
  CHECK(info.workloads == kTrainShapes.size());
  CHECK(info.trained_workloads.size() == kTrainShapes.size());
  CHECK(info.rows > 0);
  CHECK(info.rows <= records.size());
  CHECK(model.find("gemm", "x86") == &info);
  CHECK(model.find("gemm", "avx2") == nullptr);  // stored under the family
  CHECK(model.serving("gemm", "avx2") == &info);
  CHECK(model.serving("gemm", "avx512") == &info);  // a class of the family it has no records of
  CHECK(model.serving("gemm", "neon") == nullptr);
  CHECK(model.serving("conv2d_nchwc", "avx2") == nullptr);
  CHECK_THAT(progress.front(), Contains("gemm/x86") && Contains("fold 1/5"));

  // Held-out folds: every workload evaluated once, ranking clearly better than chance
  // (random order: tau 0, top-1 about 1/35, pick ratio far below 1).
  INFO("held out: top1 " << info.holdout.top1_recall << " top5 " << info.holdout.top5_recall << " tau "
                         << info.holdout.kendall_tau << " pick " << info.holdout.pick_ratio);
  CHECK(info.holdout.workloads == kTrainShapes.size());
  CHECK(info.holdout.kendall_tau > 0.5);
  CHECK(info.holdout.top5_recall >= 0.5);
  CHECK(info.holdout.pick_ratio > 0.8);

  // On workloads never in any fold: evaluate() and score() agree with the cost function.
  const auto unseen = make_records(gemm, kTestShapes, 40, 99);
  const RankingQuality q = evaluate(model, unseen, registry, "gemm", "avx2");
  INFO("unseen: top1 " << q.top1_recall << " tau " << q.kendall_tau << " pick " << q.pick_ratio);
  CHECK(q.workloads == kTestShapes.size());
  CHECK(q.kendall_tau > 0.5);
  CHECK(q.pick_ratio > 0.8);

  const ops::Params shape = ops::parse_params(gemm, kTestShapes[0]);
  std::vector<ops::Config> configs;
  for (const auto& r : unseen) {
    if (r.workload == shape) configs.push_back(r.config);
  }
  const auto scores = model.score(gemm, shape, configs, avx2_target());
  REQUIRE(scores.size() == configs.size());
  const auto best_scored = std::max_element(scores.begin(), scores.end()) - scores.begin();
  double best = 1e30;
  for (const auto& c : configs) best = std::min(best, synthetic_cost(shape, c));
  CHECK(best / synthetic_cost(shape, configs[static_cast<std::size_t>(best_scored)]) > 0.7);

  // No model for another class: the error names what there is.
  CHECK_THROWS_WITH(model.score(gemm, shape, configs, host::parse_target("aarch64-linux-gnu", "cortex-a72")),
                    Contains("no cost model for gemm/neon") && Contains("gemm/x86"));
}

TEST_CASE("cross features count the op's register tile against the target's register file",
          "[tuner][cross_model]") {
  auto registry = ops::builtin_ops();
  const ops::Op& gemm = registry.get("gemm");
  const ops::Params shape = ops::parse_params(gemm, "256x256x256");
  const ops::TargetTraits avx2 = traits_of_record_target(*ops::TargetId::parse("x86_64-linux-gnu (znver3)"));
  const ops::TargetTraits avx512 = traits_of_record_target(*ops::TargetId::parse("x86_64-linux-gnu (skylake-avx512)"));
  ops::Config config = gemm.default_config(shape, avx512);
  config["vec"] = 16;
  const auto names = cross_feature_names(gemm, shape, config, avx512);
  const auto at = [&](const std::string& name) {
    auto it = std::find(names.begin(), names.end(), name);
    REQUIRE(it != names.end());
    return static_cast<std::size_t>(it - names.begin());
  };
  double share = 0;
  for (const auto& [name, value] : gemm.features(shape, config)) {
    if (name == "gemm.register_share") share = value;
  }
  REQUIRE(share > 0);
  // 32 registers of 16 floats: the op's own share; 16 registers of 8 floats: a vector of
  // 16 floats takes two of the 16, four times the pressure.
  const std::size_t i = at("cross.gemm.register_share/registers");
  CHECK(cross_features(gemm, shape, config, avx512)[i] == Approx(squash_feature(share)));
  CHECK(cross_features(gemm, shape, config, avx2)[i] == Approx(squash_feature(share * 4)));
  CHECK(cross_feature_names(gemm, shape, config, avx2) == names);
  // The absolute forms are gone: a model of one class cannot learn them.
  for (const char* absolute : {"knob.vec", "gemm.register_share", "gemm.accumulator_share", "gemm.vector_width_share",
                               "gemm.b_block_bytes"}) {
    CHECK(std::find(names.begin(), names.end(), absolute) == names.end());
  }
  CHECK(std::find(names.begin(), names.end(), "cross.vector_lanes/vector_floats") != names.end());
}

TEST_CASE("a family's model pools its classes' records and answers for a class it has none of",
          "[tuner][cross_model]") {
  auto registry = ops::builtin_ops();
  const ops::Op& gemm = registry.get("gemm");
  const ops::TargetId avx512 = *ops::TargetId::parse("x86_64-linux-gnu (skylake-avx512)");
  auto records = make_records(gemm, kTrainShapes, 24, 11);
  const auto wide = make_records(gemm, {kTrainShapes.begin(), kTrainShapes.begin() + 6}, 24, 12, avx512);
  TrainOptions options;
  options.folds = 3;

  SECTION("pooled: one model, the held-out quality per class") {
    records.insert(records.end(), wide.begin(), wide.end());
    const CrossModel model = CrossModel::train(records, registry, options);
    REQUIRE(model.models().size() == 1);
    const OpModelInfo& info = model.models()[0];
    CHECK(info.target_class == "x86");
    CHECK(info.trained_classes == std::vector<std::string>{"avx2", "avx512"});
    CHECK(info.workloads == kTrainShapes.size());  // the same shapes on both classes are one workload
    REQUIRE(info.holdout_by_class.size() == 2);
    CHECK(info.holdout_by_class[0].first == "avx2");
    CHECK(info.holdout_by_class[0].second.workloads == kTrainShapes.size());
    CHECK(info.holdout_by_class[1].first == "avx512");
    CHECK(info.holdout_by_class[1].second.workloads == 6);
    CHECK(info.holdout.workloads == kTrainShapes.size() + 6);
    // record_classes() lists what records can evaluate; each class is served by the pool.
    const auto classes = record_classes(records, registry);
    CHECK(classes == std::vector<std::pair<std::string, std::string>>{{"gemm", "avx2"}, {"gemm", "avx512"}});
    CHECK(evaluate(model, wide, registry, "gemm", "avx512").workloads == 6);
  }
  SECTION("per class: one model each, and no answer for a class without one") {
    records.insert(records.end(), wide.begin(), wide.end());
    options.pool_families = false;
    const CrossModel model = CrossModel::train(records, registry, options);
    REQUIRE(model.models().size() == 2);
    CHECK(model.serving("gemm", "avx2")->target_class == "avx2");
    CHECK(model.serving("gemm", "avx512")->target_class == "avx512");
    CHECK(model.serving("gemm", "sse") == nullptr);
  }
  SECTION("only some classes: a model of avx512 records scores avx2 workloads") {
    records.insert(records.end(), wide.begin(), wide.end());
    options.classes = {"avx512"};
    const CrossModel model = CrossModel::train(records, registry, options);
    REQUIRE(model.models().size() == 1);
    CHECK(model.models()[0].trained_classes == std::vector<std::string>{"avx512"});
    const RankingQuality q = evaluate(model, make_records(gemm, kTestShapes, 30, 13), registry, "gemm", "avx2");
    CHECK(q.workloads == kTestShapes.size());
  }
}

TEST_CASE("a cross model file round-trips and refuses what it would misread", "[tuner][cross_model]") {
  auto registry = ops::builtin_ops();
  const ops::Op& gemm = registry.get("gemm");
  TrainOptions options;
  options.folds = 2;  // every section trains again
  const CrossModel model = CrossModel::train(make_records(gemm, kTrainShapes, 16, 3), registry, options);
  TempDir dir;
  const std::string path = dir.file("model.kcm");
  model.save(path);

  // Nothing but the file is left in the directory (the temporary file was renamed).
  std::size_t entries = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir.path())) ++entries;
  CHECK(entries == 1);

  const CrossModel loaded = CrossModel::load(path);
  REQUIRE(loaded.models().size() == 1);
  const OpModelInfo& a = model.models()[0];
  const OpModelInfo& b = loaded.models()[0];
  CHECK(b.op == a.op);
  CHECK(b.target_class == a.target_class);
  CHECK(b.trained_classes == a.trained_classes);
  CHECK(b.holdout_by_class.size() == a.holdout_by_class.size());
  CHECK(b.feature_names == a.feature_names);
  CHECK(b.rows == a.rows);
  CHECK(b.workloads == a.workloads);
  CHECK(b.trained_workloads == a.trained_workloads);
  CHECK(b.holdout.workloads == a.holdout.workloads);
  CHECK(b.holdout.kendall_tau == a.holdout.kendall_tau);
  CHECK(b.holdout.pick_ratio == a.holdout.pick_ratio);

  const auto unseen = make_records(gemm, kTestShapes, 30, 5);
  const ops::Params shape = ops::parse_params(gemm, kTestShapes[1]);
  std::vector<ops::Config> configs;
  for (const auto& r : unseen) {
    if (r.workload == shape) configs.push_back(r.config);
  }
  CHECK(loaded.score(gemm, shape, configs, avx2_target()) == model.score(gemm, shape, configs, avx2_target()));

  const nlohmann::json file = nlohmann::json::parse(slurp(path));
  CHECK(file["format"] == "kestrel-cost-model");
  CHECK(file["file_version"] == kModelFileVersion);
  CHECK(file["feature_schema"] == kFeatureSchemaVersion);
  CHECK(file["models"][0]["op"] == "gemm");

  SECTION("another feature schema: retrain") {
    auto other = file;
    other["feature_schema"] = kFeatureSchemaVersion + 1;
    write(path, other.dump());
    CHECK_THROWS_WITH(CrossModel::load(path), Contains(path) && Contains("feature schema") &&
                                                  Contains("retrain with kestrel cost-model train"));
  }
  SECTION("a file written before families were pooled: one class, no per-class quality") {
    auto other = file;
    other["models"][0].erase("trained_classes");
    other["models"][0].erase("holdout_by_class");
    other["models"][0]["target_class"] = "avx2";
    write(path, other.dump());
    const CrossModel old = CrossModel::load(path);
    CHECK(old.models().at(0).trained_classes == std::vector<std::string>{"avx2"});
    CHECK(old.serving("gemm", "avx2") != nullptr);
    CHECK(old.serving("gemm", "avx512") == nullptr);  // a class model serves its class alone
  }
  SECTION("a newer file version") {
    auto other = file;
    other["file_version"] = kModelFileVersion + 1;
    write(path, other.dump());
    CHECK_THROWS_WITH(CrossModel::load(path), Contains(path) && Contains("newer Kestrel"));
  }
  SECTION("feature names that differ from the op's") {
    auto other = file;
    other["models"][0]["feature_names"][0] = "param.Z";
    write(path, other.dump());
    CHECK_THROWS_WITH(CrossModel::load(path), Contains(path) && Contains("features differ") &&
                                                  Contains("retrain with kestrel cost-model train"));
  }
  SECTION("a damaged booster") {
    auto other = file;
    other["models"][0]["booster"] = "AAAA";
    write(path, other.dump());
    CHECK_THROWS_AS(CrossModel::load(path), ModelFileError);
  }
  SECTION("garbage, another JSON document, a missing path") {
    write(path, "\x01\x02 not json");
    CHECK_THROWS_WITH(CrossModel::load(path), Contains(path) && Contains("not a kestrel cost model"));
    write(path, R"({"format": "something-else"})");
    CHECK_THROWS_WITH(CrossModel::load(path), Contains(path) && Contains("not a kestrel cost model"));
    CHECK_THROWS_WITH(CrossModel::load(dir.file("missing.kcm")), Contains("no model file") && Contains("missing.kcm"));
    CHECK_THROWS_AS(CrossModel::load(dir.path()), ModelFileError);
  }
}

TEST_CASE("saving a cross model to an unwritable path leaves nothing and says why", "[tuner][cross_model]") {
  auto registry = ops::builtin_ops();
  const ops::Op& gemm = registry.get("gemm");
  TrainOptions options;
  options.folds = 0;
  const CrossModel model =
      CrossModel::train(make_records(gemm, {"64x64x64", "128x96x256"}, 20, 1), registry, options);
  CHECK(model.models().at(0).holdout.workloads == 0);  // no folds
  TempDir dir;
  const std::string path = dir.file("no-such-dir/model.kcm");
  CHECK_THROWS_WITH(model.save(path), Contains("cannot write model file") && Contains(path));
  CHECK_FALSE(fs::exists(dir.file("no-such-dir")));
  std::size_t entries = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir.path())) ++entries;
  CHECK(entries == 0);
  // A directory in the way: the temporary file is removed again.
  fs::create_directory(dir.file("taken"));
  CHECK_THROWS_AS(model.save(dir.file("taken")), ModelFileError);
  entries = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir.path())) ++entries;
  CHECK(entries == 1);
}

TEST_CASE("training a cross model on too few records is an error that says what was found",
          "[tuner][cross_model]") {
  auto registry = ops::builtin_ops();
  const ops::Op& gemm = registry.get("gemm");
  TrainOptions options;
  CHECK_THROWS_WITH(CrossModel::train({}, registry, options), Contains("no usable records"));
  CHECK_THROWS_AS(CrossModel::train({}, registry, options), ModelFileError);
  const auto single = make_records(gemm, {"64x256x128"}, 30, 2);
  CHECK_THROWS_WITH(CrossModel::train(single, registry, options),
                    Contains("gemm/x86: 1 workload") && Contains("at least 2 workloads"));
  // Vendor records never count.
  auto vendor = make_records(gemm, {"64x256x128", "128x64x64"}, 10, 2);
  for (auto& r : vendor) r.implementation = "openblas";
  CHECK_THROWS_WITH(CrossModel::train(vendor, registry, options), Contains("no usable records"));
  // --op filters: a model only for the ops asked for.
  options.ops = {"conv2d"};
  CHECK_THROWS_AS(CrossModel::train(make_records(gemm, kTrainShapes, 10, 2), registry, options), ModelFileError);
}

TEST_CASE("repeated measurements of a configuration are one row of their median, finals preferred",
          "[tuner][cross_model]") {
  auto registry = ops::builtin_ops();
  const ops::Op& gemm = registry.get("gemm");
  auto records = make_records(gemm, {"64x256x128", "128x64x64", "96x96x96"}, 20, 4);
  const std::size_t distinct = records.size();
  for (std::size_t i = 0; i < distinct; ++i) {  // every configuration measured again, slower
    Record again = records[i];
    again.cost *= 3;
    records.push_back(again);
  }
  TrainOptions options;
  options.folds = 0;
  const CrossModel model = CrossModel::train(records, registry, options);
  CHECK(model.models().at(0).rows <= distinct);

  // A workload whose only configuration was measured twice has one row: nothing to rank.
  const ops::Params shape = ops::parse_params(gemm, "200x100x300");
  const ops::Config a = gemm.default_config(shape, traits_of_record_target(kTarget));
  Record first;
  first.op = "gemm";
  first.workload = shape;
  first.target = kTarget;
  first.device_class = {"local", "AMD EPYC", "fp"};
  first.config = a;
  first.cost = 1e-3;
  Record second = first;
  second.cost = 2e-3;
  CHECK(evaluate(model, {first, second}, registry, "gemm", "avx2").workloads == 0);

  // A second configuration as fast as the first one's final re-measurement: the final
  // decides (2 ms each), so again nothing to rank; the search measurement would rank them.
  Record other = first;
  other.config = a;
  other.config["unroll"] = a.at("unroll") == 1 ? 2 : 1;
  other.cost = 2e-3;
  Record final_a = second;
  final_a.final_measurement = true;
  CHECK(evaluate(model, {first, final_a, other}, registry, "gemm", "avx2").workloads == 0);
  CHECK(evaluate(model, {first, other}, registry, "gemm", "avx2").workloads == 1);
}
