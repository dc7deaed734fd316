// The tuning loop: propose, evaluate, record, learn a batch per step; then re-measure
// the finalists and the default, interleaved.
#include "kestrel/tuner/tuning_loop.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <random>
#include <thread>

#include "kestrel/base/log.h"
#include "kestrel/base/stats.h"
#include "kestrel/rpc/handshake.h"
#include "kestrel/rpc/run_on_thread.h"
#include "kestrel/tuner/features.h"
#include "kestrel/tuner/space.h"
#include "kestrel/tuner/strategy.h"
#include "kestrel/tuner/zero_shot.h"
#include "loop_records.h"

namespace kestrel::tuner {

std::string_view to_string(StopReason reason) {
  switch (reason) {
    case StopReason::none: return "";
    case StopReason::trials: return "trials";
    case StopReason::time_budget: return "time budget";
    case StopReason::early_stopping: return "early stopping";
    case StopReason::interrupted: return "interrupted";
    case StopReason::space_exhausted: return "space exhausted";
    case StopReason::zero_shot: return "zero-shot";
  }
  return "";
}

std::string_view to_string(FinalCut cut) {
  switch (cut) {
    case FinalCut::none: return "";
    case FinalCut::fewer_passes: return "fewer passes";
    case FinalCut::skipped: return "skipped";
  }
  return "";
}
namespace {
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
constexpr std::string_view kLog = "tune";
constexpr double kInf = std::numeric_limits<double>::infinity();
}  // namespace

double to_gflops(double flops, double seconds) {
  return std::isfinite(seconds) && seconds > 0 && flops > 0 ? flops / seconds / 1e9 : 0;
}

std::string new_session_id() {
  std::random_device rd;
  std::uint64_t v = (static_cast<std::uint64_t>(rd()) << 32) ^ rd() ^
                    static_cast<std::uint64_t>(Clock::now().time_since_epoch().count());
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(v));
  return text;
}

TuningLoop::TuningLoop(Task task, records::RecordStore& db, Evaluator& evaluator, TuneOptions options)
    : task_(std::move(task)),
      db_(db),
      evaluator_(evaluator),
      options_(std::move(options)),
      best_cost_(kInf),
      default_cost_(kInf) {}

TuningLoop::~TuningLoop() = default;

Clock::time_point TuningLoop::now() const { return options_.clock ? options_.clock() : Clock::now(); }

std::uint32_t TuningLoop::min_final_passes() const {
  return std::max<std::uint32_t>(1, std::min(options_.final_passes, options_.final_repeat));
}

std::size_t TuningLoop::final_entries() const {
  if (options_.zero_shot) return options_.zero_shot_verify > 0 ? zero_shot_points_.size() + 1 : 0;
  if (options_.final_top == 0 || ok_count_ == 0) return 0;
  const std::size_t vendors = selected_vendors().size();
  // Only the default succeeded: nothing to compare it with (finish skips it under a limit).
  if (ok_count_ == 1 && std::isfinite(default_cost_) && vendors == 0) return 0;
  // The finalists, the default (counted apart: it may be one of them) and the vendors.
  return std::min(options_.final_top, ok_count_) + 1 + vendors;
}

std::optional<Clock::duration> TuningLoop::entry_pass_time() const {
  if (eval_configs_ == 0) return std::nullopt;
  const double wall = std::chrono::duration<double>(eval_wall_).count();
  // Per configuration: what is neither its timed rounds nor its compilation (a final pass
  // finds its kernels in the compiler's cache) -- loading, warming up, the round trip --,
  // plus the timed rounds of a final pass at this session's round time. Compiling runs on
  // every core: it took at least its time over the cores.
  const double compiling = compile_seconds_ / std::max(1u, std::thread::hardware_concurrency());
  double per_entry = std::max(0.0, wall - timed_seconds_ - compiling) / static_cast<double>(eval_configs_);
  if (timed_rounds_ > 0) {
    const std::uint32_t rounds = (options_.final_repeat + min_final_passes() - 1) / min_final_passes();
    per_entry += std::max<std::uint32_t>(1, rounds) * timed_seconds_ / static_cast<double>(timed_rounds_);
  }
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(per_entry));
}

Clock::duration TuningLoop::final_estimate(Clock::duration per_entry_pass) const {
  if (auto own = entry_pass_time()) per_entry_pass = *own;
  return per_entry_pass * static_cast<long>(final_entries() * min_final_passes());
}

std::optional<Clock::duration> TuningLoop::final_estimate() const {
  if (final_entries() == 0) return Clock::duration{};
  if (!entry_pass_time()) return std::nullopt;
  return final_estimate(Clock::duration{});
}

void TuningLoop::report(const std::string& phase) {
  progress_.total = options_.zero_shot ? zero_shot_points_.size() + 1 : options_.trials;
  progress_.trials = measured_.size();
  progress_.this_session = result_.this_session;
  progress_.failures = failures_;
  progress_.statuses.clear();
  for (const auto& [status, count] : result_.statuses) {
    if (status != "ok") progress_.statuses[status] = count;
  }
  progress_.flops = result_.flops;
  progress_.best_seconds = best_cost_;
  progress_.default_seconds = default_cost_;
  progress_.best_config = best_config_;
  progress_.elapsed = now() - started_;
  progress_.phase = phase;
  progress_.verdict.clear();
  progress_.speedup = 0;
  progress_.passes = 0;
  progress_.final_cut = FinalCut::none;
  if (phase == "final") {
    progress_.eta = final_eta_;
  } else if (phase == "done") {
    progress_.eta.reset();
    progress_.verdict = result_.verdict;
    progress_.passes = result_.passes;
    progress_.final_cut = result_.final_cut;
    if (!result_.final.empty() && result_.final.front().ok()) {
      progress_.speedup = result_.final.front().is_default ? 1.0 : result_.final.front().speedup;
    } else if (result_.best_recorded && std::isfinite(result_.default_seconds) && result_.best_recorded->median_s > 0) {
      progress_.speedup = result_.default_seconds / result_.best_recorded->median_s;
    }
  } else if (result_.this_session > 0 && progress_.trials < progress_.total) {
    auto per_trial = progress_.elapsed / result_.this_session;
    progress_.eta = per_trial * static_cast<long>(progress_.total - progress_.trials);
  } else {
    progress_.eta.reset();
  }
  if (on_progress_) on_progress_(progress_);
}

rpc::awaitable<void> TuningLoop::start() {
  task_.op->validate(task_.params);
  space_ = std::make_unique<Space>(*task_.op, task_.params, task_.target.traits);
  started_ = now();
  result_ = {};
  result_.session = new_session_id();
  result_.op = task_.op_name();
  result_.workload = task_.workload();
  result_.target = task_.target_name();
  result_.traits = task_.target.traits.to_string();
  result_.flops = task_.flops();
  default_config_ = task_.op->default_config(task_.params, task_.target.traits);
  if (options_.zero_shot) {
    co_await start_zero_shot();
    co_return;
  }

  // ---- what earlier sessions measured ------------------------------------------
  // A configuration whose device was lost was never measured: it is tried again.
  std::vector<Observation> history;
  for (const auto& past : loop_records::of_task(db_, task_, options_.device_class)) {
    if (past.final_measurement || past.status == kernel::Status::device_lost) continue;
    std::uint64_t index = 0;
    try {
      index = space_->index(past.config);
    } catch (const ops::OpError&) {
      continue;  // recorded with another knob space (older Kestrel)
    }
    if (!measured_.insert(index).second) continue;
    history.push_back({index, past.cost, past.ok()});
    if (past.ok()) ++ok_count_;
    if (past.ok() && past.cost < best_cost_) {
      best_cost_ = past.cost;
      best_config_ = past.config;
    }
    if (past.config == default_config_ && past.ok()) default_cost_ = past.cost;
  }
  result_.resumed = measured_.size();

  StrategyOptions strategy_options;
  strategy_options.seed = options_.seed;
  if (options_.transfer) {
    for (const auto& other : loop_records::of_other_workloads(db_, task_)) {
      try {
        strategy_options.transfer.push_back({feature_vector(*task_.op, other.params, other.config), other.cost});
      } catch (const std::exception&) {
        continue;
      }
    }
    result_.transfer_records = strategy_options.transfer.size();
  }
  if (options_.prior_model) {
    // The cross-workload model's scores of this task's points: "sa" plans its first batch
    // from them and fades them out as measurements arrive.
    if (std::string missing = missing_model(*options_.prior_model, task_.op_name(), task_.target); missing.empty()) {
      strategy_options.prior = model_prior(options_.prior_model, *space_, task_.target);
      // The model's name: op/class, or op/family for a family's pooled model.
      result_.prior =
          task_.op_name() + "/" + options_.prior_model->serving(task_.op_name(), target_class(task_.target))->target_class;
    } else {
      result_.prior = "none: " + missing;
      log::warn(kLog, task_.op_name(), " ", result_.workload, ": ", missing, ": the search starts without a prior");
    }
  }
  strategy_ = make_strategy(options_.strategy, *space_, strategy_options);
  if (!history.empty()) strategy_->observe(history);
  if (result_.resumed > 0) {
    log::info(kLog, "resuming: ", result_.resumed, " configurations already measured on ", result_.target);
  }
  started_ok_ = true;
  result_.stop_reason = StopReason::trials;
  report("tuning");

  // ---- the default configuration first: the baseline of every speed-up ---------
  std::uint64_t default_index = space_->index(default_config_);
  if (!measured_.contains(default_index) && measured_.size() < options_.trials) {
    std::vector<std::uint64_t> first(1, default_index);
    std::vector<Evaluation> observed;
    if (!co_await evaluate_unless_interrupted(first, observed)) co_return;
    if (observed.front().ok()) {
      default_cost_ = observed.front().cost;
      if (default_cost_ < best_cost_) {
        best_cost_ = default_cost_;
        best_config_ = default_config_;
      }
    }
    report("tuning");
  }
}

rpc::awaitable<void> TuningLoop::start_zero_shot() {
  if (!options_.prior_model) {
    throw std::invalid_argument("zero-shot tuning of " + task_.op_name() + " " + result_.workload +
                                " needs a cost model (kestrel tune --zero-shot --cost-model FILE)");
  }
  TuneResult::ZeroShot zero_shot;
  if (std::string missing = missing_model(*options_.prior_model, task_.op_name(), task_.target); missing.empty()) {
    ZeroShotOptions pick_options;
    pick_options.top = std::max<std::size_t>(1, options_.zero_shot_verify);
    pick_options.seed = options_.seed;
    // Plain pointers only: GCC 12 destroys a co_await operand's non-trivial temporaries twice.
    const CrossModel* model = options_.prior_model.get();
    const Space* space = space_.get();
    const host::Target* target = &task_.target;
    ZeroShotPick pick = co_await rpc::run_on_thread(
        [model, space, target, pick_options] { return zero_shot_pick(*model, *space, *target, pick_options); });
    for (std::uint64_t index : pick.points) zero_shot.picks.push_back(space_->config(index));
    zero_shot.seconds = pick.elapsed.count();
    zero_shot.scored = pick.scored;
    zero_shot_points_ = std::move(pick.points);
  } else {
    // Never silently: the result says the default stands in, and why.
    zero_shot.fallback = missing;
    zero_shot.picks.push_back(default_config_);
    log::warn(kLog, task_.op_name(), " ", result_.workload, ": ", missing, ": the op's default stands in");
  }
  result_.zero_shot = std::move(zero_shot);
  result_.stop_reason = StopReason::zero_shot;
  started_ok_ = true;
  done_ = true;
  report("tuning");
}

rpc::awaitable<std::vector<Evaluation>> TuningLoop::evaluate(const std::vector<std::uint64_t>& indices) {
  std::vector<ops::Config> configs;
  for (std::uint64_t index : indices) {
    measured_.insert(index);
    configs.push_back(space_->config(index));
  }
  loop_records::Context context{result_.session, options_.device_key, options_.device_class, default_config_};
  std::vector<bool> recorded(indices.size(), false);
  std::vector<Evaluation> evaluations;
  const Clock::time_point evaluate_started = now();
  try {
    evaluations = co_await evaluator_.evaluate(
        task_, configs, options_.measure, [&](std::size_t i, const Evaluation& e) {
          // Lost with its device for the first time: not a measurement; the next batch
          // measures it again (retry_), so it is recorded once, when measured.
          if (e.status == kernel::Status::device_lost && i < indices.size() &&
              !retried_.contains(indices[i])) {
            return;
          }
          loop_records::add(db_, task_, e, context, false);
          if (i < recorded.size()) recorded[i] = true;
          ++result_.statuses[std::string(kernel::to_string(e.status))];
          ++result_.this_session;
          if (!e.ok()) ++failures_;
        });
  } catch (...) {
    // What was not measured stays unmeasured: a later batch or session tries it.
    for (std::size_t i = 0; i < indices.size(); ++i) {
      if (!recorded[i]) measured_.erase(indices[i]);
    }
    throw;
  }
  eval_wall_ += now() - evaluate_started;
  std::vector<Observation> observations;
  for (std::size_t i = 0; i < indices.size(); ++i) {
    const Evaluation& e = evaluations[i];
    ++eval_configs_;
    compile_seconds_ += e.compile_ms / 1e3;
    if (e.ok()) {
      ++ok_count_;
      timed_rounds_ += e.round_seconds.size();
      for (double seconds : e.round_seconds) timed_seconds_ += seconds * std::max<std::uint32_t>(1, e.number);
    }
    // Lost with its device: not measured. Tried again in the next batch once; lost again,
    // it is recorded as such and a later session tries it.
    if (e.status == kernel::Status::device_lost) {
      measured_.erase(indices[i]);
      if (retried_.insert(indices[i]).second) retry_.push_back(indices[i]);
      continue;
    }
    observations.push_back({indices[i], e.ok() ? e.cost : kInf, e.ok()});
  }
  if (!observations.empty()) strategy_->observe(observations);
  co_return evaluations;
}

rpc::awaitable<bool> TuningLoop::evaluate_unless_interrupted(const std::vector<std::uint64_t>& indices,
                                                             std::vector<Evaluation>& out) {
  try {
    out = co_await evaluate(indices);
    co_return true;
  } catch (const rpc::RpcError& e) {
    // Ctrl-C: the stop asked for ended the measurement in flight (MeasureClient::interrupt);
    // what arrived before is recorded, the rest was never measured.
    if (e.code() != rpc::ErrorCode::cancelled || !stop_.load()) throw;
  }
  result_.stop_reason = StopReason::interrupted;
  done_ = true;
  report("tuning");
  co_return false;
}

std::optional<StopReason> TuningLoop::stop_reason() const {
  if (measured_.size() >= options_.trials) return StopReason::trials;
  if (stop_.load()) return StopReason::interrupted;
  if (options_.time_budget.count() > 0) {
    // The budget covers the final round: the search stops when another step (as long as
    // the last) would leave less than the final round's minimum passes are expected to
    // take (at most half the budget: the search keeps the other half).
    Clock::duration reserve = final_estimate().value_or(Clock::duration{});
    reserve = std::min<Clock::duration>(reserve, options_.time_budget / 2);
    if (now() - started_ + reserve + last_step_ >= options_.time_budget) return StopReason::time_budget;
  }
  if (options_.early_stopping > 0 && since_improvement_ >= options_.early_stopping) return StopReason::early_stopping;
  return std::nullopt;
}

rpc::awaitable<std::optional<TuneProgress>> TuningLoop::step() {
  if (!started_ok_) throw std::logic_error("TuningLoop::step() before start()");
  if (done_) co_return std::nullopt;
  if (auto reason = stop_reason()) {
    result_.stop_reason = *reason;
    done_ = true;
    co_return std::nullopt;
  }
  const Clock::time_point step_started = now();
  std::size_t n = std::min(options_.batch_size, options_.trials - measured_.size());
  // Configurations lost with their device in the last batch go first.
  std::vector<std::uint64_t> batch;
  while (!retry_.empty() && batch.size() < n) {
    if (!measured_.contains(retry_.front())) batch.push_back(retry_.front());
    retry_.erase(retry_.begin());
  }
  n -= batch.size();
  Strategy* strategy = strategy_.get();
  // Model fitting and annealing run on another thread: heartbeats and results flow meanwhile.
  std::vector<std::uint64_t> proposed;
  if (n > 0) proposed = co_await rpc::run_on_thread([strategy, n] { return strategy->propose(n); });
  for (std::uint64_t index : proposed) {
    if (!measured_.contains(index) && std::find(batch.begin(), batch.end(), index) == batch.end()) {
      batch.push_back(index);
    }
  }
  if (batch.empty()) {
    result_.stop_reason = StopReason::space_exhausted;
    done_ = true;
    co_return std::nullopt;
  }
  std::vector<Evaluation> evaluations;
  if (!co_await evaluate_unless_interrupted(batch, evaluations)) co_return std::nullopt;
  last_step_ = now() - step_started;
  for (std::size_t i = 0; i < evaluations.size(); ++i) {
    const Evaluation& e = evaluations[i];
    if (e.ok() && e.cost < best_cost_) {
      best_cost_ = e.cost;
      best_config_ = e.config;
      since_improvement_ = 0;
    } else {
      ++since_improvement_;
    }
  }
  report("tuning");
  co_return progress_;
}

std::vector<ops::VendorKernel> TuningLoop::selected_vendors() const {
  if (options_.vendors == "none" || task_.target.backend != ops::Backend::cpu) return {};
  std::vector<ops::VendorKernel> out;
  for (auto& kernel : task_.op->vendor_kernels(task_.params)) {
    const std::string list = "," + options_.vendors + ",";
    if (options_.vendors == "all" || list.find("," + kernel.implementation + ",") != std::string::npos) {
      out.push_back(std::move(kernel));
    }
  }
  return out;
}

FinalEntry TuningLoop::entry_of(const Evaluation& m) const {
  FinalEntry entry;
  entry.implementation = m.implementation;
  entry.config = m.config;
  entry.is_default = m.implementation == records::kKestrelImplementation && entry.config == default_config_;
  entry.status = m.status;
  if (m.ok()) {
    std::vector<double> sorted = m.round_seconds;
    std::sort(sorted.begin(), sorted.end());
    entry.median_s = m.cost;
    entry.spread = (stats::quantile(sorted, 0.9) - stats::quantile(sorted, 0.1)) / m.cost;
    entry.noisy = entry.spread > options_.noisy_spread;
  } else {
    entry.median_s = kInf;
  }
  return entry;
}

void TuningLoop::final_round_from_records(double cost, std::uint64_t index) {
  // No re-measurement: the best recorded configuration, as measured during the search.
  FinalEntry entry;
  entry.config = space_->config(index);
  entry.median_s = cost;
  entry.status = kernel::Status::ok;
  entry.is_default = entry.config == default_config_;
  result_.best_recorded = entry;
}

rpc::awaitable<TuneResult> TuningLoop::finish(FinalLimit limit) {
  if (!started_ok_) throw std::logic_error("TuningLoop::finish() before start()");
  if (!done_) {
    if (auto reason = stop_reason()) result_.stop_reason = *reason;
    done_ = true;
  }
  // A loop's own time budget covers its final round.
  if (!limit.deadline && options_.time_budget.count() > 0) limit.deadline = started_ + options_.time_budget;
  const Clock::duration entry_pass = entry_pass_time().value_or(limit.entry_pass.value_or(Clock::duration{}));
  const Clock::time_point final_started = now();
  result_.default_seconds = default_cost_;
  const std::vector<ops::VendorKernel> vendors = selected_vendors();
  loop_records::Context context{result_.session, options_.device_key, options_.device_class, default_config_};

  // ---- the finalists: the model's picks (zero-shot), or the best few of the search ---
  std::vector<std::uint64_t> finalists;
  if (options_.zero_shot) {
    // Without verification the model's first pick is the result: nothing is measured.
    if (options_.zero_shot_verify == 0 || stop_.load()) {
      result_.trials = 0;
      report("done");
      co_return result_;
    }
    finalists = zero_shot_points_;
  }
  std::vector<std::pair<double, std::uint64_t>> ranked;
  if (!options_.zero_shot) {
    for (const auto& past : loop_records::of_task(db_, task_, options_.device_class)) {
      if (past.final_measurement || !past.ok()) continue;
      try {
        ranked.push_back({past.cost, space_->index(past.config)});
      } catch (const ops::OpError&) {
      }
    }
    std::sort(ranked.begin(), ranked.end());
    for (const auto& [cost, index] : ranked) {
      if (finalists.size() >= options_.final_top) break;
      if (std::find(finalists.begin(), finalists.end(), index) == finalists.end()) finalists.push_back(index);
    }
  }
  // Under a time limit, the default alone is not re-measured: nothing to compare it with.
  const bool default_alone = limit.deadline && !options_.zero_shot && vendors.empty() && finalists.size() == 1 &&
                             space_->config(finalists.front()) == default_config_;
  if (default_alone) finalists.clear();
  // Out of time: no final round; the best recorded configuration stands.
  bool skipped = false;
  if (limit.deadline && !stop_.load() && (options_.zero_shot || !finalists.empty())) {
    const std::size_t entries = finalists.size() + 1 + vendors.size();
    const Clock::duration needed = entry_pass * static_cast<long>(entries * min_final_passes());
    if (now() + needed > *limit.deadline) skipped = true;
  }
  if (skipped) {
    result_.final_cut = FinalCut::skipped;
    log::info(kLog, task_.op_name(), " ", result_.workload, ": no time left for the final round; the best recorded "
              "configuration stands, not re-measured");
    if (options_.zero_shot) {
      result_.trials = 0;
      report("done");
      co_return result_;
    }
  }
  if (!options_.zero_shot && (finalists.empty() || stop_.load() || skipped)) {
    if (!ranked.empty()) final_round_from_records(ranked.front().first, ranked.front().second);
    // No final round to join: the vendor kernels are measured once on their own.
    const bool vendors_fit =
        !limit.deadline || now() + entry_pass * static_cast<long>(vendors.size()) <= *limit.deadline;
    if (!vendors.empty() && !stop_.load() && !skipped && vendors_fit) {
      report("final");
      auto measured = co_await evaluator_.evaluate_vendors(task_, vendors, options_.measure);
      for (const Evaluation& e : measured) {
        loop_records::add(db_, task_, e, context, false);
        result_.vendors.push_back(entry_of(e));
      }
    }
    result_.trials = measured_.size();
    report("done");
    co_return result_;
  }

  // ---- finalists and the default, interleaved over passes, order alternating -----
  final_eta_ = entry_pass * static_cast<long>((finalists.size() + 1 + vendors.size()) * min_final_passes());
  report("final");
  std::vector<ops::Config> configs;
  for (std::uint64_t index : finalists) configs.push_back(space_->config(index));
  std::size_t default_at = configs.size();
  for (std::size_t i = 0; i < configs.size(); ++i) {
    if (configs[i] == default_config_) default_at = i;
  }
  if (default_at == configs.size()) configs.push_back(default_config_);

  const std::uint32_t min_passes = std::max<std::uint32_t>(1, std::min(options_.final_passes, options_.final_repeat));
  const std::uint32_t max_passes = std::max(min_passes, options_.final_max_passes);
  rpc::MeasureSettings settings = options_.measure;
  settings.repeat = std::max<std::uint32_t>(1, (options_.final_repeat + min_passes - 1) / min_passes);

  // Kestrel's configurations first, then the vendor kernels (merged[configs.size() + v]).
  std::vector<Evaluation> merged(configs.size() + vendors.size());
  // Per entry, the median of each pass (+infinity where it failed): the paired samples.
  std::vector<std::vector<double>> pass_medians(merged.size());
  for (std::size_t i = 0; i < configs.size(); ++i) merged[i].config = configs[i];
  for (std::size_t v = 0; v < vendors.size(); ++v) merged[configs.size() + v].implementation = vendors[v].implementation;
  auto merge = [&](std::size_t i, const Evaluation& e) {
    Evaluation& m = merged[i];
    if (m.ok() && !e.ok()) {
      m.status = e.status;
      m.message = e.message;
    }
    m.round_seconds.insert(m.round_seconds.end(), e.round_seconds.begin(), e.round_seconds.end());
    if (m.device.empty()) {
      m.device = e.device;
      m.device_class = e.device_class;
    }
    m.compile_ms = std::max(m.compile_ms, e.compile_ms);
    m.number = e.number;
    m.max_error = std::max(m.max_error, e.max_error);
    m.machine = e.machine;  // the latest
    pass_medians[i].push_back(e.ok() ? stats::median(e.round_seconds) : kInf);
  };
  // Each entry's speed-up over the default: default's per-pass medians / its own.
  auto speedup_of = [&](std::size_t i) { return stats::ratio_interval(pass_medians[default_at], pass_medians[i]); };
  auto ok_throughout = [&](std::size_t i) { return merged[i].ok() && !pass_medians[i].empty(); };
  // The Kestrel finalist (not the default) with the best typical speed-up so far.
  auto leader = [&]() -> std::optional<std::size_t> {
    std::optional<std::size_t> best;
    for (std::size_t i = 0; i < configs.size(); ++i) {
      if (i == default_at || !ok_throughout(i)) continue;
      if (!best || speedup_of(i).estimate > speedup_of(*best).estimate) best = i;
    }
    return best;
  };
  // Decided: the leader is faster than the default with confidence, or its interval is
  // tight (within +-final_precision), or it cannot be meaningfully faster.
  auto decided = [&] {
    if (!ok_throughout(default_at)) return true;
    auto l = leader();
    if (!l) return true;
    stats::RatioInterval r = speedup_of(*l);
    return r.above_one() || r.relative_half_width() <= options_.final_precision ||
           (r.n >= 2 && r.high <= 1 + options_.final_precision);
  };
  std::vector<bool> vendor_measured(vendors.size(), false);  // an evaluator may not run vendors
  // A pass is expected to take as long as the passes so far, else as the search's
  // measurements say.
  Clock::duration passes_time{};
  const Clock::duration first_pass_estimate = entry_pass * static_cast<long>(merged.size());
  auto pass_estimate = [&](std::uint32_t done) {
    return done > 0 ? passes_time / static_cast<long>(done) : first_pass_estimate;
  };
  std::uint32_t pass = 0;
  for (; pass < max_passes; ++pass) {
    if (pass > 0 && stop_.load()) break;
    if (pass >= min_passes && decided()) break;
    const Clock::duration estimate = pass_estimate(pass);
    final_eta_ = estimate * static_cast<long>(std::max<std::uint32_t>(1, min_passes > pass ? min_passes - pass : 1));
    if (limit.deadline) {
      Clock::time_point until = *limit.deadline;
      if (pass >= min_passes && limit.extra_deadline) until = std::min(until, *limit.extra_deadline);
      if (now() + estimate > until) {
        result_.final_cut = FinalCut::fewer_passes;
        log::info(kLog, task_.op_name(), " ", result_.workload, ": the time limit ends the final round after ", pass,
                  " passes");
        break;
      }
    }
    if (pass > 0) report("final");
    const Clock::time_point pass_started = now();
    std::vector<std::size_t> order(configs.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    if (pass % 2 == 1) std::reverse(order.begin(), order.end());
    std::vector<ops::Config> pass_configs;
    for (std::size_t i : order) pass_configs.push_back(configs[i]);
    // The vendors go after Kestrel's kernels in even passes, before them in odd ones.
    std::vector<Evaluation> vendor_evaluations;
    if (pass % 2 == 1 && !vendors.empty()) {
      vendor_evaluations = co_await evaluator_.evaluate_vendors(task_, vendors, settings);
    }
    auto evaluations = co_await evaluator_.evaluate(task_, pass_configs, settings);
    if (pass % 2 == 0 && !vendors.empty()) {
      vendor_evaluations = co_await evaluator_.evaluate_vendors(task_, vendors, settings);
    }
    for (std::size_t k = 0; k < order.size(); ++k) merge(order[k], evaluations[k]);
    for (std::size_t v = 0; v < vendor_evaluations.size() && v < vendors.size(); ++v) {
      merge(configs.size() + v, vendor_evaluations[v]);
      vendor_measured[v] = true;
    }
    passes_time += now() - pass_started;
    if (pass + 1 >= min_passes && pass + 1 < max_passes && !decided()) {
      log::info(kLog, task_.op_name(), " ", result_.workload, ": final pass ", pass + 1,
                " left the speed-up over the default undecided; measuring another pass");
    }
  }
  result_.passes = pass;
  final_eta_.reset();

  // ---- the recommendation: faster than the default with confidence, or the default --
  for (std::size_t i = 0; i < merged.size(); ++i) {
    Evaluation& m = merged[i];
    if (m.round_seconds.empty() && m.ok()) m.status = kernel::Status::device_lost;
    m.cost = m.ok() ? stats::median(m.round_seconds) : kInf;
  }
  auto lower_median = [&](std::size_t a, std::size_t b) { return merged[a].cost < merged[b].cost; };
  std::optional<std::size_t> own;  // Kestrel's recommendation
  std::optional<std::size_t> overall;
  if (ok_throughout(default_at)) {
    own = default_at;
    for (std::size_t i = 0; i < configs.size(); ++i) {
      if (i == default_at || !ok_throughout(i) || !speedup_of(i).above_one()) continue;
      if (own == default_at || speedup_of(i).estimate > speedup_of(*own).estimate) own = i;
    }
    if (*own != default_at) {
      result_.verdict = "faster";
    } else if (auto l = leader(); l && speedup_of(*l).relative_half_width() > options_.too_noisy &&
                                  speedup_of(*l).high > 1 + options_.final_precision) {
      result_.verdict = "too noisy";
      log::warn(kLog, task_.op_name(), " ", result_.workload, ": the machine was too noisy to tell whether ",
                ops::format_config(configs[*l]), " beats the default (speed-up ", speedup_of(*l).estimate,
                ", 95% interval ", speedup_of(*l).low, "-", speedup_of(*l).high, " after ", pass,
                " passes): keeping the default");
    } else {
      result_.verdict = "not faster";
    }
    overall = own;
    // A vendor library wins only when it is faster than Kestrel's pick with confidence.
    for (std::size_t v = 0; v < vendors.size(); ++v) {
      const std::size_t i = configs.size() + v;
      if (!vendor_measured[v] || !ok_throughout(i)) continue;
      stats::RatioInterval over_own = stats::ratio_interval(pass_medians[*own], pass_medians[i]);
      if (over_own.above_one() &&
          (*overall == *own || over_own.estimate > stats::ratio_interval(pass_medians[*own], pass_medians[*overall]).estimate)) {
        overall = i;
      }
    }
  } else {
    // No baseline: the lowest median wins, as measured.
    result_.verdict = "no default";
    for (std::size_t i = 0; i < merged.size(); ++i) {
      if (i >= configs.size() && !vendor_measured[i - configs.size()]) continue;
      if (!ok_throughout(i)) continue;
      if (i < configs.size() && (!own || lower_median(i, *own))) own = i;
      if (!overall || lower_median(i, *overall)) overall = i;
    }
  }

  std::optional<FinalEntry> default_entry;
  std::optional<FinalEntry> first;  // the recommendation's entry
  for (std::size_t i = 0; i < merged.size(); ++i) {
    Evaluation& m = merged[i];
    if (i >= configs.size() && !vendor_measured[i - configs.size()]) continue;
    unsigned flags = (overall == i ? records::kRecommended : 0u) | (own == i ? records::kOwnRecommended : 0u);
    loop_records::add(db_, task_, m, context, true, flags);
    if (options_.zero_shot && i < configs.size()) {
      // The verification is this session's only measurement of the task.
      ++result_.statuses[std::string(kernel::to_string(m.status))];
      ++result_.this_session;
      if (!m.ok()) ++failures_;
      measured_.insert(space_->index(m.config));
    }
    FinalEntry entry = entry_of(m);
    if (m.ok() && ok_throughout(default_at)) {
      stats::RatioInterval r = speedup_of(i);
      entry.speedup = r.estimate;
      entry.speedup_low = r.low;
      entry.speedup_high = std::isfinite(r.high) ? r.high : 0;
    }
    entry.recommended = overall == i;
    if (entry.is_default) default_entry = entry;
    if (entry.recommended) {
      first = entry;
    } else {
      result_.final.push_back(entry);
    }
  }
  std::stable_sort(result_.final.begin(), result_.final.end(),
                   [](const FinalEntry& a, const FinalEntry& b) { return a.median_s < b.median_s; });
  if (first) result_.final.insert(result_.final.begin(), *first);
  if (default_entry && default_entry->ok()) {
    result_.default_seconds = default_entry->median_s;
    // Never recommend a configuration that is not faster than the default with confidence.
    result_.default_is_best = own == default_at;
  }
  result_.final_time = now() - final_started;
  result_.trials = measured_.size();
  report("done");
  co_return result_;
}

rpc::awaitable<TuneResult> TuningLoop::run(std::function<void(const TuneProgress&)> on_progress) {
  if (on_progress) on_progress_ = std::move(on_progress);
  co_await start();
  while (true) {  // (GCC 12 miscompiles a co_await in a loop condition)
    std::optional<TuneProgress> progress = co_await step();
    if (!progress) break;
  }
  co_return co_await finish();
}

}  // namespace kestrel::tuner
