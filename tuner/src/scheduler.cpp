// TaskScheduler: gradient-style allocation of trials across a model's tasks.
#include "kestrel/tuner/scheduler.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace kestrel::tuner {

TaskScheduler::TaskScheduler(std::vector<SchedulerTask> tasks, SchedulerOptions options)
    : options_(options), tasks_(std::move(tasks)), state_(tasks_.size()), rng_(options.seed) {}

void TaskScheduler::observe(std::size_t task, double best_cost_s, std::size_t trials) {
  State& s = state_.at(task);
  s.costs.push_back(best_cost_s);
  s.trials.push_back(trials);
}

void TaskScheduler::retire(std::size_t task) { state_.at(task).retired = true; }

double TaskScheduler::gain(std::size_t task) const {
  const State& s = state_.at(task);
  const SchedulerTask& t = tasks_[task];
  if (s.costs.empty()) return std::numeric_limits<double>::infinity();
  const double cost = s.costs.back();
  if (!std::isfinite(cost)) return std::numeric_limits<double>::infinity();  // nothing works yet: look again
  const double trials = static_cast<double>(std::max<std::size_t>(s.trials.back(), 1));

  // Backward: how fast the best cost fell over the last `window` observations.
  double backward = 0;
  if (s.costs.size() >= 2) {
    std::size_t back = std::min(options_.window, s.costs.size() - 1);
    std::size_t from = s.costs.size() - 1 - back;
    double before = s.costs[from];
    double span = static_cast<double>(s.trials.back() - s.trials[from]);
    if (std::isfinite(before) && span > 0) backward = std::max(0.0, (before - cost) / span);
  }
  // Forward: optimistic, the cost may fall by its trials' share again; and a task slower
  // per FLOP than its op's fastest task may reach beta x that speed.
  double forward = cost / trials;
  if (t.flops > 0) {
    double fastest = std::numeric_limits<double>::infinity();  // seconds per FLOP
    for (std::size_t j = 0; j < tasks_.size(); ++j) {
      const State& o = state_[j];
      if (tasks_[j].group != t.group || tasks_[j].flops <= 0 || o.costs.empty() || !std::isfinite(o.costs.back())) continue;
      fastest = std::min(fastest, o.costs.back() / tasks_[j].flops);
    }
    if (std::isfinite(fastest)) forward = std::max(forward, (cost - options_.beta * fastest * t.flops) / trials);
  }
  return t.weight * (options_.alpha * backward + (1 - options_.alpha) * forward);
}

std::optional<std::size_t> TaskScheduler::next() {
  std::vector<std::size_t> live;
  for (std::size_t i = 0; i < state_.size(); ++i) {
    if (!state_[i].retired) live.push_back(i);
  }
  if (live.empty()) return std::nullopt;
  for (std::size_t i : live) {
    if (state_[i].steps == 0) {
      ++state_[i].steps;
      return i;
    }
  }
  std::size_t pick = live.front();
  if (std::uniform_real_distribution<double>(0, 1)(rng_) < options_.epsilon) {
    pick = live[std::uniform_int_distribution<std::size_t>(0, live.size() - 1)(rng_)];
  } else {
    double best = -1;
    for (std::size_t i : live) {
      double g = gain(i);
      if (g > best) {
        best = g;
        pick = i;
      }
    }
  }
  ++state_[pick].steps;
  return pick;
}

double TaskScheduler::objective() const {
  double sum = 0;
  for (std::size_t i = 0; i < state_.size(); ++i) {
    if (!state_[i].costs.empty() && std::isfinite(state_[i].costs.back())) sum += tasks_[i].weight * state_[i].costs.back();
  }
  return sum;
}

}  // namespace kestrel::tuner
