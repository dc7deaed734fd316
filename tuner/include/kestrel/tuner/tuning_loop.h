// The tuning loop of one task: propose a batch -> evaluate (check, compile, measure) ->
// record -> learn, a batch per step(), until the trial budget, the time budget or early
// stopping ends it; then finish() measures the finalists and the op's default config
// again, interleaved over several passes, and ranks them by the median of all rounds
// (the best of a noisy search is biased upward; a lucky round must not win). The op's
// vendor kernels (OpenBLAS, oneDNN: ops::Op::vendor_kernels) run in that final round too,
// recorded under their implementation, so `best` picks the fastest of all; they never
// feed the search or its cost model.
//
// Every measurement is committed to the records database as it arrives. Trials count
// per task (op, workload, target) across sessions: running the same command again
// resumes, skipping what is recorded (except configurations whose device was lost) and
// warm-starting the search from it.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "kestrel/kernel/status.h"
#include "kestrel/ops/op.h"
#include "kestrel/rpc/measure.h"
#include "kestrel/tuner/evaluator.h"
#include "kestrel/records/records.h"
#include "kestrel/tuner/task.h"

namespace kestrel::tuner {

// Why a tuning loop (or a scheduled session) stopped.
enum class StopReason {
  none,             // still running, or a session of jobs in turn (each job has its own)
  trials,           // the trial budget is measured
  time_budget,      // the time budget ran out
  early_stopping,   // no improvement within --early-stopping trials
  interrupted,      // a stop was asked for (Ctrl-C, request_stop)
  space_exhausted,  // every configuration of the space is measured
  zero_shot,        // the cost model picked without a search
};
// "trials", "time budget", "early stopping", "interrupted", "space exhausted",
// "zero-shot"; "" for none: what the records, the dashboard and --json show.
std::string_view to_string(StopReason reason);

// How a time limit cut a task's final round (TuningLoop::finish with a FinalLimit, or
// the loop's own time_budget): not at all; fewer passes than it would have run (the
// verdict is from the passes that ran); or skipped before its first pass (no time left:
// the best recorded configuration stands, not re-measured).
enum class FinalCut { none, fewer_passes, skipped };
// "", "fewer passes", "skipped": what the summaries and --json show.
std::string_view to_string(FinalCut cut);

// When a final round must end (TuningLoop::finish). No pass starts that is expected (from
// the passes so far, else from the search's measurements) to end after `deadline`; the
// first needs time for the minimum passes (final_passes), else the round is skipped.
// Passes beyond the minimum start only when expected to end before `extra_deadline`
// too (a scheduled session keeps the time the other tasks' minimum passes need).
struct FinalLimit {
  std::optional<std::chrono::steady_clock::time_point> deadline;
  std::optional<std::chrono::steady_clock::time_point> extra_deadline;
  // One entry's pass when the loop measured nothing to go by (other tasks' mean).
  std::optional<std::chrono::steady_clock::duration> entry_pass;
};

class CrossModel;
class Space;
class Strategy;

struct TuneOptions {
  std::string strategy = "sa";
  std::uint64_t seed = 1;
  std::size_t trials = 200;                  // total for this task, earlier sessions included
  std::chrono::seconds time_budget{0};       // 0: none
  std::size_t early_stopping = 0;            // stop after this many trials without improvement; 0: off
  std::size_t batch_size = 16;
  rpc::MeasureSettings measure;
  std::size_t final_top = 3;                 // finalists re-measured at the end (with the default); 0: none
  std::uint32_t final_repeat = 15;           // timed rounds of each over the first final_passes passes
  std::uint32_t final_passes = 3;            // interleaved passes over finalists + default, at least
  // More passes (of final_repeat / final_passes rounds each) while the leader's speed-up
  // over the default is undecided: its 95% interval contains 1 and is wider than
  // +-final_precision. Up to this many passes in all.
  std::uint32_t final_max_passes = 12;
  double final_precision = 0.02;
  // At the last pass, an undecided interval wider than +-this is "too noisy to tell".
  double too_noisy = 0.05;
  double noisy_spread = 0.15;                // (p90 - p10) / median above this: "noisy"
  bool transfer = true;                      // seed the model with other workloads' records
  std::string device_key;                    // recorded with every measurement
  // The class of the devices measuring (key, model, fingerprint): resume and the final
  // ranking read only that class's records, and evaluations that never reached a device
  // (invalid configs, compile errors) are recorded under it. None: every class.
  std::optional<records::DeviceClass> device_class;
  // Vendor libraries measured as contenders at the end: "all", "none", or a comma-
  // separated list of implementations ("openblas,onednn"). Once per session: in the final
  // round when there is one, else on their own (not when interrupted).
  std::string vendors = "all";
  // A cross-workload cost model (cross_model.h) with a model for this op and target
  // class: warm-starts "sa" (StrategyOptions::prior). Null: none. A model without one
  // for the task's op and target class warm-starts nothing, and TuneResult::prior says so.
  std::shared_ptr<const CrossModel> prior_model;
  // Zero-shot: with a prior_model, pick the configuration without searching: the
  // model's top zero_shot_verify configurations (and the default) are measured once in
  // the final round, which decides as in a search; with zero_shot_verify == 0 nothing is
  // measured and nothing is recorded, and the model's first pick is the result
  // (TuneResult::zero_shot). Without a prior_model start() throws std::invalid_argument;
  // when the model has no model for the task's op and target class, the op's default
  // stands in for the picks and TuneResult::ZeroShot::fallback says why.
  bool zero_shot = false;
  std::size_t zero_shot_verify = 0;
  // The time source of budgets and progress (tests simulate time with it); empty: the
  // steady clock.
  std::function<std::chrono::steady_clock::time_point()> clock;
};

// GFLOP/s of a kernel doing `flops` floating-point operations per call in `seconds` per
// call; 0 when either is unknown (seconds not finite or not positive, flops not
// positive). Costs are seconds everywhere; this is the one conversion, at the edges
// (printing, JSON, the dashboard's reports).
double to_gflops(double flops, double seconds);

// Costs are seconds per call, +infinity while unknown (nothing succeeded yet).
struct TuneProgress {
  std::size_t trials = 0;        // measured so far, earlier sessions included
  std::size_t total = 0;         // the trial budget
  std::size_t this_session = 0;  // measured by this session
  std::size_t failures = 0;      // of this session
  std::map<std::string, std::size_t> statuses;  // this session's failures by status ("compile_error": 2)
  double flops = 0;              // the task's per call (Task::flops()): for GFLOP/s
  double best_seconds = std::numeric_limits<double>::infinity();     // the best so far
  double default_seconds = std::numeric_limits<double>::infinity();  // the op's default configuration
  std::optional<ops::Config> best_config;  // the best so far; none until one succeeded
  std::chrono::steady_clock::duration elapsed{};
  std::optional<std::chrono::steady_clock::duration> eta;
  std::string phase;             // "tuning", "final", "done"
  // In the final round (phase "final", and "done" after it): eta is the time left for
  // the final round (a scheduled session's: of every task's). A scheduled session's
  // final round also gives this task's place in it (1-based) of final_tasks.
  std::size_t final_task = 0, final_tasks = 0;
  // The "done" report: the final round's verdict (TuneResult::verdict), the
  // recommendation's speed-up over the default (0: unknown), the passes run and the cut.
  std::string verdict;
  double speedup = 0;
  std::uint32_t passes = 0;
  FinalCut final_cut = FinalCut::none;
  // GFLOP/s of best_seconds and default_seconds (0 while unknown).
  double best_gflops() const { return to_gflops(flops, best_seconds); }
  double default_gflops() const { return to_gflops(flops, default_seconds); }
};

struct FinalEntry {
  ops::Config config;            // empty for a vendor library's kernel
  double median_s = 0;           // median of every final round; +infinity when it failed
  kernel::Status status = kernel::Status::ok;  // ok, or the first failure's status
  double spread = 0;             // (p90 - p10) / median of the rounds
  bool noisy = false;            // spread above TuneOptions::noisy_spread
  bool is_default = false;       // the op's default configuration
  std::string implementation = records::kKestrelImplementation;  // a vendor library's: config is empty
  // Final rounds: its speed-up over the default (default's time / its time, from the
  // per-pass medians of the interleaved passes) with the 95% interval; 0 when unknown.
  double speedup = 0, speedup_low = 0, speedup_high = 0;
  bool recommended = false;      // the round's recommendation (TuneResult::verdict)
  bool ok() const { return status == kernel::Status::ok; }
  // GFLOP/s of median_s at `flops` per call (TuneResult::flops); 0 when it failed.
  double gflops(double flops) const { return ok() ? to_gflops(flops, median_s) : 0; }
};

struct TuneResult {
  std::string session;
  std::string op, workload, target;
  std::string traits;  // the target's traits the constraints and default were computed for
  std::size_t trials = 0;
  std::size_t this_session = 0;
  std::size_t resumed = 0;                    // records found from earlier sessions
  std::size_t transfer_records = 0;
  std::map<std::string, std::size_t> statuses;  // this session's measurements by status
  // The re-measured finalists, default and vendors; the recommendation first, then by
  // median. A configuration is recommended over the default only when it is faster with
  // 95% confidence (its speed-up interval lies above 1); a vendor over Kestrel's pick
  // likewise.
  std::vector<FinalEntry> final;
  // Why the recommendation is what it is: "faster" (a configuration beat the default with
  // confidence), "not faster" (none did, and the interval is tight: the default is as
  // good), "too noisy" (none did, and the machine was too noisy to tell), "no default" (the
  // default failed: ranked by median); empty without a final round.
  std::string verdict;
  std::uint32_t passes = 0;                   // final passes run
  // How a time limit cut the final round (skipped: best_recorded stands, not re-measured).
  FinalCut final_cut = FinalCut::none;
  std::chrono::steady_clock::duration final_time{};  // what the final round took
  // The recommendation: final.front(), or without a final round best_recorded; null
  // when nothing was measured successfully.
  const FinalEntry* recommendation() const {
    if (!final.empty() && final.front().ok()) return &final.front();
    return best_recorded ? &*best_recorded : nullptr;
  }
  // The task's floating-point operations per call (Task::flops()): GFLOP/s of the costs
  // (FinalEntry::gflops, default_gflops()).
  double flops = 0;
  // The default configuration's seconds per call, from the final re-measurement when
  // there was one; +infinity when unknown (not measured, or it failed).
  double default_seconds = std::numeric_limits<double>::infinity();
  double default_gflops() const { return to_gflops(flops, default_seconds); }
  bool default_is_best = false;               // no finalist beat the default: it is the recommendation
  std::optional<FinalEntry> best_recorded;    // without a final round: the best recorded config
  std::vector<FinalEntry> vendors;            // without a final round: the vendor kernels, measured once
  StopReason stop_reason = StopReason::none;
  // Zero-shot runs: the model's picks, best-scored first, and how long the pick took; the
  // first is the recommendation unless verification measured another faster.
  struct ZeroShot {
    std::vector<ops::Config> picks;
    double seconds = 0;
    std::size_t scored = 0;
    // Why the op's default is the only pick (the cost model has no model for the task's
    // op and target class); empty when the model picked.
    std::string fallback;
  };
  std::optional<ZeroShot> zero_shot;
  // With TuneOptions::prior_model: the model that warm-started the search ("gemm/avx2"),
  // or, starting with "none: ", why none did.
  std::string prior;
};

class TuningLoop {
 public:
  // `db` and `evaluator` are borrowed and must outlive the loop; so must the task's op.
  TuningLoop(Task task, records::RecordStore& db, Evaluator& evaluator, TuneOptions options);
  ~TuningLoop();
  TuningLoop(const TuningLoop&) = delete;
  TuningLoop& operator=(const TuningLoop&) = delete;

  // Reads what earlier sessions measured, seeds the strategy (and the transfer records)
  // and measures the default configuration when it is not recorded yet. Throws
  // ops::OpError for a workload the op cannot handle, std::invalid_argument for an
  // unknown strategy.
  rpc::awaitable<void> start();
  // Measures one batch. Returns the progress after it, or nothing when the search is over
  // (the reason is result().stop_reason); nothing is measured then.
  rpc::awaitable<std::optional<TuneProgress>> step();
  // Re-measures the finalists and the default (unless interrupted or final_top is 0)
  // and returns the session's result. Within `limit` (FinalLimit); without one, a loop
  // with a time_budget ends its final round within it (started at start()).
  rpc::awaitable<TuneResult> finish(FinalLimit limit = {});
  // The time the final round's minimum passes (final_passes) are expected to take: its
  // entries (the finalists, the default, the vendors) x passes x the time one entry's
  // pass takes, from this session's measurements (per configuration: its time beyond its
  // timed rounds and its compilation, plus the timed rounds a final pass gives it). Zero when there will be no
  // final round; nothing when nothing was measured yet to estimate from.
  std::optional<std::chrono::steady_clock::duration> final_estimate() const;
  // The same with `per_entry_pass` (another task's) when this loop has nothing to go by.
  std::chrono::steady_clock::duration final_estimate(std::chrono::steady_clock::duration per_entry_pass) const;
  // One entry's pass, as final_estimate reckons it; nothing before any measurement.
  std::optional<std::chrono::steady_clock::duration> entry_pass_time() const;
  // How long the last step() took (zero before the first).
  std::chrono::steady_clock::duration last_step() const { return last_step_; }
  // The loop's clock (TuneOptions::clock).
  std::chrono::steady_clock::time_point now() const;
  // start(), step() until done, finish().
  rpc::awaitable<TuneResult> run(std::function<void(const TuneProgress&)> on_progress = {});

  // Called with the progress after every change (set before start()).
  void on_progress(std::function<void(const TuneProgress&)> callback) { on_progress_ = std::move(callback); }
  // Asks the loop to stop: after the batch in flight, or at once when the measurement in
  // flight is interrupted too (the evaluator's measurement then throws
  // RpcError(cancelled), which ends the loop as "interrupted"); safe from a signal
  // handler's completion (same thread) at any time.
  void request_stop() { stop_.store(true); }
  const TuneProgress& progress() const { return progress_; }
  const TuneResult& result() const { return result_; }
  const Task& task() const { return task_; }

 private:
  // Zero-shot: the model's picks instead of a search (TuneOptions::zero_shot).
  rpc::awaitable<void> start_zero_shot();
  rpc::awaitable<std::vector<Evaluation>> evaluate(const std::vector<std::uint64_t>& indices);
  // evaluate(), or false when a stop asked for (request_stop) ended the measurement in
  // flight: the loop is then done, "interrupted".
  rpc::awaitable<bool> evaluate_unless_interrupted(const std::vector<std::uint64_t>& indices,
                                                   std::vector<Evaluation>& out);
  std::optional<StopReason> stop_reason() const;
  void report(const std::string& phase);
  // The best recorded result (`cost` of the config at space `index`) as the outcome.
  void final_round_from_records(double cost, std::uint64_t index);
  // The op's vendor kernels that options_.vendors selects (none on GPU targets).
  std::vector<ops::VendorKernel> selected_vendors() const;
  FinalEntry entry_of(const Evaluation& e) const;

  Task task_;
  records::RecordStore& db_;
  Evaluator& evaluator_;
  TuneOptions options_;
  std::atomic<bool> stop_{false};
  std::function<void(const TuneProgress&)> on_progress_;

  std::unique_ptr<Space> space_;
  std::unique_ptr<Strategy> strategy_;
  std::chrono::steady_clock::time_point started_;
  std::set<std::uint64_t> measured_;
  std::vector<std::uint64_t> retry_;   // lost with their device: measured again in the next batch
  std::set<std::uint64_t> retried_;    // lost once already: a second loss is recorded
  double best_cost_;                       // seconds; +infinity until one succeeded
  std::optional<ops::Config> best_config_;
  double default_cost_;                    // seconds; +infinity until measured
  ops::Config default_config_;
  std::size_t failures_ = 0;
  std::size_t since_improvement_ = 0;
  std::vector<std::uint64_t> zero_shot_points_;  // the model's picks, best first
  // What this session's measurements took (for final_estimate): the evaluator's wall
  // time, the configurations, their timed rounds and those rounds' time.
  std::chrono::steady_clock::duration eval_wall_{};
  std::size_t eval_configs_ = 0, timed_rounds_ = 0;
  double timed_seconds_ = 0, compile_seconds_ = 0;
  std::size_t ok_count_ = 0;  // successful configurations recorded (finalist candidates)
  std::chrono::steady_clock::duration last_step_{};
  std::optional<std::chrono::steady_clock::duration> final_eta_;  // reported in the final round
  std::size_t final_entries() const;
  std::uint32_t min_final_passes() const;
  bool started_ok_ = false;
  bool done_ = false;
  TuneProgress progress_;
  TuneResult result_;
};

// A fresh session id (16 hex digits).
std::string new_session_id();

}  // namespace kestrel::tuner
