// kestrel-bench-zero-shot: how good a cross-workload cost model's zero-shot picks are on
// workloads it never saw, measured on this machine.
//
// Input: a model (.kcm, from `kestrel cost-model train`) and a records database of held-out
// workloads tuned in full (`kestrel tune` or `kestrel datagen` on workloads the model's
// training data excluded). For every held-out workload of this machine's target whose op
// the model covers: the zero-shot pick (tuner::zero_shot_pick, no measurement; its time
// is reported), the tuned best (`kestrel best`'s own-kernel record) and the op's default
// are measured side by side through the real path (host::Compiler, the embedded pool's
// kestrel-device, tuner::MeasuredEvaluator) in --passes interleaved passes whose order
// alternates, each --repeat rounds; a configuration's time is the median of all its
// rounds. With --verify N the model's top N are measured too and the fastest of them is
// "verify-N" (what `kestrel tune --zero-shot --zero-shot-verify N` would keep).
//
// With --transfer T, the --transfer-workloads held-out workloads whose default is furthest
// below their tuned best (where search matters) are also tuned
// twice from nothing for T trials (sa, seed 1, into a scratch database): without the
// model and warm-started by it (TuneOptions::prior_model); the table gives the trials
// each run needed to reach 95% of the from-scratch run's best, counted one by one in the
// order they were measured.
//
//   kestrel-bench-zero-shot --cost-model M.kcm --db HELD.db [--ops gemm,conv2d_nchwc]
//       [--passes 3] [--repeat 5] [--threads 1] [--verify 5] [--limit N]
//       [--transfer T] [--transfer-workloads 6]
//
// Tables on stdout, progress on stderr.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench_pool.h"
#include "kestrel/base/stats.h"
#include "kestrel/host/compiler.h"
#include "kestrel/ops/op.h"
#include "kestrel/tuner/cross_model.h"
#include "kestrel/tuner/evaluator.h"
#include "kestrel/records/records.h"
#include "kestrel/tuner/space.h"
#include "kestrel/tuner/tuning_loop.h"
#include "kestrel/tuner/zero_shot.h"

namespace {

using namespace kestrel;
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr auto kCallLimit = std::chrono::seconds(3600);

struct Options {
  std::string model_file;
  std::string db;
  std::vector<std::string> ops;
  std::vector<std::string> classes;
  unsigned passes = 3;
  unsigned repeat = 5;
  unsigned threads = 1;
  std::size_t verify = 5;
  std::size_t limit = 0;
  std::size_t transfer_trials = 0;
  std::size_t transfer_workloads = 6;
};

const char* const kUsage =
    "usage: kestrel-bench-zero-shot --cost-model M.kcm --db HELD.db [--ops LIST] [--classes LIST] [--passes 3]\n"
    "                               [--repeat 5] [--threads 1] [--verify 5] [--limit N] [--transfer T]\n"
    "                               [--transfer-workloads 6]\n"
    "  --cost-model F        the cross-workload model (kestrel cost-model train)\n"
    "  --db F                records of held-out workloads, tuned in full (never in the model's data), for\n"
    "                        this machine's target or another class of its triple it runs (avx2 on avx512)\n"
    "  --ops LIST            only these ops (default: every op the model covers)\n"
    "  --classes LIST        only records of these target classes (default: all this machine runs)\n"
    "  --passes/--repeat     interleaved passes over pick, tuned best and default; rounds per pass\n"
    "  --threads N           threads per kernel, as the held-out data was measured (default 1)\n"
    "  --verify N            also measure the model's top N and keep the fastest (0: off; default 5)\n"
    "  --limit N             at most N workloads\n"
    "  --transfer T          also tune --transfer-workloads workloads (those whose default is furthest\n"
    "                        below their tuned best) for T trials, from scratch and warm-started by\n"
    "                        the model, and compare trials to 95%\n";

std::vector<std::string> split(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

std::size_t count(const std::string& flag, const std::string& text) {
  try {
    std::size_t used = 0;
    long long v = std::stoll(text, &used);
    if (used != text.size() || v < 0) throw std::invalid_argument(text);
    return static_cast<std::size_t>(v);
  } catch (const std::exception&) {
    throw std::invalid_argument(flag + " wants a non-negative integer, not '" + text + "'");
  }
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto need = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument(arg + " needs a value");
      return argv[++i];
    };
    if (arg == "--help" || arg == "-h") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    } else if (arg == "--cost-model") {
      o.model_file = need();
    } else if (arg == "--db") {
      o.db = need();
    } else if (arg == "--ops") {
      o.ops = split(need());
    } else if (arg == "--classes") {
      o.classes = split(need());
    } else if (arg == "--passes") {
      o.passes = static_cast<unsigned>(std::max<std::size_t>(1, count(arg, need())));
    } else if (arg == "--repeat") {
      o.repeat = static_cast<unsigned>(std::max<std::size_t>(1, count(arg, need())));
    } else if (arg == "--threads") {
      o.threads = static_cast<unsigned>(count(arg, need()));
    } else if (arg == "--verify") {
      o.verify = count(arg, need());
    } else if (arg == "--limit") {
      o.limit = count(arg, need());
    } else if (arg == "--transfer") {
      o.transfer_trials = count(arg, need());
    } else if (arg == "--transfer-workloads") {
      o.transfer_workloads = count(arg, need());
    } else {
      throw std::invalid_argument("unknown argument '" + arg + "'\n" + kUsage);
    }
  }
  if (o.model_file.empty() || o.db.empty()) throw std::invalid_argument(std::string("--cost-model and --db are required\n") + kUsage);
  return o;
}

std::string fixed(double v, int digits) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.*f", digits, v);
  return buffer;
}

double geomean(const std::vector<double>& v) {
  if (v.empty()) return 0;
  double sum = 0;
  for (double x : v) sum += std::log(x);
  return std::exp(sum / static_cast<double>(v.size()));
}

struct Env {
  std::unique_ptr<bench::BenchPool> pool;
  std::unique_ptr<host::Compiler> compiler;
  std::unique_ptr<tuner::MeasuredEvaluator> evaluator;

  void start() {
    pool = std::make_unique<bench::BenchPool>("kestrel-bench-zero-shot", kCallLimit);
    host::CompilerOptions options;
    options.threads = 2;
    compiler = std::make_unique<host::Compiler>(options);
    evaluator = std::make_unique<tuner::MeasuredEvaluator>(*compiler, pool->measurer(), pool->key());
  }
  void stop() {
    evaluator.reset();
    if (pool) pool->stop();
    compiler.reset();
    pool.reset();
  }
};

// Medians of every round of each config over interleaved passes (order alternating);
// +inf for a config that failed in any pass.
std::vector<double> measure_side_by_side(Env& env, const tuner::Task& task, const std::vector<ops::Config>& configs,
                                         const Options& o) {
  rpc::MeasureSettings settings;
  settings.number = 0;
  settings.repeat = o.repeat;
  settings.min_repeat_ms = 20;
  settings.threads = o.threads;
  std::vector<std::vector<double>> rounds(configs.size());
  std::vector<bool> failed(configs.size(), false);
  for (unsigned pass = 0; pass < o.passes; ++pass) {
    std::vector<std::size_t> order(configs.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = pass % 2 ? order.size() - 1 - i : i;
    std::vector<ops::Config> batch;
    for (std::size_t i : order) batch.push_back(configs[i]);
    auto results = env.pool->on_io<std::vector<tuner::Evaluation>>([&]() -> rpc::awaitable<std::vector<tuner::Evaluation>> {
      co_return co_await env.evaluator->evaluate(task, batch, settings);
    });
    for (std::size_t j = 0; j < results.size(); ++j) {
      std::size_t i = order[j];
      if (!results[j].ok()) failed[i] = true;
      rounds[i].insert(rounds[i].end(), results[j].round_seconds.begin(), results[j].round_seconds.end());
    }
  }
  std::vector<double> out(configs.size());
  for (std::size_t i = 0; i < configs.size(); ++i) out[i] = failed[i] ? kInf : stats::median(rounds[i]);
  return out;
}

// Trials a run needed to reach `goal` GFLOP/s, from its best-so-far curve; 0 if never.
std::size_t trials_to(const std::vector<std::pair<std::size_t, double>>& curve, double goal) {
  for (const auto& [trials, gflops] : curve) {
    if (gflops >= goal) return trials;
  }
  return 0;
}

// One tuning run's best-so-far curve, one point per measured trial in the order the
// records landed (a batch's trials one by one: its first are the strategy's first choices,
// which is what a smaller budget would have measured), and the trial counts at which its
// batches ended.
struct Curve {
  std::vector<std::pair<std::size_t, double>> trials;
  std::vector<std::size_t> batch_ends;
  // The end of the batch that holds trial `trial` (0: never reached).
  std::size_t batch_end(std::size_t trial) const {
    if (trial == 0) return 0;
    for (std::size_t end : batch_ends) {
      if (end >= trial) return end;
    }
    return trial;
  }
};

// One from-scratch tuning run of `task` into a scratch database.
Curve tune_curve(Env& env, const tuner::Task& task, std::size_t trials, std::shared_ptr<const tuner::CrossModel> prior,
                 const Options& o) {
  auto path = std::filesystem::temp_directory_path() / ("kestrel-zero-shot-" + tuner::new_session_id() + ".db");
  Curve result;
  auto& curve = result.trials;
  {
    auto db = records::open_records(path.string());
    tuner::TuneOptions options;
    options.strategy = "sa";
    options.trials = trials;
    options.final_top = 0;
    options.transfer = false;
    options.vendors = "none";
    options.device_key = env.pool->key();
    options.measure.number = 0;
    options.measure.repeat = 3;
    options.measure.min_repeat_ms = 20;
    options.measure.threads = o.threads;
    options.prior_model = std::move(prior);
    tuner::TuningLoop loop(task, *db, *env.evaluator, options);
    env.pool->on_io<void>([&]() -> rpc::awaitable<void> {
      co_await loop.run([&](const tuner::TuneProgress& p) {
        if (p.phase == "tuning" && p.this_session > 0 &&
            (result.batch_ends.empty() || result.batch_ends.back() != p.this_session)) {
          result.batch_ends.push_back(p.this_session);
        }
      });
    });
    double best = 0;
    for (const records::Record& r : db->all(std::string(task.op->name()))) {
      if (r.session != loop.result().session || r.final_measurement) continue;
      if (r.status == kernel::Status::ok) best = std::max(best, r.gflops);
      curve.emplace_back(curve.size() + 1, best);
    }
  }
  std::error_code ec;
  for (const char* suffix : {"", "-wal", "-shm"}) std::filesystem::remove(path.string() + suffix, ec);
  return result;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  try {
    o = parse(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "kestrel-bench-zero-shot: " << e.what() << "\n";
    return 2;
  }
  Env env;
  try {
    auto model = std::make_shared<const tuner::CrossModel>(tuner::CrossModel::load(o.model_file));
    auto db = records::open_records(o.db, records::OpenMode::existing);
    ops::Registry registry = ops::builtin_ops();
    bench::locate_device_binary();
    env.start();
    const host::Target device_target = env.pool->target();
    std::cerr << "device target " << device_target.to_string() << " (class " << tuner::target_class(device_target)
              << "), model " << o.model_file << "\n";
    // The held-out records name the target they were compiled for: this device's, or
    // another class of its triple that the device runs (AVX2 code on an AVX-512 CPU,
    // datagen --mcpu): measured as that target, with this device's caches and cores.
    auto target_of_record = [&](const ops::TargetId& id) -> std::optional<host::Target> {
      if (id == device_target.id()) return device_target;
      std::optional<host::Target> t = host::target_of(id);
      if (!t || t->is_gpu() || t->triple != device_target.triple) return std::nullopt;
      t->traits = host::traits_of(*t, &env.pool->device());
      return t;
    };
    std::set<std::string> classes;

    struct Row {
      std::string op, workload, cls, model;
      bool trained_class = true;  // the model trained on records of this class
      std::size_t trials = 0;
      double tuned = 0, pick = 0, verify = 0, fallback = 0, seconds = 0;
      bool seen = false;
    };
    std::vector<Row> rows;
    std::vector<tuner::Task> transfer_tasks;
    for (const records::Best& best : db->best()) {
      const std::optional<host::Target> record_target = target_of_record(best.target);
      if (!record_target) continue;
      const host::Target& target = *record_target;
      const std::string cls = tuner::target_class(target);
      if (!o.classes.empty() && std::find(o.classes.begin(), o.classes.end(), cls) == o.classes.end()) continue;
      if (!o.ops.empty() && std::find(o.ops.begin(), o.ops.end(), best.op) == o.ops.end()) continue;
      const tuner::OpModelInfo* info = model->serving(best.op, cls);
      const records::Record* own = best.own();
      if (!info || !own) continue;
      classes.insert(cls);
      if (o.limit && rows.size() >= o.limit) break;
      const ops::Op& op = registry.get(best.op);
      tuner::Task task;
      task.op = &op;
      task.params = best.workload;
      task.target = target;
      Row row;
      row.op = best.op;
      row.cls = cls;
      row.model = info->target_class;
      row.trained_class = std::find(info->trained_classes.begin(), info->trained_classes.end(), cls) !=
                          info->trained_classes.end();
      row.workload = ops::format_params(best.workload);
      row.trials = best.trials;
      row.seen = std::find(info->trained_workloads.begin(), info->trained_workloads.end(), row.workload) !=
                 info->trained_workloads.end();

      tuner::Space space(op, task.params, target.traits);
      tuner::ZeroShotOptions zs;
      zs.top = std::max<std::size_t>(1, o.verify);
      tuner::ZeroShotPick pick = tuner::zero_shot_pick(*model, space, target, zs);
      row.seconds = pick.elapsed.count();
      std::vector<ops::Config> configs = {space.config(pick.points.front()), own->config,
                                          op.default_config(task.params, target.traits)};
      for (std::size_t i = 1; i < pick.points.size() && i < o.verify; ++i) configs.push_back(space.config(pick.points[i]));
      std::cerr << "[" << rows.size() + 1 << "] " << row.op << " " << row.workload << ": pick in "
                << fixed(row.seconds, 2) << " s, measuring " << configs.size() << " configurations\n";
      std::vector<double> t = measure_side_by_side(env, task, configs, o);
      const double flops = op.flops(task.params);
      auto gflops = [flops](double s) { return std::isfinite(s) && s > 0 ? flops / s / 1e9 : 0.0; };
      row.pick = gflops(t[0]);
      row.tuned = gflops(t[1]);
      row.fallback = gflops(t[2]);
      double fastest = t[0];
      for (std::size_t i = 3; i < t.size(); ++i) fastest = std::min(fastest, t[i]);
      row.verify = gflops(fastest);
      rows.push_back(row);
      transfer_tasks.push_back(task);
    }
    if (rows.empty()) {
      throw std::runtime_error(o.db + " has no workload of a target " + device_target.to_string() + " runs that " +
                               o.model_file + " covers");
    }

    std::string class_list;
    for (const auto& c : classes) class_list += (class_list.empty() ? "" : ", ") + c;
    std::cout << "\nzero-shot picks on held-out workloads, " << device_target.to_string() << " running " << class_list
              << " code, " << o.threads << " thread(s), median of " << o.passes << "x" << o.repeat << " rounds\n";
    std::printf("%-18s %-7s %-46s %7s %9s %9s %7s %7s %8s %7s\n", "op", "class", "workload", "trials", "tuned",
                "zero-shot", "ratio", "verify", "default", "pick s");
    std::map<std::string, std::vector<double>> by_op, by_op_verify, by_op_default;
    std::vector<double> all, all_verify, all_default;
    double slowest = 0;
    for (const Row& r : rows) {
      double ratio = r.tuned > 0 ? r.pick / r.tuned : 0, verify = r.tuned > 0 ? r.verify / r.tuned : 0,
             fallback = r.tuned > 0 ? r.fallback / r.tuned : 0;
      std::printf("%-18s %-7s %-46s %7zu %9.1f %9.1f %7.2f %7.2f %8.2f %7.2f%s%s\n", r.op.c_str(), r.cls.c_str(),
                  r.workload.c_str(), r.trials, r.tuned, r.pick, ratio, verify, fallback, r.seconds,
                  r.seen ? "  (in the training data)" : "",
                  r.trained_class ? "" : "  (class not in the model's training data)");
      const std::string group = r.op + " [" + r.cls + (r.trained_class ? "" : ", held-out class") + "]";
      const std::string class_group = "all " + r.cls;
      for (const std::string& key : {group, class_group}) {
        if (ratio > 0) by_op[key].push_back(ratio);
        if (verify > 0) by_op_verify[key].push_back(verify);
        if (fallback > 0) by_op_default[key].push_back(fallback);
      }
      if (ratio > 0) all.push_back(ratio);
      if (verify > 0) all_verify.push_back(verify);
      if (fallback > 0) all_default.push_back(fallback);
      slowest = std::max(slowest, r.seconds);
    }
    std::cout << "\ngeomean of zero-shot / tuned GFLOP/s (verify-" << o.verify << ", default):\n";
    for (const auto& [op, v] : by_op) {
      std::cout << "  " << op << ": " << fixed(geomean(v), 3) << " (" << fixed(geomean(by_op_verify[op]), 3) << ", "
                << fixed(geomean(by_op_default[op]), 3) << ") over " << v.size() << " workloads\n";
    }
    std::cout << "  all: " << fixed(geomean(all), 3) << " (" << fixed(geomean(all_verify), 3) << ", "
              << fixed(geomean(all_default), 3) << ") over " << all.size() << " workloads; slowest pick "
              << fixed(slowest, 2) << " s, 0 measurements\n";

    if (o.transfer_trials > 0) {
      // The workloads where search matters: those whose default is furthest below their
      // tuned best (where the default is within 5% of it, "trials to 95%" is the first
      // trial with or without a model, and says nothing).
      std::vector<std::size_t> order(rows.size());
      for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
      auto gap = [&](std::size_t i) { return rows[i].tuned > 0 ? rows[i].fallback / rows[i].tuned : 1.0; };
      std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return gap(a) < gap(b); });
      std::vector<tuner::Task> chosen;
      for (std::size_t i = 0; i < order.size() && chosen.size() < o.transfer_workloads; ++i) {
        chosen.push_back(transfer_tasks[order[i]]);
      }
      transfer_tasks = std::move(chosen);
      std::cout << "\ntransfer: sa from scratch vs warm-started by the model, " << o.transfer_trials
                << " trials each; trials to 95% of the from-scratch best\n";
      std::printf("%-18s %-46s %9s %9s %9s %9s %11s %11s\n", "op", "workload", "scratch", "warm", "to95 scr",
                  "to95 warm", "batch scr", "batch warm");
      std::vector<double> speedups, batch_speedups;
      for (const tuner::Task& task : transfer_tasks) {
        std::cerr << "transfer: " << task.key() << "\n";
        Curve scratch = tune_curve(env, task, o.transfer_trials, nullptr, o);
        Curve warm = tune_curve(env, task, o.transfer_trials, model, o);
        double scratch_best = scratch.trials.empty() ? 0 : scratch.trials.back().second;
        double warm_best = warm.trials.empty() ? 0 : warm.trials.back().second;
        std::size_t a = trials_to(scratch.trials, 0.95 * scratch_best), b = trials_to(warm.trials, 0.95 * scratch_best);
        std::size_t batch_a = scratch.batch_end(a), batch_b = warm.batch_end(b);
        std::printf("%-18s %-46s %9.1f %9.1f %9zu %9s %11zu %11s\n", std::string(task.op->name()).c_str(),
                    task.workload().c_str(), scratch_best, warm_best, a, b ? std::to_string(b).c_str() : "never",
                    batch_a, batch_b ? std::to_string(batch_b).c_str() : "never");
        // A warm run that never got there counts as the whole budget, which flatters it (its
        // real count is larger): such runs are marked "never" in the table.
        if (a) {
          speedups.push_back(static_cast<double>(a) / static_cast<double>(b ? b : o.transfer_trials));
          batch_speedups.push_back(static_cast<double>(batch_a) / static_cast<double>(b ? batch_b : o.transfer_trials));
        }
      }
      std::cout << "geomean of (trials to 95%: scratch / warm): " << fixed(geomean(speedups), 2) << " counting trials, "
                << fixed(geomean(batch_speedups), 2) << " counting to the end of their batch, over " << speedups.size()
                << " workloads (a warm run that never reached it counts as all its trials: an upper bound)\n";
    }
    env.stop();
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "kestrel-bench-zero-shot: " << e.what() << "\n";
    env.stop();
    return 1;
  }
}
