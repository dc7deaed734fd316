// Tests of the tuning loop with a synthetic evaluator and a temporary records file:
// the trial budget, resume, early stopping, failures, stepping, the final round; with a
// cross-workload model, zero-shot picks and the warm start.
#include <catch2/catch.hpp>

#include <stdlib.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <map>
#include <random>
#include <set>

#include "kestrel/tuner/evaluator.h"
#include "kestrel/records/records.h"
#include "kestrel/records/sqlite_records.h"
#include "kestrel/tuner/space.h"
#include "kestrel/tuner/tuning_loop.h"
#include "kestrel/tuner/zero_shot.h"
#include "support/process.h"
#include "support/async.h"
#include "tuner/synthetic_gemm.h"
#include "tuner/toy_op.h"

namespace {

using namespace kestrel;
using tuner::Evaluation;
using tuner::SyntheticEvaluator;
using tuner::TuneOptions;
using tuner::TuningLoop;

using test::TempDir;

// 8 x 8 configurations; the default is a=1,b=1; the fastest a=5,b=3.
test::ToyOp grid_op() {
  return test::ToyOp({{"a", {1, 2, 3, 4, 5, 6, 7, 8}, ""}, {"b", {1, 2, 3, 4, 5, 6, 7, 8}, ""}},
                     [](const ops::Config&) { return true; });
}

double bowl(const ops::Config& c) {
  double a = static_cast<double>(c.at("a")), b = static_cast<double>(c.at("b"));
  return 1e-3 * (1 + (a - 5) * (a - 5) + (b - 3) * (b - 3));
}

tuner::Task task_of(const ops::Op& op) {
  tuner::Task task;
  task.op = &op;
  task.target.triple = "x86_64-linux-gnu";
  return task;
}

TuneOptions options(std::size_t trials, std::size_t batch = 5) {
  TuneOptions o;
  o.strategy = "random";
  o.trials = trials;
  o.batch_size = batch;
  o.final_top = 0;
  o.transfer = false;
  o.measure.repeat = 3;
  o.device_key = "test";
  return o;
}

std::size_t search_records(const records::RecordStore& db, const tuner::Task& task) {
  std::size_t n = 0;
  for (const auto& r : db.find(task.op_name(), task.params, task.target.id())) n += r.final_measurement ? 0 : 1;
  return n;
}

// Lets a synthetic evaluator lose the device of some configurations.
class LosingEvaluator final : public tuner::Evaluator {
 public:
  LosingEvaluator(tuner::Evaluator& inner, std::set<std::string> lost) : inner_(inner), lost_(std::move(lost)) {}
  rpc::awaitable<std::vector<Evaluation>> evaluate(const tuner::Task& task, const std::vector<ops::Config>& configs,
                                                   const rpc::MeasureSettings& settings,
                                                   tuner::ResultCallback on_result) override {
    auto out = co_await inner_.evaluate(task, configs, settings);
    for (std::size_t i = 0; i < out.size(); ++i) {
      if (lost_.contains(ops::format_config(out[i].config))) {
        out[i].status = kernel::Status::device_lost;
        out[i].round_seconds.clear();
        out[i].cost = std::numeric_limits<double>::infinity();
        ++losses;
      }
      if (on_result) on_result(i, out[i]);
    }
    co_return out;
  }
  std::size_t losses = 0;

 private:
  tuner::Evaluator& inner_;
  std::set<std::string> lost_;
};

}  // namespace

TEST_CASE("tuning loop: costs are seconds; GFLOP/s are derived, 0 while unknown", "[tuning_loop]") {
  CHECK(tuner::to_gflops(2e9, 0.5) == Approx(4));
  const double inf = std::numeric_limits<double>::infinity();
  for (double seconds : {inf, 0.0, -1.0, std::numeric_limits<double>::quiet_NaN()}) CHECK(tuner::to_gflops(2e9, seconds) == 0);
  CHECK(tuner::to_gflops(0, 0.5) == 0);  // an op without flops (a layout transform)
  tuner::TuneProgress progress;
  CHECK(progress.best_seconds == inf);
  CHECK(progress.default_seconds == inf);
  CHECK_FALSE(progress.best_config);
  CHECK(progress.best_gflops() == 0);
  progress.flops = 3e9;
  progress.best_seconds = 1.5;
  CHECK(progress.best_gflops() == Approx(2));
  tuner::FinalEntry entry;
  entry.median_s = 0.25;
  CHECK(entry.gflops(1e9) == Approx(4));
  entry.status = kernel::Status::wrong_answer;
  CHECK(entry.gflops(1e9) == 0);
  tuner::TuneResult result;
  CHECK(result.default_gflops() == 0);
}

TEST_CASE("tuning loop: the trial budget is honoured exactly", "[tuning_loop]") {
  TempDir dir;
  records::SqliteRecords db(dir.file("r.db"));
  auto op = grid_op();
  auto evaluator = SyntheticEvaluator::constant(bowl);
  TuningLoop loop(task_of(op), db, evaluator, options(23, 5));
  auto result = test::sync(loop.run());
  CHECK(result.trials == 23);
  CHECK(result.this_session == 23);
  CHECK(result.stop_reason == tuner::StopReason::trials);
  CHECK(evaluator.evaluations() == 23);
  CHECK(search_records(db, loop.task()) == 23);
  for (const auto& [config, count] : evaluator.counts()) CHECK(count == 1);
}

TEST_CASE("tuning loop: resuming measures nothing twice", "[tuning_loop]") {
  TempDir dir;
  records::SqliteRecords db(dir.file("r.db"));
  auto op = grid_op();
  auto first = SyntheticEvaluator::constant(bowl);
  {
    TuningLoop loop(task_of(op), db, first, options(12, 4));
    CHECK(test::sync(loop.run()).trials == 12);
  }
  auto second = SyntheticEvaluator::constant(bowl);
  TuningLoop loop(task_of(op), db, second, options(30, 4));
  auto result = test::sync(loop.run());
  CHECK(result.resumed == 12);
  CHECK(result.this_session == 18);
  CHECK(result.trials == 30);
  CHECK(second.evaluations() == 18);
  for (const auto& [config, count] : second.counts()) {
    INFO(config);
    CHECK_FALSE(first.counts().contains(config));
  }
  // A third run with the budget spent measures nothing at all.
  auto third = SyntheticEvaluator::constant(bowl);
  TuningLoop again(task_of(op), db, third, options(30, 4));
  auto done = test::sync(again.run());
  CHECK(third.evaluations() == 0);
  CHECK(done.this_session == 0);
  CHECK(done.trials == 30);
}

TEST_CASE("tuning loop: records of another device class are not resumed", "[tuning_loop]") {
  // Two boards of one target (say a Pi 4 and a Jetson, both aarch64) tuned into one
  // database: the second measures its own trials instead of resuming the first's.
  TempDir dir;
  records::SqliteRecords db(dir.file("r.db"));
  auto op = grid_op();
  auto constant = [](const ops::Config& c, std::uint32_t) { return bowl(c); };
  TuneOptions pi4 = options(12, 4), jetson = options(12, 4);
  pi4.device_class = records::DeviceClass{"synthetic", "pi4", "pi4"};
  jetson.device_class = records::DeviceClass{"synthetic", "jetson", "jetson"};
  SyntheticEvaluator on_pi4(constant, "pi4"), on_jetson(constant, "jetson");
  {
    TuningLoop loop(task_of(op), db, on_pi4, pi4);
    CHECK(test::sync(loop.run()).this_session == 12);
  }
  TuningLoop loop(task_of(op), db, on_jetson, jetson);
  auto result = test::sync(loop.run());
  CHECK(result.resumed == 0);
  CHECK(result.this_session == 12);
  CHECK(on_jetson.evaluations() == 12);
  // The first class resumes its own records and measures nothing more.
  SyntheticEvaluator again(constant, "pi4");
  TuningLoop resumed(task_of(op), db, again, pi4);
  auto done = test::sync(resumed.run());
  CHECK(done.resumed == 12);
  CHECK(again.evaluations() == 0);
}

TEST_CASE("tuning loop: configurations lost with their device are measured again on resume", "[tuning_loop]") {
  TempDir dir;
  records::SqliteRecords db(dir.file("r.db"));
  auto op = grid_op();
  auto inner = SyntheticEvaluator::constant(bowl);
  // The default is measured first, alone: lose it.
  LosingEvaluator losing(inner, {"a=1,b=1"});
  {
    TuningLoop loop(task_of(op), db, losing, options(6, 5));
    auto result = test::sync(loop.run());
    CHECK(losing.losses >= 1);
    CHECK(result.statuses.at("device lost") >= 1);
  }
  auto second = SyntheticEvaluator::constant(bowl);
  TuningLoop loop(task_of(op), db, second, options(8, 5));
  auto result = test::sync(loop.run());
  CHECK(second.counts().contains("a=1,b=1"));
  CHECK(std::isfinite(result.default_seconds));
}

TEST_CASE("tuning loop: early stopping ends a search that stopped improving", "[tuning_loop]") {
  TempDir dir;
  records::SqliteRecords db(dir.file("r.db"));
  auto op = grid_op();
  auto evaluator = SyntheticEvaluator::constant([](const ops::Config&) { return 1e-3; });
  auto o = options(60, 1);
  o.early_stopping = 5;
  TuningLoop loop(task_of(op), db, evaluator, o);
  auto result = test::sync(loop.run());
  CHECK(result.stop_reason == tuner::StopReason::early_stopping);
  CHECK(result.trials == 6);  // the default, then five without improvement
}

TEST_CASE("tuning loop: a failing configuration is counted as a failure and recorded", "[tuning_loop]") {
  TempDir dir;
  records::SqliteRecords db(dir.file("r.db"));
  auto op = grid_op();
  auto evaluator = SyntheticEvaluator::constant([](const ops::Config& c) {
    return c.at("a") == 2 ? std::numeric_limits<double>::infinity() : bowl(c);
  });
  TuningLoop loop(task_of(op), db, evaluator, options(64, 8));
  auto result = test::sync(loop.run());
  CHECK(result.trials == 64);
  CHECK(result.statuses.at("runtime error") == 8);
  CHECK(result.statuses.at("ok") == 56);
  CHECK(loop.progress().failures == 8);
  std::size_t failed = 0;
  for (const auto& r : db.find("toy", {}, loop.task().target.id())) {
    if (!r.ok()) {
      ++failed;
      CHECK(std::isinf(r.cost));
      CHECK(r.message == "synthetic failure");
    }
  }
  CHECK(failed == 8);
  CHECK(result.stop_reason == tuner::StopReason::trials);
}

TEST_CASE("tuning loop: step() measures one batch at a time and reports progress", "[tuning_loop]") {
  TempDir dir;
  records::SqliteRecords db(dir.file("r.db"));
  auto op = grid_op();
  auto evaluator = SyntheticEvaluator::constant(bowl);
  TuningLoop loop(task_of(op), db, evaluator, options(14, 4));
  test::sync(loop.start());
  CHECK(evaluator.evaluations() == 1);  // the default configuration
  CHECK(loop.progress().trials == 1);
  CHECK(std::isfinite(loop.progress().default_seconds));
  CHECK(loop.progress().default_gflops() > 0);
  std::vector<std::size_t> trials;
  for (auto progress = test::sync(loop.step()); progress; progress = test::sync(loop.step())) {
    trials.push_back(progress->trials);
    CHECK(progress->total == 14);
    CHECK(progress->best_seconds <= progress->default_seconds);
    REQUIRE(progress->best_config);
    CHECK(progress->flops == loop.task().flops());
    CHECK(evaluator.evaluations() == progress->trials);
  }
  CHECK(trials == std::vector<std::size_t>{5, 9, 13, 14});
  CHECK(loop.result().stop_reason == tuner::StopReason::trials);
  CHECK_FALSE(test::sync(loop.step()));  // done stays done
  auto result = test::sync(loop.finish());
  CHECK(result.trials == 14);
}

TEST_CASE("tuning loop: the final round re-measures finalists and the default, interleaved", "[tuning_loop]") {
  TempDir dir;
  records::SqliteRecords db(dir.file("r.db"));
  auto op = grid_op();
  // a=8,b=8 was lucky in the search (0.1 ms) but is slow in every later round (5 ms); the
  // a=7 configs were fast in the search, later their rounds disagree (0.5 ms, 3 ms, 3 ms);
  // the default is 1 ms throughout.
  std::map<std::string, int> seen;
  std::vector<std::string> order;
  SyntheticEvaluator evaluator([&](const ops::Config& c, std::uint32_t round) {
    std::string text = ops::format_config(c);
    if (round == 0) {
      ++seen[text];
      order.push_back(text);
    }
    if (text == "a=1,b=1") return 1e-3;
    if (text == "a=8,b=8") return seen[text] == 1 ? 1e-4 : 5e-3;
    if (c.at("a") == 7) return seen[text] == 1 ? 2e-4 : (round == 0 ? 5e-4 : 3e-3);
    return 2e-3;
  });
  auto o = options(64, 16);
  o.final_top = 3;
  o.final_repeat = 9;
  o.final_passes = 3;
  TuningLoop loop(task_of(op), db, evaluator, o);
  auto result = test::sync(loop.run());
  REQUIRE(result.final.size() == 4);  // three finalists and the default
  CHECK(result.final.front().is_default);
  CHECK(result.default_is_best);
  CHECK(ops::format_config(result.final.front().config) == "a=1,b=1");
  CHECK(result.final.front().median_s == Approx(1e-3));
  bool noisy = false;
  for (const auto& f : result.final) {
    if (f.config.contains("a") && f.config.at("a") == 7) {
      CHECK(f.noisy);
      noisy = true;
    }
    if (f.config == ops::Config{{"a", 8}, {"b", 8}}) CHECK(f.median_s == Approx(5e-3));
  }
  CHECK(noisy);
  // Each of the four measured in each of three passes, the order alternating.
  std::vector<std::string> final_order(order.end() - 12, order.end());
  CHECK(std::vector<std::string>(final_order.begin(), final_order.begin() + 4) ==
        std::vector<std::string>(final_order.rbegin() + 4, final_order.rbegin() + 8));
  CHECK(seen.at("a=1,b=1") == 4);  // the search, then three passes
  // One final record per configuration, with every round; the default's marked.
  std::size_t finals = 0;
  for (const auto& r : db.find("toy", {}, loop.task().target.id())) {
    if (!r.final_measurement) continue;
    ++finals;
    CHECK(r.round_seconds.size() == 9);
    CHECK(r.is_default == (ops::format_config(r.config) == "a=1,b=1"));
  }
  CHECK(finals == 4);
}

TEST_CASE("tuning loop: without a final round the best recorded configuration is the result", "[tuning_loop]") {
  TempDir dir;
  records::SqliteRecords db(dir.file("r.db"));
  auto op = grid_op();
  auto evaluator = SyntheticEvaluator::constant(bowl);
  SECTION("final top 0") {
    TuningLoop loop(task_of(op), db, evaluator, options(64, 16));
    auto result = test::sync(loop.run());
    CHECK(result.final.empty());
    REQUIRE(result.best_recorded);
    CHECK(ops::format_config(result.best_recorded->config) == "a=5,b=3");
    CHECK(result.best_recorded->median_s == Approx(1e-3));
  }
  SECTION("interrupted") {
    auto o = options(64, 4);
    o.final_top = 3;
    TuningLoop loop(task_of(op), db, evaluator, o);
    test::sync(loop.start());
    REQUIRE(test::sync(loop.step()));
    loop.request_stop();
    CHECK_FALSE(test::sync(loop.step()));
    auto result = test::sync(loop.finish());
    CHECK(result.stop_reason == tuner::StopReason::interrupted);
    CHECK(result.trials == 5);
    CHECK(result.final.empty());
    REQUIRE(result.best_recorded);
    CHECK(evaluator.evaluations() == 5);  // nothing re-measured after the interrupt
  }
}

TEST_CASE("tuning loop: vendor kernels run in the final round, are recorded, and never feed the search",
          "[tuning_loop][vendor]") {
  TempDir dir;
  records::SqliteRecords db(dir.file("r.db"));
  auto op = grid_op();
  op.set_vendors({"fastlib", "slowlib", "missinglib"});
  auto evaluator = SyntheticEvaluator::constant(bowl);  // a=5,b=3: 1 ms; the default a=1,b=1: 21 ms
  evaluator.vendor_cost([](const std::string& implementation) {
    if (implementation == "fastlib") return 0.5e-3;
    if (implementation == "slowlib") return 5e-3;
    return std::numeric_limits<double>::infinity();  // not on the device
  });
  auto o = options(64, 16);
  o.final_top = 2;
  o.final_repeat = 6;
  o.final_passes = 3;
  TuningLoop loop(task_of(op), db, evaluator, o);
  auto result = test::sync(loop.run());
  REQUIRE(result.final.size() == 6);  // two finalists, the default, three vendors
  CHECK(result.final.front().implementation == "fastlib");
  CHECK(result.final.front().config.empty());
  CHECK(result.final.front().median_s == Approx(0.5e-3));
  CHECK_FALSE(result.default_is_best);
  CHECK(ops::format_config(result.final[1].config) == "a=5,b=3");
  CHECK(result.final.back().implementation == "missinglib");
  CHECK(result.final.back().status == kernel::Status::runtime_error);
  CHECK(evaluator.counts().at("fastlib") == 3);  // once per pass
  CHECK(result.vendors.empty());

  std::map<std::string, std::size_t> by_implementation;
  for (const auto& r : db.find("toy", {}, loop.task().target.id())) {
    ++by_implementation[r.implementation];
    if (r.implementation == records::kKestrelImplementation) continue;
    CHECK(r.final_measurement);
    CHECK(r.config.empty());
    CHECK_FALSE(r.is_default);
    if (r.ok()) CHECK(r.round_seconds.size() == 6);
  }
  CHECK(by_implementation == std::map<std::string, std::size_t>{
                                 {"kestrel", 64 + 3}, {"fastlib", 1}, {"slowlib", 1}, {"missinglib", 1}});
  auto best = db.best();
  REQUIRE(best.size() == 1);
  CHECK(best[0].record.implementation == "fastlib");
  REQUIRE(best[0].own());
  CHECK(ops::format_config(best[0].own()->config) == "a=5,b=3");

  // A second session resumes Kestrel's 64 configurations, not the vendors' records; with
  // --vendors slowlib only that library runs.
  o.vendors = "slowlib";
  TuningLoop again(task_of(op), db, evaluator, o);
  auto second = test::sync(again.run());
  CHECK(second.resumed == 64);
  CHECK(second.this_session == 0);
  CHECK(evaluator.counts().at("fastlib") == 3);
  CHECK(evaluator.counts().at("slowlib") == 6);
  std::size_t vendor_finals = 0;
  for (const auto& f : second.final) vendor_finals += f.implementation == records::kKestrelImplementation ? 0 : 1;
  CHECK(vendor_finals == 1);
}

TEST_CASE("tuning loop: vendor kernels without a final round run once on their own; none with --vendors none",
          "[tuning_loop][vendor]") {
  TempDir dir;
  records::SqliteRecords db(dir.file("r.db"));
  auto op = grid_op();
  op.set_vendors({"fastlib"});
  auto evaluator = SyntheticEvaluator::constant(bowl);
  evaluator.vendor_cost([](const std::string&) { return 0.5e-3; });
  SECTION("final top 0") {
    TuningLoop loop(task_of(op), db, evaluator, options(16, 16));
    auto result = test::sync(loop.run());
    CHECK(result.final.empty());
    REQUIRE(result.vendors.size() == 1);
    CHECK(result.vendors[0].implementation == "fastlib");
    CHECK(result.vendors[0].median_s == Approx(0.5e-3));
    std::size_t vendor_records = 0;
    for (const auto& r : db.find("toy", {}, loop.task().target.id())) {
      if (r.implementation == "fastlib") {
        ++vendor_records;
        CHECK_FALSE(r.final_measurement);
      }
    }
    CHECK(vendor_records == 1);
    CHECK(db.best().at(0).record.implementation == "fastlib");
  }
  SECTION("--vendors none") {
    auto o = options(16, 16);
    o.final_top = 2;
    o.vendors = "none";
    TuningLoop loop(task_of(op), db, evaluator, o);
    auto result = test::sync(loop.run());
    CHECK(evaluator.counts().count("fastlib") == 0);
    for (const auto& f : result.final) CHECK(f.implementation == records::kKestrelImplementation);
  }
}

// ---- a cross-workload model: zero-shot picks and the warm start ----------------------

namespace {

std::shared_ptr<const tuner::CrossModel> synthetic_model() {
  // Borrowed: the model lives as long as the test program.
  return {&test::synthetic_gemm_model(), [](const tuner::CrossModel*) {}};
}

tuner::Task gemm_task(const ops::Registry& registry, const ops::Params& workload,
                      const host::Target& target = test::synthetic_target()) {
  tuner::Task task;
  task.op = &registry.get("gemm");
  task.params = workload;
  task.target = target;
  return task;
}

SyntheticEvaluator synthetic_gemm_evaluator(const ops::Params& workload) {
  return SyntheticEvaluator::constant([workload](const ops::Config& c) { return test::synthetic_gemm_seconds(workload, c); });
}

}  // namespace

TEST_CASE("tuning loop: zero-shot without verification measures and records nothing", "[tuning_loop][zero_shot]") {
  TempDir dir;
  records::SqliteRecords db(dir.file("r.db"));
  const ops::Registry registry = ops::builtin_ops();
  const ops::Params workload = test::synthetic_unseen_workloads().front();
  auto evaluator = synthetic_gemm_evaluator(workload);
  auto o = options(200);
  o.zero_shot = true;
  o.prior_model = synthetic_model();
  o.final_top = 3;
  TuningLoop loop(gemm_task(registry, workload), db, evaluator, o);
  auto result = test::sync(loop.run());

  CHECK(evaluator.evaluations() == 0);
  CHECK(db.count() == 0);
  CHECK(result.trials == 0);
  CHECK(result.this_session == 0);
  CHECK(result.final.empty());
  CHECK_FALSE(result.best_recorded);
  CHECK(result.stop_reason == tuner::StopReason::zero_shot);
  REQUIRE(result.zero_shot);
  CHECK(result.zero_shot->fallback.empty());
  REQUIRE(result.zero_shot->picks.size() == 1);
  CHECK(result.zero_shot->scored > 1000);
  CHECK(result.zero_shot->seconds > 0);
  // The pick is zero_shot_pick's first, for the loop's seed.
  const tuner::Space space(registry.get("gemm"), workload, loop.task().target.traits);
  tuner::ZeroShotOptions pick_options;
  pick_options.seed = o.seed;
  const auto pick = tuner::zero_shot_pick(test::synthetic_gemm_model(), space, loop.task().target, pick_options);
  CHECK(result.zero_shot->picks.front() == space.config(pick.points.front()));
}

TEST_CASE("tuning loop: zero-shot verification measures the model's top N and the default in one final round",
          "[tuning_loop][zero_shot]") {
  TempDir dir;
  records::SqliteRecords db(dir.file("r.db"));
  const ops::Registry registry = ops::builtin_ops();
  const ops::Params workload = test::synthetic_unseen_workloads().front();
  const tuner::Task task = gemm_task(registry, workload);
  const std::string default_config =
      ops::format_config(task.op->default_config(workload, task.target.traits));
  auto o = options(200);
  o.zero_shot = true;
  o.zero_shot_verify = 2;
  o.prior_model = synthetic_model();
  o.final_repeat = 6;
  o.final_passes = 3;

  SECTION("the final round decides") {
    auto evaluator = synthetic_gemm_evaluator(workload);
    TuningLoop loop(task, db, evaluator, o);
    auto result = test::sync(loop.run());
    REQUIRE(result.zero_shot);
    REQUIRE(result.zero_shot->picks.size() == 2);
    std::set<std::string> measured;
    for (const ops::Config& pick : result.zero_shot->picks) measured.insert(ops::format_config(pick));
    measured.insert(default_config);
    // Each pick and the default, once per pass, nothing else.
    CHECK(evaluator.counts().size() == measured.size());
    for (const auto& [config, count] : evaluator.counts()) {
      INFO(config);
      CHECK(measured.contains(config));
      CHECK(count == 3);
    }
    // One final record each, nothing from a search.
    const auto records = db.find("gemm", workload, task.target.id());
    CHECK(records.size() == measured.size());
    for (const auto& r : records) {
      CHECK(r.final_measurement);
      CHECK(r.round_seconds.size() == 6);
    }
    CHECK(result.trials == measured.size());
    CHECK(result.this_session == measured.size());
    REQUIRE(result.final.size() == measured.size());
    CHECK(std::is_sorted(result.final.begin(), result.final.end(),
                         [](const auto& a, const auto& b) { return a.median_s < b.median_s; }));
    // The final round decides: the fastest of them on the synthetic machine.
    std::string fastest;
    double fastest_s = std::numeric_limits<double>::infinity();
    for (const std::string& config : measured) {
      const double cost = test::synthetic_gemm_seconds(workload, ops::parse_pairs(config));
      if (cost < fastest_s) {
        fastest_s = cost;
        fastest = config;
      }
    }
    CHECK(ops::format_config(result.final.front().config) == fastest);
    CHECK(result.default_is_best == (fastest == default_config));
    CHECK(db.best().at(0).record.final_measurement);
    CHECK(ops::format_config(db.best().at(0).record.config) == fastest);
  }
  SECTION("the default wins ties") {
    auto evaluator = SyntheticEvaluator::constant([](const ops::Config&) { return 1e-3; });
    TuningLoop loop(task, db, evaluator, o);
    auto result = test::sync(loop.run());
    CHECK(result.final.size() == 3);
    // As after a search: the records' best is the default when nothing beat it.
    const auto bests = db.best();
    REQUIRE(bests.size() == 1);
    CHECK(bests[0].default_is_best);
    CHECK(ops::format_config(bests[0].record.config) == default_config);
  }
}

TEST_CASE("tuning loop: zero-shot for an op or target class the model lacks says so and takes the default",
          "[tuning_loop][zero_shot]") {
  TempDir dir;
  records::SqliteRecords db(dir.file("r.db"));
  const ops::Registry registry = ops::builtin_ops();
  const ops::Params workload = test::synthetic_unseen_workloads().front();
  const tuner::Task task = gemm_task(registry, workload, host::parse_target("aarch64-linux-gnu", "cortex-a72"));
  const std::string default_config = ops::format_config(task.op->default_config(workload, task.target.traits));
  auto evaluator = synthetic_gemm_evaluator(workload);
  auto o = options(200);
  o.zero_shot = true;
  o.prior_model = synthetic_model();

  SECTION("no verification") {
    TuningLoop loop(task, db, evaluator, o);
    auto result = test::sync(loop.run());
    REQUIRE(result.zero_shot);
    CHECK_THAT(result.zero_shot->fallback, Catch::Matchers::Contains("no model for gemm on neon") &&
                                               Catch::Matchers::Contains("gemm/x86"));
    REQUIRE(result.zero_shot->picks.size() == 1);
    CHECK(ops::format_config(result.zero_shot->picks.front()) == default_config);
    CHECK(db.count() == 0);
  }
  SECTION("verification measures the default only") {
    o.zero_shot_verify = 3;
    TuningLoop loop(task, db, evaluator, o);
    auto result = test::sync(loop.run());
    REQUIRE(result.final.size() == 1);
    CHECK(result.final.front().is_default);
    CHECK(db.count() == 1);
  }
  SECTION("no model at all is an error") {
    o.prior_model = nullptr;
    TuningLoop loop(task, db, evaluator, o);
    CHECK_THROWS_AS(test::sync(loop.run()), std::invalid_argument);
  }
  SECTION("a warm start without a model for the task says why and searches as usual") {
    o.zero_shot = false;
    o.trials = 6;
    TuningLoop loop(task, db, evaluator, o);
    auto result = test::sync(loop.run());
    CHECK_THAT(result.prior, Catch::Matchers::StartsWith("none: ") && Catch::Matchers::Contains("gemm/x86"));
    CHECK(result.trials == 6);
  }
}

// Needs the "sa" strategy to read StrategyOptions::prior (tuner/src/cost_model_annealing.cpp).
TEST_CASE("tuning loop: a cross-workload model warm-starts the search to a good configuration in fewer trials",
          "[tuning_loop][zero_shot]") {
  const ops::Registry registry = ops::builtin_ops();
  const ops::Params workload = test::synthetic_unseen_workloads().at(1);
  const tuner::Task task = gemm_task(registry, workload);
  // Good: within 10% of the best of many random configurations.
  const tuner::Space space(*task.op, workload, task.target.traits);
  tuner::Rng rng(11);
  double best = std::numeric_limits<double>::infinity();
  for (int i = 0; i < 5000; ++i) best = std::min(best, test::synthetic_gemm_seconds(workload, space.config(*space.sample_valid(rng))));
  const double good_gflops = task.flops() / (1.1 * best) / 1e9;

  // Trials until the best so far is good (budget + 1 when never).
  auto trials_to_good = [&](bool warm, std::uint64_t seed) {
    TempDir dir;
    records::SqliteRecords db(dir.file("r.db"));
    auto evaluator = synthetic_gemm_evaluator(workload);
    auto o = options(48, 8);
    o.strategy = "sa";
    o.seed = seed;
    if (warm) o.prior_model = synthetic_model();
    TuningLoop loop(task, db, evaluator, o);
    std::size_t reached = o.trials + 1;
    auto result = test::sync(loop.run([&](const tuner::TuneProgress& p) {
      if (p.best_gflops() >= good_gflops) reached = std::min(reached, p.trials);
    }));
    if (warm) CHECK(result.prior == "gemm/x86");
    else CHECK(result.prior.empty());
    return reached;
  };
  std::size_t warm = 0, cold = 0;
  for (std::uint64_t seed : {1, 2}) {
    warm += trials_to_good(true, seed);
    cold += trials_to_good(false, seed);
  }
  INFO("trials to a good configuration: warm " << warm << ", cold " << cold << " (two seeds)");
  CHECK(warm < cold);
  CHECK(warm <= 2 * 16);  // the default and the first batch planned from the prior, per seed
}

TEST_CASE("tuning loop: a configuration is recommended only when it is faster than the default with confidence",
          "[tuning_loop][stats]") {
  TempDir dir;
  records::SqliteRecords db(dir.file("r.db"));
  auto op = grid_op();
  std::mt19937 rng(11);
  // Each round's time: the config's base time under multiplicative noise of +-amplitude.
  auto evaluator_with = [&](double best_base, double amplitude) {
    return SyntheticEvaluator([&rng, best_base, amplitude](const ops::Config& c, std::uint32_t) {
      std::uniform_real_distribution<double> u(1 - amplitude, 1 + amplitude);
      const std::string text = ops::format_config(c);
      const double base = text == "a=5,b=3" ? best_base : text == "a=1,b=1" ? 1e-3 : 2e-3;
      return base * u(rng);
    });
  };
  auto o = options(64, 16);
  o.final_top = 2;
  o.final_repeat = 3;  // one round per pass: each pass's median is as noisy as a round
  o.final_passes = 3;
  o.final_max_passes = 10;

  SECTION("1% faster under +-40% noise: the default stays, and the verdict says why") {
    auto evaluator = evaluator_with(0.99e-3, 0.4);
    TuningLoop loop(task_of(op), db, evaluator, o);
    auto result = test::sync(loop.run());
    INFO("verdict " << result.verdict << " after " << result.passes << " passes");
    CHECK(result.default_is_best);
    CHECK(result.final.front().is_default);
    CHECK(result.final.front().recommended);
    CHECK((result.verdict == "too noisy" || result.verdict == "not faster"));
    CHECK(result.passes > 3);  // undecided after the first passes: more were measured
    CHECK(result.passes <= 10);
    // The records say the same: best() gives the default, whatever the medians say.
    auto best = db.best();
    REQUIRE(best.size() == 1);
    CHECK(best[0].default_is_best);
  }
  SECTION("30% faster under +-5% noise: recommended, with an interval above 1") {
    auto evaluator = evaluator_with(0.7e-3, 0.05);
    TuningLoop loop(task_of(op), db, evaluator, o);
    auto result = test::sync(loop.run());
    CHECK(result.verdict == "faster");
    CHECK_FALSE(result.default_is_best);
    REQUIRE(ops::format_config(result.final.front().config) == "a=5,b=3");
    CHECK(result.final.front().recommended);
    CHECK(result.final.front().speedup == Approx(1 / 0.7).epsilon(0.1));
    CHECK(result.final.front().speedup_low > 1);
    CHECK(result.passes == 3);  // decided at once
    auto best = db.best();
    REQUIRE(best.size() == 1);
    CHECK(ops::format_config(best[0].record.config) == "a=5,b=3");
  }
}
