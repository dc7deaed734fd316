// TaskScheduler: warm-up order, weights, diminishing returns, similar tasks, retirement,
// and that its allocation beats round robin on a simulated model.
#include "kestrel/tuner/scheduler.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <map>

using kestrel::tuner::SchedulerOptions;
using kestrel::tuner::SchedulerTask;
using kestrel::tuner::TaskScheduler;

namespace {

// A simulated task whose best cost after t trials falls from start toward floor.
struct Curve {
  double start, floor, rate;
  double at(std::size_t trials) const { return floor + (start - floor) * std::exp(-rate * static_cast<double>(trials)); }
};

// Runs `steps` picks of 16 trials each; returns trials per task and the final objective.
std::pair<std::vector<std::size_t>, double> simulate(TaskScheduler& s, const std::vector<Curve>& curves,
                                                     const std::vector<double>& weights, std::size_t steps) {
  std::vector<std::size_t> trials(curves.size(), 1);
  for (std::size_t i = 0; i < curves.size(); ++i) s.observe(i, curves[i].at(1), 1);
  for (std::size_t k = 0; k < steps; ++k) {
    auto pick = s.next();
    REQUIRE(pick);
    trials[*pick] += 16;
    s.observe(*pick, curves[*pick].at(trials[*pick]), trials[*pick]);
  }
  double objective = 0;
  for (std::size_t i = 0; i < curves.size(); ++i) objective += weights[i] * curves[i].at(trials[i]);
  return {trials, objective};
}

}  // namespace

TEST_CASE("scheduler: every task is stepped once first, in order", "[scheduler]") {
  TaskScheduler s({{1, 1e6, "a"}, {5, 1e6, "b"}, {1, 1e6, "c"}});
  for (std::size_t i = 0; i < 3; ++i) s.observe(i, 1e-3, 1);
  CHECK(s.next() == 0u);
  CHECK(s.next() == 1u);
  CHECK(s.next() == 2u);
}

TEST_CASE("scheduler: a task that occurs more often gets more of the trials", "[scheduler]") {
  SchedulerOptions options;
  options.epsilon = 0;
  std::vector<Curve> curves(2, Curve{2e-3, 1e-3, 0.01});
  std::vector<double> weights{8, 1};
  TaskScheduler s({{8, 1e6, "conv"}, {1, 1e6, "gemm"}}, options);
  auto [trials, objective] = simulate(s, curves, weights, 40);
  CHECK(trials[0] > 2 * trials[1]);
  CHECK(trials[1] > 1);  // the lighter task is not starved either
}

TEST_CASE("scheduler: a task that stopped improving yields to one still improving", "[scheduler]") {
  SchedulerOptions options;
  options.epsilon = 0;
  // Task 0 is at its floor after a few trials; task 1 keeps improving slowly.
  std::vector<Curve> curves{{2e-3, 1e-3, 1.0}, {2e-3, 0.5e-3, 0.005}};
  std::vector<double> weights{1, 1};
  TaskScheduler s({{1, 1e6, "x"}, {1, 1e6, "y"}}, options);
  auto [trials, objective] = simulate(s, curves, weights, 30);
  CHECK(trials[1] > trials[0]);
}

TEST_CASE("scheduler: a task slower per FLOP than a similar one is expected to gain more", "[scheduler]") {
  SchedulerOptions options;
  options.epsilon = 0;
  TaskScheduler s({{1, 1e9, "conv"}, {1, 1e9, "conv"}}, options);
  // Same FLOPs, same trials: task 1 runs 4x slower than task 0 does.
  s.observe(0, 1e-3, 100);
  s.observe(1, 4e-3, 100);
  CHECK(s.gain(1) > s.gain(0));
  // A task of another op is not compared with them.
  TaskScheduler other({{1, 1e9, "conv"}, {1, 1e9, "gemm"}}, options);
  other.observe(0, 1e-3, 100);
  other.observe(1, 4e-3, 100);
  CHECK(other.gain(1) == Approx(4e-3 / 100 * 0.8));
}

TEST_CASE("scheduler: beats round robin on a simulated model", "[scheduler]") {
  SchedulerOptions options;
  options.seed = 7;
  // A model: two heavy convolutions that keep improving, light glue that does not.
  std::vector<Curve> curves{{10e-3, 4e-3, 0.004}, {6e-3, 3e-3, 0.006}, {0.2e-3, 0.15e-3, 0.5}, {0.1e-3, 0.1e-3, 1}};
  std::vector<double> weights{3, 4, 10, 10};
  std::vector<SchedulerTask> tasks{{3, 1e9, "conv"}, {4, 1e9, "conv"}, {10, 1e6, "softmax"}, {10, 1e6, "add"}};
  TaskScheduler s(tasks, options);
  auto [trials, objective] = simulate(s, curves, weights, 60);
  // Round robin with the same 60 steps: 15 each.
  double round_robin = 0;
  for (std::size_t i = 0; i < curves.size(); ++i) round_robin += weights[i] * curves[i].at(1 + 15 * 16);
  CHECK(objective < round_robin);
  CHECK(trials[0] + trials[1] > trials[2] + trials[3]);
}

TEST_CASE("scheduler: retired tasks are never picked; none left ends it", "[scheduler]") {
  TaskScheduler s({{1, 1e6, "a"}, {1, 1e6, "b"}});
  s.observe(0, 1e-3, 1);
  s.observe(1, 1e-3, 1);
  s.retire(0);
  for (int k = 0; k < 20; ++k) CHECK(s.next() == 1u);
  s.retire(1);
  CHECK_FALSE(s.next());
}

TEST_CASE("scheduler: a task with no working kernel yet is looked at again", "[scheduler]") {
  SchedulerOptions options;
  options.epsilon = 0;
  TaskScheduler s({{1, 1e6, "a"}, {1, 1e6, "b"}}, options);
  s.observe(0, 1e-3, 16);
  s.observe(1, std::numeric_limits<double>::infinity(), 16);
  s.next();
  s.next();
  CHECK(s.next() == 1u);
  CHECK(s.objective() == Approx(1e-3));
}

TEST_CASE("scheduler: the same seed gives the same picks", "[scheduler]") {
  std::vector<SchedulerTask> tasks{{2, 1e6, "a"}, {1, 1e6, "b"}, {3, 1e6, "c"}};
  SchedulerOptions options;
  options.epsilon = 0.5;
  TaskScheduler a(tasks, options), b(tasks, options);
  for (std::size_t i = 0; i < 3; ++i) {
    a.observe(i, 1e-3 * static_cast<double>(i + 1), 1);
    b.observe(i, 1e-3 * static_cast<double>(i + 1), 1);
  }
  for (int k = 0; k < 50; ++k) CHECK(a.next() == b.next());
}
