// Which task of a model to tune next. A model's latency is the sum over its tasks of
// occurrences x the best kernel's time; a trial is worth most where it is expected to
// cut that sum most. In the spirit of Ansor's task scheduler: every task gets one step
// first, then the task with the largest expected gain per trial, weighted by its
// occurrences, from what its own search did lately (backward) and what it might still
// do (forward: its cost over its trials, and how much faster similar tasks of the same op
// run per FLOP), with a small share of random picks so no task starves.
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <vector>

namespace kestrel::tuner {

struct SchedulerOptions {
  double alpha = 0.2;        // weight of the backward-looking gain (1 - alpha: forward)
  double beta = 2.0;         // a task may reach beta x the per-FLOP time of its op's fastest task
  std::size_t window = 3;    // steps the backward gain looks over
  double epsilon = 0.05;     // share of random picks among the tasks still searching
  std::uint64_t seed = 1;
};

struct SchedulerTask {
  double weight = 1;         // occurrences in the model
  double flops = 0;          // per call
  std::string group;         // tasks of one group (op) are similar
};

class TaskScheduler {
 public:
  explicit TaskScheduler(std::vector<SchedulerTask> tasks, SchedulerOptions options = {});

  // The task's best cost (seconds per call; +infinity when nothing succeeded) and its
  // trials so far, after a step (or its start).
  void observe(std::size_t task, double best_cost_s, std::size_t trials);
  // The task's search is over (trials or space exhausted): never picked again.
  void retire(std::size_t task);

  // The task to step next: the ones never stepped first, in order; then the largest
  // expected gain (or, with probability epsilon, a random one). None when all retired.
  std::optional<std::size_t> next();

  // The expected latency saved per trial of `task` (seconds), as next() ranks it.
  double gain(std::size_t task) const;
  // Sum of weight x best cost over tasks with a finite cost (seconds).
  double objective() const;
  std::size_t size() const { return tasks_.size(); }

 private:
  struct State {
    std::vector<double> costs;          // best cost after each observation
    std::vector<std::size_t> trials;    // trials at each observation
    std::size_t steps = 0;              // times picked
    bool retired = false;
  };
  SchedulerOptions options_;
  std::vector<SchedulerTask> tasks_;
  std::vector<State> state_;
  std::mt19937_64 rng_;
};

}  // namespace kestrel::tuner
