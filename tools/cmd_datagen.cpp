// `kestrel datagen`: builds a records database for a cross-workload cost model (kestrel
// model train) by tuning a family of workloads with a budget: random shapes of the ops
// (tuner/shape_family.h), the workloads of named sets, the tasks of ONNX models. Each
// workload gets the same number of trials, in turn; running it again resumes.
#include <algorithm>
#include <iomanip>
#include <iostream>
#include <set>
#include <sstream>

#include "args.h"
#include "report_error.h"
#include "commands.h"
#include "kestrel/model/buckets.h"
#include "kestrel/model/graph.h"
#include "kestrel/model/tasks.h"
#include "kestrel/ops/workload_sets.h"
#include "kestrel/records/records.h"
#include "kestrel/tuner/shape_family.h"
#include "kestrel/tuner/strategy.h"
#include "measure_args.h"
#include "kestrel/frontend/model_jobs.h"
#include "kestrel/frontend/options.h"
#include "tune_session.h"

namespace kestrel::tools {
namespace {

std::vector<std::string> split(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

bool has_param(const ops::Op& op, const std::string& name) {
  for (const auto& spec : op.params()) {
    if (spec.name == name) return true;
  }
  return false;
}

struct Family {
  std::vector<std::string> ops;          // random families
  std::size_t random = 0;                // workloads per op
  std::uint64_t seed = 1;
  double max_gflop = 1.6;
  std::string sets;                      // named workload sets
  std::string set_op;                    // replaces the sets' op (e.g. conv2d_nchwc)
  std::vector<std::string> model_paths;  // ONNX models
  std::string exclude_sets;              // held out: never tuned
};

// Every workload of the family for `target`, in order: sets, models, random shapes;
// without repeats and without the excluded sets' workloads (compared after the NCHWc
// block is set, so a held-out layer stays out in any layout).
std::vector<tuner::TuneJob> family_jobs(const Family& family, const ops::Registry& registry,
                                        const host::Target& target) {
  const std::int64_t block = model::default_block(target.traits);
  // Every NCHWc workload in the target's block (a set's entry carries the op's fallback,
  // 16, which is not what an AVX2 or NEON device runs).
  auto with_block = [block](const ops::Op& op, ops::Params params) {
    if (has_param(op, "block")) params["block"] = block;
    return ops::normalize_params(op, std::move(params));
  };
  auto key = [](const ops::Op& op, const ops::Params& params) {
    return std::string(op.name()) + " " + ops::format_params(params);
  };

  std::set<std::string> excluded;
  if (!family.exclude_sets.empty()) {
    for (auto& w : ops::resolve_workload_sets(registry, family.exclude_sets, {}, family.set_op)) {
      excluded.insert(key(*w.op, with_block(*w.op, w.params)));
      // The same layer in the other layouts: a held-out conv2d layer is held out as
      // conv2d_nchwc too.
      for (const char* other : {"conv2d", "conv2d_nchwc"}) {
        const ops::Op* alt = registry.find(other);
        if (!alt || alt == w.op || (std::string(w.op->name()) != "conv2d" && std::string(w.op->name()) != "conv2d_nchwc")) {
          continue;
        }
        ops::Params params = w.params;
        if (!has_param(*alt, "block")) params.erase("block");
        try {
          alt->validate(with_block(*alt, params));
          excluded.insert(key(*alt, with_block(*alt, params)));
        } catch (const ops::OpError&) {
        }
      }
    }
  }

  std::vector<tuner::TuneJob> jobs;
  std::set<std::string> seen;
  // An empty label: the op and its workload as the records name it ("gemm K=64,M=48,N=40").
  auto add = [&](std::string label, const ops::Op& op, ops::Params params) {
    params = with_block(op, std::move(params));
    std::string k = key(op, params);
    if (excluded.count(k) != 0 || !seen.insert(k).second) return;
    jobs.push_back({label.empty() ? k : std::move(label), &op, std::move(params)});
  };

  if (!family.sets.empty()) {
    for (auto& w : ops::resolve_workload_sets(registry, family.sets, {}, family.set_op)) add(w.label, *w.op, w.params);
  }
  for (const auto& path : family.model_paths) {
    model::Model m = model::Model::load(path);
    auto buckets = model::parse_buckets(m.graph().symbols(), "");
    for (auto& job : frontend::model_jobs(m, buckets, block, registry, target)) add(job.label, *job.op, job.params);
  }
  for (std::size_t i = 0; i < family.ops.size(); ++i) {
    const ops::Op& op = registry.get(family.ops[i]);
    tuner::FamilyOptions options;
    options.count = family.random;
    options.seed = family.seed + i;
    options.block = block;
    options.max_gflop = family.max_gflop;
    if (family.random == 0) continue;
    for (auto& params : tuner::shape_family(op, options)) add("", op, std::move(params));
  }
  return jobs;
}

}  // namespace

int run_datagen(int argc, char** argv) {
  Args args("kestrel datagen",
            "Builds a records database to train a cross-workload cost model on (kestrel cost-model train): tunes a\n"
            "family of workloads on a device, each with the same number of trials, in turn. The family is random\n"
            "shapes of the ops (--ops, --random), the workloads of named sets (--sets) and the tasks of ONNX\n"
            "models (--model); --exclude-sets keeps held-out workloads out of it. Without --tracker it tunes\n"
            "this machine through an embedded tracker and device.");
  args.option("db", "FILE|URI", "records database (SQLite file or PostgreSQL URI); created if missing", "kestrel-data.db");
  args.option("ops", "OPS", "ops of the random family (see --list-ops)", "gemm,conv2d_nchwc,depthwise_conv2d");
  args.option("random", "N", "random workloads per op", "24");
  args.option("max-gflop", "X", "largest random workload in GFLOP (larger ones are redrawn: trials stay short)", "1.6");
  args.option("sets", "SETS", "named workload sets to include, e.g. resnet18-conv,gemm-skinny (kestrel bench --list-sets)");
  args.option("set-op", "NAME", "replace the sets' op, e.g. conv2d_nchwc for the conv sets");
  args.option("model", "FILES", "ONNX models whose tasks to include (comma-separated)");
  args.option("exclude-sets", "SETS", "named sets held out for evaluation: their workloads are never tuned");
  args.option("trials-per-workload", "N", "trials per workload, earlier runs included", "48");
  args.option("time-budget", "DURATION", "the whole run's budget, e.g. 8h, shared equally by the workloads");
  args.option("strategy", "NAME", "search strategy (see kestrel tune --help)", "sa");
  args.option("seed", "N", "seed of the family and of the searches", "1");
  args.option("batch", "N", "configurations per batch", "16");
  args.option("compile-threads", "N", "host compile threads; 0 = one per core", "0");
  args.flag("final", "re-measure each workload's best 3 beside the default at the end (slower; off: datasets "
                     "need many configurations more than precise finalists)");
  args.flag("list", "print the workloads (for this host's target) and exit");
  args.flag("list-ops", "print the ops that have a random family and exit");
  args.flag("quiet", "no progress output");
  add_pool_options(args);
  add_measure_options(args);
  args.option("log-level", "LEVEL", "debug, info, warn, error or off", "warn");
  args.epilog(
      "Every measurement is committed to --db as it arrives; run the same command again to resume (trials\n"
      "count per workload, earlier runs included). Ctrl-C stops at once (the batch in flight is dropped).\n\n"
      "Overnight on a board:\n"
      "  kestrel datagen --tracker host:9190 --key rpi4 --db rpi4.db --random 40 --time-budget 8h \\\n"
      "                  --exclude-sets resnet50-conv\n"
      "  kestrel cost-model train --db rpi4.db -o rpi4.kcm");
  try {
    if (!args.parse(argc, argv, 2)) {
      std::cout << args.help();
      return 0;
    }
    set_log_level(args, "warn");
    if (args.has("list-ops")) {
      for (const auto& name : tuner::family_ops()) std::cout << name << "\n";
      return 0;
    }
    ops::Registry registry = ops::builtin_ops();
    Family family;
    family.ops = split(args.get("ops", "gemm,conv2d_nchwc,depthwise_conv2d"));
    for (const auto& name : family.ops) {
      if (std::find(tuner::family_ops().begin(), tuner::family_ops().end(), name) == tuner::family_ops().end()) {
        throw UsageError("op " + name + " has no random family (see --list-ops)");
      }
    }
    family.random = static_cast<std::size_t>(args.get_int("random", 24, 0, 100'000));
    family.seed = static_cast<std::uint64_t>(args.get_int("seed", 1, 0, INT64_MAX));
    try {
      family.max_gflop = std::stod(args.get("max-gflop", "1.6"));
    } catch (const std::exception&) {
      throw UsageError("--max-gflop '" + args.get("max-gflop") + "' is not a number");
    }
    if (!(family.max_gflop > 0)) throw UsageError("--max-gflop must be positive");
    family.sets = args.get("sets");
    family.set_op = args.get("set-op");
    family.model_paths = split(args.get("model"));
    family.exclude_sets = args.get("exclude-sets");

    // Fails before leasing anything when the family is empty or malformed.
    std::vector<tuner::TuneJob> preview = family_jobs(family, registry, host::parse_target("native", ""));
    if (preview.empty()) throw UsageError("the family is empty: give --random N, --sets or --model");
    if (args.has("list")) {
      for (const auto& job : preview) {
        std::cout << std::left << std::setw(20) << job.op->name() << ops::format_params(job.params) << "\n";
      }
      std::cout << preview.size() << " workloads (for this host's target)\n";
      return 0;
    }

    tuner::TuneOptions options;
    options.strategy = frontend::checked_strategy(args.get("strategy", "sa"));
    options.trials = static_cast<std::size_t>(args.get_int("trials-per-workload", 48, 1, 100'000'000));
    options.batch_size = static_cast<std::size_t>(args.get_int("batch", 16, 1, 4096));
    options.seed = family.seed;
    options.final_top = args.has("final") ? 3 : 0;
    options.vendors = "none";
    options.measure = measure_options(args);
    std::chrono::seconds budget{0};
    if (args.has("time-budget")) budget = frontend::parse_duration("--time-budget", args.get("time-budget"));
    if (budget.count() > 0) {
      // An equal share per workload: every workload gets measured, none takes the night.
      options.time_budget = std::max(std::chrono::seconds(1), budget / static_cast<long>(preview.size()));
    }
    host::PoolOptions pool = pool_options(args, "kestrel datagen");
    options.device_key = pool.key;
    std::string db_path = args.get("db", "kestrel-data.db");
    auto db = records::open_records(db_path);

    TuneSessionOptions session_options;
    session_options.program = "kestrel datagen";
    session_options.quiet = args.has("quiet");
    session_options.session.pool = pool;
    session_options.session.compile_threads = static_cast<unsigned>(args.get_int("compile-threads", 0, 0, 256));
    session_options.session.tune = options;
    session_options.session.registry = &registry;
    session_options.session.choose_target = [&args](const rpc::DeviceInfo& device) {
      return resolve_target(args, device);
    };
    std::vector<tuner::TuneJob> jobs;
    session_options.session.make_jobs = [&](const host::Target& target) {
      jobs = family_jobs(family, registry, target);
      if (!session_options.quiet) {
        std::cerr << "datagen: " << jobs.size() << " workloads for " << target.to_string() << ", "
                  << options.trials << " trials each";
        if (budget.count() > 0) std::cerr << ", at most " << options.time_budget.count() << " s each";
        std::cerr << "\n";
      }
      return jobs;
    };
    tuner::SessionResult session = run_tune_session({}, *db, session_options);

    std::size_t trials = 0, measured = 0;
    for (const auto& r : session.results) {
      trials += r.trials;
      measured += r.this_session;
    }
    std::cout << session.results.size() << "/" << jobs.size() << " workloads tuned, " << measured
              << " configurations measured this run, " << trials << " in all\n"
              << "records: " << db->location() << " (next: kestrel cost-model train --db " << db->location()
              << " -o model.kcm)\n";
    if (session.results.size() < jobs.size()) {
      std::cout << jobs.size() - session.results.size() << " workloads left: run the same command again to go on\n";
    }
    return session.interrupted ? 130 : 0;
  } catch (...) {
    return report_error("kestrel datagen", std::current_exception());
  }
}

}  // namespace kestrel::tools
