// The tuning loop: propose, compile, measure, record, learn; then re-measure the best.
#include "kestrel/tuner/tuning_loop.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <random>
#include <future>
#include <set>
#include <type_traits>

#include "kestrel/host/compile_async.h"
#include "kestrel/rpc/handshake.h"
#include "kestrel/base/log.h"
#include "kestrel/tuner/dataset.h"
#include "kestrel/tuner/features.h"
#include "kestrel/tuner/space.h"
#include "kestrel/tuner/strategy.h"

namespace kestrel::tuner {
namespace {
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
constexpr std::string_view kLog = "tune";

double median(std::vector<double> v) {
  if (v.empty()) return std::numeric_limits<double>::infinity();
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

std::int64_t now_unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Runs `fn` on another thread and waits without blocking the io thread (model fitting
// and annealing take a fraction of a second; heartbeats must flow meanwhile).
template <typename Fn>
rpc::awaitable<std::invoke_result_t<Fn>> off_thread(Fn fn) {
  auto future = std::async(std::launch::async, std::move(fn));
  asio::steady_timer timer(co_await asio::this_coro::executor);
  while (future.wait_for(0ms) != std::future_status::ready) {
    timer.expires_after(2ms);
    co_await timer.async_wait(rpc::use_nothrow);
  }
  co_return future.get();
}

}  // namespace

std::string new_session_id() {
  std::random_device rd;
  std::uint64_t v = (static_cast<std::uint64_t>(rd()) << 32) ^ rd() ^
                    static_cast<std::uint64_t>(Clock::now().time_since_epoch().count());
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(v));
  return text;
}

TuningLoop::TuningLoop(const ops::Op& op, ops::Params params, host::Target target, RecordStore& db,
                       host::Compiler& compiler, host::MeasureClient& measurer, TuneOptions options)
    : op_(op),
      params_(std::move(params)),
      target_(std::move(target)),
      db_(db),
      compiler_(compiler),
      measurer_(measurer),
      options_(std::move(options)) {}

rpc::awaitable<TuneResult> TuningLoop::run(std::function<void(const TuneProgress&)> on_progress) {
  op_.validate(params_);
  Space space(op_, params_);
  TuneResult result;
  result.session = new_session_id();
  result.op = std::string(op_.name());
  result.workload = ops::format_params(params_);
  result.target = target_.to_string();
  const double flops = op_.flops(params_);
  const auto started = Clock::now();

  // ---- what earlier sessions measured ------------------------------------------
  std::set<std::uint64_t> measured;
  std::vector<Observation> history;
  double best_cost = std::numeric_limits<double>::infinity();
  std::string best_config;
  double default_cost = std::numeric_limits<double>::infinity();
  const ops::Config default_config = op_.default_config(params_);
  for (const Record& r : db_.find(result.op, params_, result.target)) {
    if (r.final_measurement) continue;
    std::uint64_t index = 0;
    try {
      index = space.index(r.config);
    } catch (const ops::OpError&) {
      continue;  // recorded with another knob space (older Kestrel)
    }
    if (!measured.insert(index).second) continue;
    history.push_back({index, r.ok() ? r.cost : std::numeric_limits<double>::infinity(), r.ok()});
    if (r.ok() && r.cost < best_cost) {
      best_cost = r.cost;
      best_config = ops::format_config(r.config);
    }
    if (r.config == default_config && r.ok()) default_cost = r.cost;
  }
  result.resumed = measured.size();

  StrategyOptions strategy_options;
  strategy_options.seed = options_.seed;
  if (options_.transfer) {
    for (const Sample& row : make_dataset(op_, db_.find_other_workloads(result.op, params_, result.target)).rows) {
      strategy_options.transfer.push_back({row.features, row.cost});
    }
    result.transfer_records = strategy_options.transfer.size();
  }
  auto strategy = make_strategy(options_.strategy, space, strategy_options);
  if (!history.empty()) strategy->observe(history);
  if (result.resumed > 0) {
    log::info(kLog, "resuming: ", result.resumed, " configurations already measured on ", result.target);
  }

  // ---- progress --------------------------------------------------------------
  std::size_t failures = 0;
  std::size_t since_improvement = 0;
  TuneProgress progress;
  progress.total = options_.trials;
  auto report = [&](const std::string& phase) {
    progress.trials = measured.size();
    progress.this_session = result.this_session;
    progress.failures = failures;
    progress.best_gflops = std::isfinite(best_cost) ? flops / best_cost / 1e9 : 0;
    progress.default_gflops = std::isfinite(default_cost) ? flops / default_cost / 1e9 : 0;
    progress.best_config = best_config;
    progress.elapsed = Clock::now() - started;
    progress.phase = phase;
    if (result.this_session > 0 && progress.trials < progress.total) {
      auto per_trial = progress.elapsed / result.this_session;
      progress.eta = per_trial * static_cast<long>(progress.total - progress.trials);
    } else {
      progress.eta.reset();
    }
    if (on_progress) on_progress(progress);
  };

  // Records one measured configuration; returns its cost.
  auto record = [&](const ops::Config& config, host::Status status, const std::string& message,
                    const std::vector<double>& rounds, const std::string& device, double compile_ms,
                    bool final_measurement) {
    Record r;
    r.op = result.op;
    r.workload = params_;
    r.target = result.target;
    r.device_class.key = options_.device_key;
    r.device = device;
    // Candidates that never reached a device belong to the session's device class.
    if (!measurer_.leases().empty()) {
      r.device_class = device_class_of(options_.device_key, measurer_.leases().front().info, target_);
    }
    for (const auto& lease : measurer_.leases()) {
      if (lease.info.name == device) r.device_class = device_class_of(options_.device_key, lease.info, target_);
    }
    r.config = config;
    r.is_default = config == default_config;
    r.status = status;
    r.message = message;
    r.round_seconds = rounds;
    r.cost = status == host::Status::ok ? median(rounds) : std::numeric_limits<double>::infinity();
    r.gflops = std::isfinite(r.cost) && r.cost > 0 ? flops / r.cost / 1e9 : 0;
    r.compile_ms = compile_ms;
    r.tool_version = std::string(software_version());
    r.time_unix_ms = now_unix_ms();
    r.session = result.session;
    r.final_measurement = final_measurement;
    db_.add(r);
    if (!final_measurement) {
      ++result.statuses[std::string(host::to_string(status))];
      ++result.this_session;
      if (status != host::Status::ok) ++failures;
    }
    return r.cost;
  };

  // Compiles and measures a list of configurations; records each result as it arrives.
  auto evaluate = [&](const std::vector<std::uint64_t>& indices, const rpc::MeasureSettings& measure,
                      bool final_measurement) -> rpc::awaitable<std::vector<Observation>> {
    std::vector<Observation> observations(indices.size());
    std::vector<ops::Config> configs(indices.size());
    std::vector<host::CompileRequest> requests;
    std::vector<std::size_t> request_of;
    for (std::size_t i = 0; i < indices.size(); ++i) {
      observations[i].index = indices[i];
      ops::Config config = space.config(indices[i]);
      configs[i] = config;
      std::string invalid = op_.check(params_, config);
      if (!invalid.empty()) {
        record(configs[i], host::Status::instantiation_error, invalid, {}, "", 0, final_measurement);
        continue;
      }
      ops::KernelSource source = op_.source(target_.backend, params_, config);
      // A launch beyond the device's limits (threads, shared memory) is never compiled.
      if (std::string over = host::check_launch(source, target_); !over.empty()) {
        record(configs[i], host::Status::instantiation_error, over, {}, "", 0, final_measurement);
        continue;
      }
      requests.push_back({std::move(source), target_});
      request_of.push_back(i);
    }
    // The reference is a CPU kernel, for the device's CPU, whatever the target.
    requests.push_back({op_.reference(params_), target_.reference_target()});
    auto compiled = co_await host::compile_async(compiler_, requests);
    const host::CompileResult& reference = compiled.back();
    if (!reference.ok) throw std::runtime_error("the reference kernel does not compile:\n" + reference.diagnostics);

    host::Workload workload;
    for (const auto& t : op_.tensors(params_)) workload.args.push_back({t.elements(), t.role == ops::Role::output});
    workload.reference = {reference.hash, std::make_shared<std::vector<std::uint8_t>>(reference.shared_object)};
    workload.tolerance = op_.tolerance(params_);
    std::vector<host::Candidate> candidates;
    std::map<std::uint64_t, double> compile_ms;
    for (std::size_t k = 0; k + 1 < compiled.size(); ++k) {
      std::size_t i = request_of[k];
      const host::CompileResult& c = compiled[k];
      if (!c.ok) {
        record(configs[i], host::Status::host_compile_error, c.diagnostics, {}, "", c.compile_ms, final_measurement);
        continue;
      }
      compile_ms[i] = c.compile_ms;
      candidates.push_back({i, {c.hash, std::make_shared<std::vector<std::uint8_t>>(c.shared_object)}, ""});
    }
    if (!candidates.empty()) {
      co_await measurer_.measure(workload, candidates, measure, [&](const host::Measurement& m) {
        std::size_t i = m.id;
        double cost = record(configs[i], m.status, m.message, m.round_seconds, m.device, compile_ms[i],
                             final_measurement);
        observations[i].cost = cost;
        observations[i].ok = m.status == host::Status::ok;
      });
    }
    co_return observations;
  };

  // ---- the default configuration first: the baseline of every speed-up ---------
  report("tuning");
  std::uint64_t default_index = space.index(op_.default_config(params_));
  if (!measured.contains(default_index) && measured.size() < options_.trials) {
    std::vector<std::uint64_t> first(1, default_index);
    auto observed = co_await evaluate(first, options_.measure, false);
    measured.insert(default_index);
    strategy->observe(observed);
    if (observed[0].ok) {
      default_cost = observed[0].cost;
      if (default_cost < best_cost) {
        best_cost = default_cost;
        best_config = ops::format_config(default_config);
      }
    }
    report("tuning");
  }

  // ---- the search --------------------------------------------------------------
  result.stop_reason = "trials";
  while (true) {
    if (measured.size() >= options_.trials) {
      result.stop_reason = "trials";
      break;
    }
    if (stop_.load()) {
      result.stop_reason = "interrupted";
      break;
    }
    if (options_.time_budget.count() > 0 && Clock::now() - started >= options_.time_budget) {
      result.stop_reason = "time budget";
      break;
    }
    if (options_.early_stopping > 0 && since_improvement >= options_.early_stopping) {
      result.stop_reason = "early stopping";
      break;
    }
    std::size_t n = std::min(options_.batch_size, options_.trials - measured.size());
    std::vector<std::uint64_t> batch;
    auto proposed = co_await off_thread([&strategy, n] { return strategy->propose(n); });
    for (std::uint64_t index : proposed) {
      if (measured.insert(index).second) batch.push_back(index);
    }
    if (batch.empty()) {
      result.stop_reason = "space exhausted";
      break;
    }
    auto observed = co_await evaluate(batch, options_.measure, false);
    strategy->observe(observed);
    for (const auto& o : observed) {
      if (o.ok && o.cost < best_cost) {
        best_cost = o.cost;
        best_config = ops::format_config(space.config(o.index));
        since_improvement = 0;
      } else {
        ++since_improvement;
      }
    }
    report("tuning");
  }

  // ---- final re-measurement of the best few --------------------------------------
  std::vector<std::pair<double, std::uint64_t>> ranked;
  for (const Record& r : db_.find(result.op, params_, result.target)) {
    if (r.final_measurement || !r.ok()) continue;
    try {
      ranked.push_back({r.cost, space.index(r.config)});
    } catch (const ops::OpError&) {
    }
  }
  std::sort(ranked.begin(), ranked.end());
  std::vector<std::uint64_t> top;
  for (const auto& [cost, index] : ranked) {
    if (top.size() >= options_.final_top) break;
    if (std::find(top.begin(), top.end(), index) == top.end()) top.push_back(index);
  }
  if (!top.empty() && !stop_.load()) {
    report("final");
    rpc::MeasureSettings final_measure = options_.measure;
    final_measure.repeat = std::max(final_measure.repeat, options_.final_repeat);
    auto observed = co_await evaluate(top, final_measure, true);
    for (const auto& o : observed) {
      FinalEntry entry;
      entry.config = ops::format_config(space.config(o.index));
      entry.median_s = o.cost;
      entry.gflops = o.ok ? flops / o.cost / 1e9 : 0;
      entry.status = o.ok ? "ok" : "failed";
      result.final.push_back(entry);
    }
    std::sort(result.final.begin(), result.final.end(),
              [](const FinalEntry& a, const FinalEntry& b) { return a.median_s < b.median_s; });
  }
  result.trials = measured.size();
  result.default_gflops = std::isfinite(default_cost) ? flops / default_cost / 1e9 : 0;
  report("done");
  co_return result;
}

}  // namespace kestrel::tuner
