// kestrel-bench-strategies: how many trials each search strategy needs to get close to
// the best kernel, on real measurements of this machine.
//
// Workloads: gemm M=N=K=512 ("gemm") and the conv2d ResNet layer N=1,C=64,H=56,W=56,
// K=64,R=3,S=3,pad=1 ("conv2d"). For each one, every strategy (sa, random, anneal, ga by
// default) runs from scratch with every seed (1,2,3) for up to T trials (160), proposing
// 16 configurations per batch. The cost of a configuration is a real measurement: the
// configuration goes through tuner::MeasuredEvaluator: compiled in-process (host::Compiler,
// 2 threads) and run on the kestrel-device child of the bench's host::LeasedPool (repeat=3,
// min_repeat_ms=10, all cores), checked against the op's reference kernel.
//
// Every measurement is cached by configuration in a records database (--db, default
// kestrel-bench-strategies.db in the working directory): a configuration already measured
// (by another strategy, seed or an earlier run of this program) is never measured again.
// Runs of the program therefore share measurements and resume where they stopped, and
// every strategy sees the same cost for the same configuration.
//
// "The best a long run finds" is the best cost among ALL measured configurations of the
// workload (the whole cache, plus an optional longer sa run: --long N). For each
// (strategy, seed) the table gives the trial at which the run's best first reaches 95% of
// that best GFLOP/s (">T" if it never does), their mean (a ">T" counts as T and the mean
// is marked with '+' as a lower bound), and the ratio of the means random/sa.
//
//   kestrel-bench-strategies [--trials T] [--seeds 1,2,3] [--strategies sa,random,anneal,ga]
//                            [--workloads gemm,conv2d,conv2d_nchwc] [--db FILE] [--long N]
//                            [--target native|opencl|cuda] [--serve] [--quick]
//
// --target: the device's CPU (native) or one of its GPU targets (the op's GPU variant).
// --serve: no table; the measurement oracle of bench/kernel_tuner_strategies.py, which
// runs Kernel Tuner's strategies on the same space and cache (requests on stdin: 'space',
// 'eval V1 V2 ...', 'run STRATEGY SEED T', 'best', 'quit'; one JSON line per answer).
//
// --quick: T=48 and seed 1 only (a smoke run). Progress goes to stderr, one line per
// batch; the tables go to stdout.
//
// Threads: as in kestrel-bench-candidate, the TrackerClient and MeasureClient live on one
// io_context run by a background thread (heartbeats flow while the main thread runs the
// strategies); the main thread hands each evaluation over with co_spawn + use_future and
// waits. Teardown: the pool's leases released, the io thread joined, the pool stopped.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <functional>
#include <future>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "kestrel/tuner/evaluator.h"
#include "kestrel/host/compiler.h"
#include "kestrel/host/local_pool.h"
#include "bench_pool.h"
#include "kestrel/host/measure_client.h"
#include "kestrel/host/target.h"
#include "kestrel/kernel/status.h"
#include "kestrel/ops/op.h"
#include "kestrel/rpc/asio.h"
#include "kestrel/rpc/errors.h"
#include "kestrel/rpc/handshake.h"
#include "kestrel/base/log.h"
#include "kestrel/rpc/tracker_client.h"
#include "kestrel/records/records.h"
#include "kestrel/tuner/space.h"
#include "kestrel/tuner/strategy.h"
#include "kestrel/tuner/tuning_loop.h"

namespace {

using namespace kestrel;
using Clock = std::chrono::steady_clock;

constexpr std::string_view kLog = "bench";
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr std::size_t kBatch = 16;
constexpr std::size_t kMeasureChunk = 4;  // configurations per evaluate call
constexpr double kFraction = 0.95;  // "close to the best": 95% of its GFLOP/s
constexpr std::uint64_t kLongSeed = 1000;
// One hand-off to the io thread: a batch of 16 slow kernels (each up to its 10 s device
// timeout) plus compiles.
constexpr auto kCallLimit = std::chrono::seconds(600);

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

std::string fixed(double value, int digits) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.*f", digits, value);
  return buffer;
}

std::vector<std::string> split(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

std::int64_t now_unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// ---- options ----------------------------------------------------------------------------

struct Options {
  std::size_t trials = 160;
  std::vector<std::uint64_t> seeds = {1, 2, 3};
  std::vector<std::string> strategies = {"sa", "random", "anneal", "ga"};
  std::vector<std::string> workloads = {"gemm", "conv2d"};
  std::string db = "kestrel-bench-strategies.db";
  std::size_t long_trials = 0;
  std::string target = "native";
  bool serve = false;
};

const char* const kUsage =
    "usage: kestrel-bench-strategies [--trials T] [--seeds 1,2,3] [--strategies sa,random,anneal,ga]\n"
    "                                [--workloads gemm,conv2d,conv2d_nchwc] [--db FILE] [--long N]\n"
    "                                [--target SPEC] [--serve] [--quick]\n"
    "  --trials T      trials per (strategy, seed) run (default 160)\n"
    "  --seeds LIST    seeds of every strategy (default 1,2,3)\n"
    "  --strategies L  strategies to compare (default sa,random,anneal,ga; also grid)\n"
    "  --workloads L   gemm (512x512x512), conv2d (N=1,C=64,H=56,W=56,K=64,R=3,S=3,pad=1) and/or\n"
    "                  conv2d_nchwc (the same layer, block = the target's floats per vector)\n"
    "  --db FILE       measurement cache, a Kestrel records database\n"
    "                  (default kestrel-bench-strategies.db in the working directory)\n"
    "  --long N        also run sa (seed 1000) for N trials to find a better best (default 0)\n"
    "  --target SPEC   native (the device's CPU, default) or a GPU target of the device: opencl, cuda, ...\n"
    "  --serve         answer requests on stdin for one workload (bench/kernel_tuner_strategies.py):\n"
    "                  'space' (knob domains and valid configurations; of a space over 2^24 points\n"
    "                  the valid ones among 50000 uniform draws), 'eval V1 V2 ...' (knob values in\n"
    "                  the op's order), 'run STRATEGY SEED T',\n"
    "                  'best', 'quit'; one JSON line per answer on stdout\n"
    "  --quick         smoke run: T=48, seed 1\n";

std::size_t parse_count(const std::string& flag, const std::string& text) {
  try {
    std::size_t used = 0;
    long long value = std::stoll(text, &used);
    if (used != text.size() || value < 0) throw std::invalid_argument(text);
    return static_cast<std::size_t>(value);
  } catch (const std::exception&) {
    throw std::invalid_argument(flag + " wants a non-negative integer, not '" + text + "'");
  }
}

Options parse_options(int argc, char** argv) {
  Options o;
  bool quick = false, trials_set = false, seeds_set = false;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    std::string value;
    bool has_value = false;
    if (auto eq = arg.find('='); arg.rfind("--", 0) == 0 && eq != std::string::npos) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
      has_value = true;
    }
    auto need = [&]() -> std::string {
      if (has_value) return value;
      if (i + 1 >= argc) throw std::invalid_argument(arg + " needs a value");
      return argv[++i];
    };
    if (arg == "--help" || arg == "-h") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    } else if (arg == "--quick") {
      quick = true;
    } else if (arg == "--trials") {
      o.trials = parse_count(arg, need());
      trials_set = true;
    } else if (arg == "--seeds") {
      o.seeds.clear();
      for (const auto& s : split(need())) o.seeds.push_back(parse_count(arg, s));
      seeds_set = true;
    } else if (arg == "--strategies") {
      o.strategies = split(need());
    } else if (arg == "--workloads") {
      o.workloads = split(need());
    } else if (arg == "--db") {
      o.db = need();
    } else if (arg == "--long") {
      o.long_trials = parse_count(arg, need());
    } else if (arg == "--target") {
      o.target = need();
    } else if (arg == "--serve") {
      o.serve = true;
    } else {
      throw std::invalid_argument("unknown argument '" + arg + "'\n" + kUsage);
    }
  }
  if (quick) {
    if (!trials_set) o.trials = 48;
    if (!seeds_set) o.seeds = {1};
  }
  if (o.trials == 0) throw std::invalid_argument("--trials must be at least 1");
  if (o.seeds.empty()) throw std::invalid_argument("--seeds is empty");
  if (o.strategies.empty()) throw std::invalid_argument("--strategies is empty");
  for (const auto& s : o.strategies) {
    const auto& known = tuner::strategy_names();
    if (std::find(known.begin(), known.end(), s) == known.end()) {
      std::string list;
      for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
      throw std::invalid_argument("unknown strategy '" + s + "' (strategies: " + list + ")");
    }
  }
  for (const auto& w : o.workloads) {
    if (w != "gemm" && w != "conv2d" && w != "conv2d_nchwc") {
      throw std::invalid_argument("unknown workload '" + w + "' (gemm, conv2d, conv2d_nchwc)");
    }
  }
  if (o.serve && o.workloads.size() != 1) throw std::invalid_argument("--serve wants exactly one workload");
  return o;
}

// ---- the environment: pool, io thread, client, compiler -----------------------------------

struct Env {
  std::unique_ptr<bench::BenchPool> pool;
  std::unique_ptr<host::Compiler> compiler;
  std::unique_ptr<tuner::MeasuredEvaluator> evaluator;
  host::Target target;
  std::string device_key;

  void start(const std::string& target_spec) {
    pool = std::make_unique<bench::BenchPool>("kestrel-bench-strategies", kCallLimit);
    device_key = pool->key();
    target = target_spec == "native" ? pool->target() : host::gpu_target_for_device(target_spec, pool->device());
    host::CompilerOptions compiler_options;
    compiler_options.threads = 2;
    compiler = std::make_unique<host::Compiler>(compiler_options);
    evaluator = std::make_unique<tuner::MeasuredEvaluator>(*compiler, pool->measurer(), device_key);
  }

  // Checks, compiles and measures `configs` of `task` on the io thread.
  std::vector<tuner::Evaluation> evaluate(const tuner::Task& task, const std::vector<ops::Config>& configs,
                                          const rpc::MeasureSettings& options) {
    return pool->on_io<std::vector<tuner::Evaluation>>(
        [this, &task, &configs, &options]() -> rpc::awaitable<std::vector<tuner::Evaluation>> {
          co_return co_await evaluator->evaluate(task, configs, options);
        });
  }

  // Returns false when the teardown was not clean.
  bool stop() {
    evaluator.reset();
    bool clean = pool ? pool->stop() : true;
    compiler.reset();
    pool.reset();
    return clean;
  }
};

// ---- the oracle: a cached real measurement per configuration ------------------------------

struct Cost {
  double seconds = kInf;  // median per-call seconds; +inf unless ok
  bool ok = false;
};

class Oracle {
 public:
  Oracle(Env& env, records::RecordStore& db, const ops::Op& op, ops::Params params, const tuner::Space& space)
      : env_(env), db_(db), op_(op), params_(std::move(params)), space_(space) {
    workload_name_ = ops::format_params(params_);
    target_name_ = env_.target.to_string();
    flops_ = op_.flops(params_);
    session_ = "bench-strategies-" + tuner::new_session_id();
    for (const records::Record& r : db_.find(std::string(op_.name()), params_, env_.target.id())) {
      if (r.final_measurement) continue;
      const std::string config = ops::format_config(r.config);
      if (cache_.contains(config)) continue;
      bool ok = r.ok() && std::isfinite(r.cost) && r.cost > 0;
      cache_[config] = Cost{ok ? r.cost : kInf, ok};
    }
    resumed_ = cache_.size();

    options_.number = 0;
    options_.repeat = 3;
    options_.min_repeat_ms = 10;
    options_.cooldown_ms = 0;
    options_.threads = 0;
    task_.op = &op_;
    task_.params = params_;
    task_.target = env_.target;
  }

  // The costs of a batch of points; measures (in one evaluate call) those not in the cache.
  std::vector<Cost> evaluate(const std::vector<std::uint64_t>& indices) {
    std::vector<Cost> out(indices.size());
    std::vector<std::string> names(indices.size());
    std::vector<ops::Config> configs;
    std::map<std::string, bool> queued;
    last_new_ = 0;
    for (std::size_t i = 0; i < indices.size(); ++i) {
      ops::Config config = space_.config(indices[i]);
      names[i] = ops::format_config(config);
      if (cache_.contains(names[i]) || queued.contains(names[i])) continue;
      configs.push_back(std::move(config));
      queued[names[i]] = true;
    }
    // In chunks: a device that answers a whole batch at once was lost waiting for 16
    // (PoCL gemm under load: "no answer from the device of lease 1 within 30000 ms",
    // though each of them alone took ~5 s).
    for (std::size_t begin = 0; begin < configs.size(); begin += kMeasureChunk) {
      std::vector<ops::Config> chunk(configs.begin() + static_cast<std::ptrdiff_t>(begin),
                                     configs.begin() + static_cast<std::ptrdiff_t>(std::min(configs.size(), begin + kMeasureChunk)));
      for (const tuner::Evaluation& e : env_.evaluate(task_, chunk, options_)) record(e);
    }
    for (std::size_t i = 0; i < indices.size(); ++i) {
      auto it = cache_.find(names[i]);
      if (it == cache_.end()) throw std::runtime_error("configuration " + names[i] + " was not measured");
      out[i] = it->second;
    }
    return out;
  }

  // The best cost among every measured configuration (the whole cache).
  std::pair<double, std::string> best() const {
    double best = kInf;
    std::string config;
    for (const auto& [name, cost] : cache_) {
      if (cost.ok && cost.seconds < best) {
        best = cost.seconds;
        config = name;
      }
    }
    return {best, config};
  }

  double gflops(double seconds) const { return std::isfinite(seconds) && seconds > 0 ? flops_ / seconds / 1e9 : 0; }
  std::size_t distinct() const { return cache_.size(); }
  std::size_t resumed() const { return resumed_; }
  std::size_t measured_now() const { return measured_now_; }
  std::size_t failures_now() const { return failures_now_; }
  std::size_t last_new() const { return last_new_; }
  const std::string& workload_name() const { return workload_name_; }
  const std::string& target_name() const { return target_name_; }

 private:
  void record(const tuner::Evaluation& e) {
    // A lost device says nothing about the configuration: never cached (it would read as
    // a failure of that configuration in every later run).
    if (e.status == kernel::Status::device_lost) {
      throw std::runtime_error("the device was lost while measuring " + ops::format_config(e.config) + ": " +
                               e.message);
    }
    records::Record r;
    r.op = std::string(op_.name());
    r.workload = params_;
    r.target = env_.target.id();
    r.device_class = e.device_class;
    r.device = e.device;
    r.config = e.config;
    r.is_default = e.config == op_.default_config(params_, env_.target.traits);
    r.status = e.status;
    r.message = e.message;
    r.round_seconds = e.round_seconds;
    r.cost = e.ok() ? e.cost : kInf;
    r.gflops = gflops(r.cost);
    r.compile_ms = e.compile_ms;
    r.tool_version = std::string(software_version());
    r.time_unix_ms = now_unix_ms();
    r.session = session_;
    db_.add(r);
    bool ok = e.ok() && std::isfinite(r.cost) && r.cost > 0;
    cache_[ops::format_config(r.config)] = Cost{ok ? r.cost : kInf, ok};
    ++measured_now_;
    ++last_new_;
    if (!ok) ++failures_now_;
  }

  Env& env_;
  records::RecordStore& db_;
  const ops::Op& op_;
  ops::Params params_;
  const tuner::Space& space_;
  std::string workload_name_, target_name_, session_;
  double flops_ = 0;
  tuner::Task task_;
  rpc::MeasureSettings options_;
  std::map<std::string, Cost> cache_;
  std::size_t resumed_ = 0, measured_now_ = 0, failures_now_ = 0, last_new_ = 0;
};

// ---- one strategy run -----------------------------------------------------------------------

struct Run {
  std::string strategy;
  std::uint64_t seed = 0;
  std::vector<double> costs;       // cost of each trial, in proposal order (+inf: failed)
  std::vector<double> best_after;  // best cost after each trial (1-based trial i at [i-1])
  double seconds = 0;
};

Run run_strategy(Oracle& oracle, const tuner::Space& space, const std::string& op_label, const std::string& strategy,
                 std::uint64_t seed, std::size_t trials, Clock::time_point bench_start) {
  Run run;
  run.strategy = strategy;
  run.seed = seed;
  const Clock::time_point t0 = Clock::now();
  tuner::StrategyOptions options;
  options.seed = seed;
  auto search = tuner::make_strategy(strategy, space, options);
  double best = kInf;
  while (run.best_after.size() < trials) {
    std::size_t n = std::min(kBatch, trials - run.best_after.size());
    std::vector<std::uint64_t> proposed = search->propose(n);
    if (proposed.empty()) break;  // the space is exhausted
    std::vector<Cost> costs = oracle.evaluate(proposed);
    std::vector<tuner::Observation> observations(proposed.size());
    std::size_t failed = 0;
    for (std::size_t i = 0; i < proposed.size(); ++i) {
      observations[i].index = proposed[i];
      observations[i].cost = costs[i].ok ? costs[i].seconds : kInf;
      observations[i].ok = costs[i].ok;
      if (!costs[i].ok) ++failed;
      if (costs[i].ok && costs[i].seconds < best) best = costs[i].seconds;
      run.costs.push_back(costs[i].ok ? costs[i].seconds : kInf);
      run.best_after.push_back(best);
    }
    search->observe(observations);
    std::fprintf(stderr, "[%s %s seed %llu] %zu/%zu trials  batch %zu: %zu measured, %zu cached, %zu failed  "
                 "run best %s GFLOP/s  all best %s GFLOP/s  (%zu distinct, %.0f s)\n",
                 op_label.c_str(), strategy.c_str(), static_cast<unsigned long long>(seed), run.best_after.size(),
                 trials, proposed.size(), oracle.last_new(), proposed.size() - oracle.last_new(), failed,
                 fixed(oracle.gflops(best), 1).c_str(), fixed(oracle.gflops(oracle.best().first), 1).c_str(),
                 oracle.distinct(), seconds_since(bench_start));
  }
  run.seconds = seconds_since(t0);
  return run;
}

// The 1-based trial at which the run's best reaches `threshold` seconds (cost <= it);
// nullopt if it never does.
std::optional<std::size_t> trials_to(const Run& run, double threshold) {
  for (std::size_t i = 0; i < run.best_after.size(); ++i) {
    if (run.best_after[i] <= threshold) return i + 1;
  }
  return std::nullopt;
}

// ---- one workload -----------------------------------------------------------------------------

// The benched workload of `which` (an op name) on `target`.
ops::Params workload_params(const ops::Op& op, const std::string& which, const host::Target& target) {
  if (which == "gemm") return ops::parse_params(op, "M=512,N=512,K=512");
  if (which == "conv2d") return ops::parse_params(op, "N=1,C=64,H=56,W=56,K=64,R=3,S=3,pad=1,stride=1,dilation=1");
  return ops::parse_params(op, "N=1,C=64,H=56,W=56,K=64,R=3,S=3,pad=1,stride=1,block=" +
                                   std::to_string(target.traits.vector_floats));
}

bool bench_workload(Env& env, records::RecordStore& db, const Options& options, const std::string& which) {
  const Clock::time_point t0 = Clock::now();
  ops::Registry registry = ops::builtin_ops();
  const ops::Op& op = registry.get(which, env.target.backend);
  ops::Params params = workload_params(op, which, env.target);
  tuner::Space space(op, params, env.target.traits);
  Oracle oracle(env, db, op, params, space);
  std::fprintf(stderr, "[%s] %s on %s: %zu configurations already in %s\n", which.c_str(),
               oracle.workload_name().c_str(), oracle.target_name().c_str(), oracle.resumed(), options.db.c_str());

  // The op's default configuration, for reference (not part of any run).
  std::vector<std::uint64_t> default_point(1, space.index(op.default_config(params, env.target.traits)));
  Cost default_cost = oracle.evaluate(default_point).at(0);

  std::vector<Run> runs;
  for (const auto& strategy : options.strategies) {
    for (std::uint64_t seed : options.seeds) {
      runs.push_back(run_strategy(oracle, space, which, strategy, seed, options.trials, t0));
    }
  }
  if (options.long_trials > 0) {
    run_strategy(oracle, space, which, "sa", kLongSeed, options.long_trials, t0);
  }

  auto [best_cost, best_config] = oracle.best();
  const double wall = seconds_since(t0);
  const double best_gflops = oracle.gflops(best_cost);
  const double threshold = best_cost / kFraction;  // cost at 95% of the best GFLOP/s

  std::printf("\n=== %s %s  (target %s) ===\n", which.c_str(), oracle.workload_name().c_str(),
              oracle.target_name().c_str());
  std::printf("best found:     %s GFLOP/s  (%s)\n", fixed(best_gflops, 1).c_str(), best_config.c_str());
  std::printf("default config: %s GFLOP/s%s\n", fixed(oracle.gflops(default_cost.seconds), 1).c_str(),
              default_cost.ok ? "" : "  (failed)");
  std::printf("distinct configs measured: %zu  (%zu measured by this run, %zu of them failed; %zu from the db)\n",
              oracle.distinct(), oracle.measured_now(), oracle.failures_now(), oracle.resumed());
  std::printf("wall time: %.0f s;  T = %zu trials per run, batches of %zu%s\n", wall, options.trials, kBatch,
              options.long_trials > 0 ? (", plus a long sa run of " + std::to_string(options.long_trials)).c_str()
                                      : "");
  std::printf("trials to reach %.0f%% of the best (>= %s GFLOP/s):\n", kFraction * 100,
              fixed(best_gflops * kFraction, 1).c_str());

  std::string header = "  strategy";
  for (std::uint64_t seed : options.seeds) {
    char cell[32];
    std::snprintf(cell, sizeof cell, "  %7s", ("seed " + std::to_string(seed)).c_str());
    header += cell;
  }
  header += "      mean   best@T GFLOP/s (mean)";
  std::printf("%s\n", header.c_str());

  std::map<std::string, std::pair<double, bool>> means;  // strategy -> (mean, censored)
  for (const auto& strategy : options.strategies) {
    std::string line;
    char cell[64];
    std::snprintf(cell, sizeof cell, "  %-8s", strategy.c_str());
    line += cell;
    double sum = 0, sum_final = 0;
    std::size_t count = 0;
    bool censored = false;
    for (const Run& run : runs) {
      if (run.strategy != strategy) continue;
      auto reached = trials_to(run, threshold);
      if (reached) {
        std::snprintf(cell, sizeof cell, "  %7zu", *reached);
        sum += static_cast<double>(*reached);
      } else {
        std::snprintf(cell, sizeof cell, "  %7s", (">" + std::to_string(options.trials)).c_str());
        sum += static_cast<double>(options.trials);
        censored = true;
      }
      line += cell;
      sum_final += oracle.gflops(run.best_after.empty() ? kInf : run.best_after.back());
      ++count;
    }
    double mean = count ? sum / static_cast<double>(count) : 0;
    means[strategy] = {mean, censored};
    std::snprintf(cell, sizeof cell, "  %7s%s", fixed(mean, 1).c_str(), censored ? "+" : " ");
    line += cell;
    std::snprintf(cell, sizeof cell, "  %8s", fixed(count ? sum_final / static_cast<double>(count) : 0, 1).c_str());
    line += cell;
    std::printf("%s\n", line.c_str());
  }
  std::printf("  ('+': a lower bound, some runs never reached it within T and count as T)\n");
  if (means.contains("sa") && means.contains("random")) {
    auto [sa, sa_censored] = means["sa"];
    auto [random, random_censored] = means["random"];
    double ratio = sa > 0 ? random / sa : 0;
    // A censored random mean makes the ratio a lower bound; a censored sa mean an upper one.
    std::string qualifier = random_censored && !sa_censored   ? ">= "
                            : sa_censored && !random_censored ? "<= "
                            : sa_censored && random_censored  ? "? (both censored) "
                                                              : "";
    // The verdict holds only where the bound points the right way.
    const bool lower_bound_ok = !sa_censored;        // the ratio is exact or a lower bound
    const bool upper_bound_ok = !random_censored;    // the ratio is exact or an upper bound
    const char* verdict = ratio >= 3.0 ? (lower_bound_ok ? "MET" : "UNDETERMINED (censored runs)")
                                       : (upper_bound_ok ? "NOT MET" : "UNDETERMINED (censored runs)");
    std::printf("random/sa ratio of mean trials: %s%sx  (target: sa needs >= 3x fewer trials than random: %s)\n",
                qualifier.c_str(), fixed(ratio, 2).c_str(), verdict);
  }

  // A second view, for when the 95% criterion is censored: mean trials to lower fractions
  // of the best, and random search's expected trials from its hit rate (it samples
  // uniformly, so its trials to the first hit are geometric: about N/k when k of its N
  // proposals reach the fraction).
  const double fractions[] = {0.80, 0.90, kFraction};
  std::printf("mean trials to reach a fraction of the best ('+': lower bound; k/n: runs that reached it):\n");
  std::printf("  strategy");
  for (double f : fractions) std::printf("  %15s", (fixed(f * 100, 0) + "%").c_str());
  std::printf("\n");
  std::map<std::string, std::map<double, std::pair<double, bool>>> by_fraction;
  for (const auto& strategy : options.strategies) {
    std::printf("  %-8s", strategy.c_str());
    for (double f : fractions) {
      double sum = 0;
      std::size_t count = 0, hits = 0;
      for (const Run& run : runs) {
        if (run.strategy != strategy) continue;
        auto reached = trials_to(run, best_cost / f);
        sum += static_cast<double>(reached ? *reached : options.trials);
        if (reached) ++hits;
        ++count;
      }
      double mean = count ? sum / static_cast<double>(count) : 0;
      by_fraction[strategy][f] = {mean, hits < count};
      std::printf("  %6s%s %3zu/%-3zu", fixed(mean, 1).c_str(), hits < count ? "+" : " ", hits, count);
    }
    std::printf("\n");
  }
  if (by_fraction.contains("random")) {
    std::size_t samples = 0;
    for (const Run& run : runs) {
      if (run.strategy == "random") samples += run.costs.size();
    }
    std::printf("  random, expected from its hit rate over its %zu uniform proposals (k hits -> ~%zu/k trials;\n"
                "  k=0 -> '>%zu', though at 95%% confidence only >%zu):\n",
                samples, samples, samples, samples / 3);
    std::printf("  %-8s", "rnd-exp");
    std::vector<std::pair<double, double>> expected;  // fraction -> expected trials (inf: no hit)
    for (double f : fractions) {
      std::size_t hits = 0;
      for (const Run& run : runs) {
        if (run.strategy != "random") continue;
        for (double c : run.costs) {
          if (c <= best_cost / f) ++hits;
        }
      }
      double e = hits ? static_cast<double>(samples) / static_cast<double>(hits) : kInf;
      expected.push_back({f, e});
      std::string text = hits ? fixed(e, 1) : ">" + std::to_string(samples);
      std::printf("  %7s  k=%-4zu", text.c_str(), hits);
    }
    std::printf("\n");
    if (by_fraction.contains("sa")) {
      std::printf("  expected-random / sa-mean:");
      for (const auto& [f, e] : expected) {
        auto [sa_mean, sa_censored] = by_fraction["sa"][f];
        // With no hit, N/k is unbounded: N is a rough floor (0 hits in N uniform draws
        // bounds the hit rate below ~3/N at 95% confidence). A censored sa mean is only a
        // lower bound of sa's, so the ratio is then no bound at all: marked '?'.
        std::string text = !std::isfinite(e) ? ">" + fixed(static_cast<double>(samples) / sa_mean, 1) + "x"
                                             : "~" + fixed(e / sa_mean, 1) + "x";
        if (sa_censored) text += "? (sa censored)";
        std::printf("  %s%%: %s", fixed(f * 100, 0).c_str(), text.c_str());
      }
      std::printf("\n");
    }
  }
  std::fflush(stdout);
  return std::isfinite(best_cost);
}


// ---- --serve: the measurement oracle for another tool's strategies ---------------------------

// A JSON number, or null for +inf / NaN.
std::string json_number(double value) {
  if (!std::isfinite(value)) return "null";
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.9g", value);
  return buffer;
}

std::string json_string(const std::string& text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

// Spaces up to this many points (before constraints) are listed in full by 'space'; of a
// bigger one, the valid points of kServeSample uniform draws.
constexpr std::uint64_t kServeEnumerateLimit = std::uint64_t{1} << 24;
constexpr std::size_t kServeSample = 50'000;
constexpr std::uint64_t kServeSampleSeed = 14;

// Answers requests on stdin, one JSON line each on stdout (see kUsage). Every cost comes
// from the same Oracle (its records cache), so a configuration has one cost for every
// strategy of either tool. Returns false if a request failed in a way that ends the
// session (a measurement error); a malformed request gets {"error": ...} and the session
// goes on.
bool serve(Env& env, records::RecordStore& db, const Options& options) {
  const Clock::time_point t0 = Clock::now();
  const std::string which = options.workloads.front();
  ops::Registry registry = ops::builtin_ops();
  const ops::Op& op = registry.get(which, env.target.backend);
  ops::Params params = workload_params(op, which, env.target);
  tuner::Space space(op, params, env.target.traits);
  Oracle oracle(env, db, op, params, space);
  std::fprintf(stderr, "[serve %s] %s on %s: %zu configurations already in %s\n", which.c_str(),
               oracle.workload_name().c_str(), oracle.target_name().c_str(), oracle.resumed(), options.db.c_str());
  // The op's default configuration first, alone, as the table mode does. (On a fresh
  // device a first batch of 16 timed out twice here, "no answer from the device of lease
  // 1 within 30000 ms", on a loaded 2-core machine; after one single measurement the
  // same batch took 12 s.)
  oracle.evaluate(std::vector<std::uint64_t>(1, space.index(op.default_config(params, env.target.traits))));
  auto answer = [](const std::string& line) {
    std::fputs(line.c_str(), stdout);
    std::fputc('\n', stdout);
    std::fflush(stdout);
  };
  std::string line;
  while (std::getline(std::cin, line)) {
    std::stringstream in(line);
    std::string request;
    in >> request;
    try {
      if (request.empty()) continue;
      if (request == "quit") break;
      if (request == "space") {
        // The valid points: all of them, or in a space too big to enumerate the distinct
        // valid points of a seeded uniform sample ("sampled": true).
        std::vector<std::uint64_t> valid;
        const bool sampled = space.size() > kServeEnumerateLimit;
        if (sampled) {
          tuner::Rng rng(kServeSampleSeed);
          std::set<std::uint64_t> distinct;
          for (std::size_t draw = 0; draw < kServeSample; ++draw) {
            if (auto index = space.sample_valid(rng, 1'000)) distinct.insert(*index);
          }
          valid.assign(distinct.begin(), distinct.end());
        } else {
          for (std::uint64_t index = 0; index < space.size(); ++index) {
            if (space.valid(index)) valid.push_back(index);
          }
        }
        std::string out = "{\"workload\": " + json_string(oracle.workload_name()) +
                          ", \"target\": " + json_string(oracle.target_name()) +
                          ", \"op\": " + json_string(std::string(op.name())) +
                          ", \"flops\": " + json_number(op.flops(params)) + ", \"knobs\": [";
        for (std::size_t k = 0; k < space.knobs().size(); ++k) {
          const ops::Knob& knob = space.knobs()[k];
          out += (k ? ", " : "") + std::string("{\"name\": ") + json_string(knob.name) + ", \"values\": [";
          for (std::size_t v = 0; v < knob.values.size(); ++v) out += (v ? ", " : "") + std::to_string(knob.values[v]);
          out += "]}";
        }
        out += "], \"space_size\": " + std::to_string(space.size()) + ", \"sampled\": " + (sampled ? "true" : "false");
        out += ", \"valid\": [";
        bool first = true;
        for (std::uint64_t index : valid) {
          out += first ? "[" : ", [";
          first = false;
          auto digits = space.digits(index);
          for (std::size_t k = 0; k < digits.size(); ++k) {
            out += (k ? ", " : "") + std::to_string(space.knobs()[k].values[digits[k]]);
          }
          out += "]";
        }
        answer(out + "]}");
      } else if (request == "eval") {
        ops::Config config;
        for (const ops::Knob& knob : space.knobs()) {
          std::int64_t value = 0;
          if (!(in >> value)) throw std::invalid_argument("eval wants " + std::to_string(space.knobs().size()) + " knob values");
          config[knob.name] = value;
        }
        std::uint64_t index = space.index(config);
        if (!space.valid(index)) {
          answer("{\"cost\": null, \"ok\": false, \"invalid\": true}");
          continue;
        }
        Cost cost = oracle.evaluate(std::vector<std::uint64_t>(1, index)).at(0);
        answer("{\"cost\": " + json_number(cost.ok ? cost.seconds : kInf) + ", \"ok\": " + (cost.ok ? "true" : "false") +
               ", \"gflops\": " + json_number(oracle.gflops(cost.ok ? cost.seconds : kInf)) + "}");
      } else if (request == "run") {
        std::string strategy;
        std::uint64_t seed = 0;
        std::size_t trials = 0;
        if (!(in >> strategy >> seed >> trials)) throw std::invalid_argument("run wants STRATEGY SEED TRIALS");
        Run run = run_strategy(oracle, space, which, strategy, seed, trials, t0);
        std::string out = "{\"strategy\": " + json_string(strategy) + ", \"seed\": " + std::to_string(seed) +
                          ", \"costs\": [";
        for (std::size_t i = 0; i < run.costs.size(); ++i) out += (i ? ", " : "") + json_number(run.costs[i]);
        answer(out + "]}");
      } else if (request == "best") {
        auto [cost, config] = oracle.best();
        answer("{\"cost\": " + json_number(cost) + ", \"gflops\": " + json_number(oracle.gflops(cost)) +
               ", \"config\": " + json_string(config) + ", \"distinct\": " + std::to_string(oracle.distinct()) + "}");
      } else {
        throw std::invalid_argument("unknown request '" + request + "' (space, eval, run, best, quit)");
      }
    } catch (const std::invalid_argument& e) {
      answer("{\"error\": " + json_string(e.what()) + "}");
    } catch (const ops::OpError& e) {
      answer("{\"error\": " + json_string(e.what()) + "}");
    } catch (const std::exception& e) {
      // A measurement failed (the device lost, ...): the session ends.
      answer("{\"error\": " + json_string(e.what()) + ", \"fatal\": true}");
      return false;
    }
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  try {
    options = parse_options(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kestrel-bench-strategies: %s\n", e.what());
    return 2;
  }
  bench::locate_device_binary();
  log::set_level(log::Level::warn);

  const Clock::time_point t0 = Clock::now();
  bool ok = true;
  Env env;
  try {
    auto records = records::open_records(options.db);
    records::RecordStore& db = *records;
    env.start(options.target);
    if (options.serve) {
      ok = serve(env, db, options);
      bool clean = env.stop();
      return ok && clean ? 0 : 1;
    }
    std::printf("kestrel-bench-strategies: strategies");
    for (const auto& s : options.strategies) std::printf(" %s", s.c_str());
    std::printf(", seeds");
    for (auto s : options.seeds) std::printf(" %llu", static_cast<unsigned long long>(s));
    std::printf(", T=%zu, batch %zu, measure repeat=3 min_repeat_ms=10 threads=all, cache %s\n", options.trials,
                kBatch, options.db.c_str());
    for (const auto& w : options.workloads) ok = bench_workload(env, db, options, w) && ok;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kestrel-bench-strategies: %s\n", e.what());
    ok = false;
  }
  bool clean = env.stop();
  if (!clean) std::fprintf(stderr, "kestrel-bench-strategies: shutdown was not clean (see the log above)\n");
  std::printf("\ntotal wall time: %.0f s\n", seconds_since(t0));
  return ok && clean ? 0 : 1;
}
