// `kestrel tune`: a tuning session for one workload, or for each workload of named sets
// (--workloads), on a pool of devices (or, without --tracker, on this machine through an
// embedded tracker and device). The session itself is tune_session.cpp.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "args.h"
#include "report_error.h"
#include "commands.h"
#include "kestrel/model/buckets.h"
#include "kestrel/model/graph.h"
#include "kestrel/model/tasks.h"
#include "kestrel/ops/workload_sets.h"
#include "kestrel/base/log.h"
#include "kestrel/tuner/cross_model.h"
#include "kestrel/records/records.h"
#include "kestrel/tuner/strategy.h"
#include "kestrel/tuner/tuning_loop.h"
#include "kestrel/tuner/zero_shot.h"
#include "measure_args.h"
#include "kestrel/frontend/model_jobs.h"
#include "kestrel/frontend/options.h"
#include "kestrel/frontend/json.h"
#include "kestrel/frontend/session_runner.h"
#include "kestrel/frontend/tune_setup.h"
#include "tune_session.h"

namespace kestrel::tools {
namespace {

// The model's pick without measuring (zero-shot, no verification).
void print_zero_shot(const tuner::TuneResult& r, const std::string& model_path) {
  const tuner::TuneResult::ZeroShot& z = *r.zero_shot;
  std::cout << "\n" << r.op << " " << r.workload << " on " << r.target << "\n"
            << "target traits: " << r.traits << "\n";
  if (!z.fallback.empty()) {
    std::cout << "no zero-shot pick: " << z.fallback << "\n"
              << "the op's default stands in: " << ops::format_config(z.picks.front()) << "\n";
    return;
  }
  std::cout << std::fixed << std::setprecision(1) << "zero-shot pick (0 measurements, " << z.seconds
            << " s): " << ops::format_config(z.picks.front()) << "\n"
            << "  the best of " << z.scored << " configurations scored by " << model_path
            << "; nothing was measured or recorded (--zero-shot-verify N measures the top N)\n";
}

void print_summary(const tuner::TuneResult& r, const std::string& db_path, const std::string& model_path) {
  if (r.zero_shot && r.this_session == 0) {
    print_zero_shot(r, model_path);
    return;
  }
  std::cout << "\n"
            << r.op << " " << r.workload << " on " << r.target << "\n"
            << "target traits: " << r.traits << "\n"
            << "trials: " << r.trials << " (" << r.this_session << " this session";
  if (r.resumed) std::cout << ", " << r.resumed << " resumed";
  std::cout << "), stopped by " << tuner::to_string(r.stop_reason) << "\n";
  if (!r.statuses.empty()) {
    std::cout << "statuses:";
    for (const auto& [status, count] : r.statuses) std::cout << " " << status << "=" << count;
    std::cout << "\n";
  }
  if (r.transfer_records) std::cout << "model seeded with " << r.transfer_records << " records of other workloads\n";
  if (!r.prior.empty()) {
    if (r.prior.starts_with("none: ")) std::cout << "warm start: none, " << r.prior.substr(6) << "\n";
    else std::cout << "warm start: the " << r.prior << " model of " << model_path << "\n";
  }
  if (r.zero_shot) {
    const tuner::TuneResult::ZeroShot& z = *r.zero_shot;
    if (!z.fallback.empty()) {
      std::cout << "no zero-shot pick: " << z.fallback << "; the op's default was measured\n";
    } else {
      std::cout << std::fixed << std::setprecision(1) << "zero-shot picks (" << z.seconds << " s, " << z.scored
                << " configurations scored), measured once beside the default:";
      for (const auto& pick : z.picks) std::cout << "\n  " << ops::format_config(pick);
      std::cout << "\n";
    }
  }
  if (r.final.empty()) {
    if (!r.best_recorded) {
      std::cout << "no successful measurement\n";
      return;
    }
    const tuner::FinalEntry& b = *r.best_recorded;
    std::cout << "\nbest recorded (not re-measured): " << ops::format_config(b.config) << "\n"
              << std::fixed << std::setprecision(1) << "  " << b.gflops(r.flops) << " GFLOP/s, median "
              << std::setprecision(3) << b.median_s * 1e3 << " ms";
    if (std::isfinite(r.default_seconds) && !b.is_default) {
      std::cout << std::setprecision(2) << ", " << r.default_seconds / b.median_s << "x default";
    }
    std::cout << "\n";
  } else {
    std::cout << "\nfinal: the best configurations, the default and the vendor libraries, re-measured in " << r.passes
              << " interleaved passes (recommendation first, then by median)\n"
              << std::left << std::setw(6) << "RANK" << std::setw(12) << "GFLOP/s" << std::setw(12) << "MEDIAN ms"
              << std::setw(22) << "SPEED-UP (95%)" << std::setw(9) << "SPREAD" << "CONFIG\n";
    int rank = 1;
    for (const auto& f : r.final) {
      std::ostringstream speedup, spread;
      if (f.speedup > 0 && !f.is_default) {
        speedup << std::fixed << std::setprecision(2) << f.speedup << "x";
        if (f.speedup_high > 0) speedup << " (" << f.speedup_low << "-" << f.speedup_high << ")";
      } else if (f.is_default && f.ok()) {
        speedup << "1.00x";
      }
      if (f.ok()) spread << std::fixed << std::setprecision(0) << f.spread * 100 << "%";
      std::cout << std::left << std::setw(6) << rank++ << std::setw(12) << std::fixed << std::setprecision(1)
                << f.gflops(r.flops) << std::setw(12) << std::setprecision(3) << f.median_s * 1e3 << std::setw(22)
                << speedup.str() << std::setw(9) << spread.str()
                << (f.implementation == records::kKestrelImplementation ? ops::format_config(f.config)
                                                                        : f.implementation + " (vendor)");
      if (f.is_default) std::cout << "  (default)";
      if (f.recommended) std::cout << "  <- recommended";
      if (f.noisy) std::cout << "  noisy: its rounds disagree";
      if (!f.ok()) std::cout << "  " << kernel::to_string(f.status);
      std::cout << "\n";
    }
    // The leader among the others, for the verdict's numbers.
    const tuner::FinalEntry* runner_up = nullptr;
    for (const auto& f : r.final) {
      if (!f.is_default && f.implementation == records::kKestrelImplementation && f.ok() &&
          (!runner_up || f.speedup > runner_up->speedup)) {
        runner_up = &f;
      }
    }
    auto interval = [](const tuner::FinalEntry& f) {
      std::ostringstream out;
      out << std::fixed << std::setprecision(2) << f.speedup << "x the default, 95% interval " << f.speedup_low << "-"
          << f.speedup_high << "x";
      return out.str();
    };
    if (r.final.front().implementation != records::kKestrelImplementation) {
      std::cout << "the vendor library " << r.final.front().implementation
                << " was faster than Kestrel's pick with confidence: `kestrel best` shows it\n";
    } else if (r.verdict == "faster") {
      std::cout << "recommended: " << ops::format_config(r.final.front().config) << " (" << interval(r.final.front())
                << ")\n";
    } else if (r.verdict == "too noisy") {
      std::cout << "the machine was too noisy to tell"
                << (runner_up ? " whether " + ops::format_config(runner_up->config) + " beats the default (" +
                                    interval(*runner_up) + ")"
                              : std::string())
                << ": the default is the recommendation; rerun on a quieter machine or with more --final-max-passes\n";
    } else if (r.default_is_best) {
      std::cout << "no configuration is faster than the default with 95% confidence"
                << (runner_up ? " (best: " + ops::format_config(runner_up->config) + ", " + interval(*runner_up) + ")"
                              : std::string())
                << ": the default is the recommendation\n";
    }
  }
  for (const auto& v : r.vendors) {
    std::cout << "vendor " << v.implementation << ": ";
    if (v.ok()) {
      std::cout << std::fixed << std::setprecision(1) << v.gflops(r.flops) << " GFLOP/s, median "
                << std::setprecision(3) << v.median_s * 1e3 << " ms\n";
    } else {
      std::cout << kernel::to_string(v.status) << "\n";
    }
  }
  if (r.default_gflops() > 0) {
    std::cout << std::fixed << std::setprecision(1) << "default config: " << r.default_gflops() << " GFLOP/s\n";
  }
  std::cout << "records: " << db_path << " (kestrel best --db " << db_path << ")\n";
}

// A task's final round in the model's table: its passes, or how the time budget cut it.
std::string final_text(const tuner::TuneResult& r) {
  if (r.final_cut == tuner::FinalCut::skipped) return "skipped (time)";
  if (r.passes == 0) return "-";
  std::string text = std::to_string(r.passes) + (r.passes == 1 ? " pass" : " passes");
  if (r.final_cut == tuner::FinalCut::fewer_passes) text += " (cut)";
  return text;
}

// A model's tasks picked by the cost model without measuring: each task's pick.
void print_model_picks(const std::vector<tuner::TuneJob>& jobs, const tuner::SessionResult& session,
                       const std::string& model_path, const std::string& onnx_path) {
  std::size_t width = 16;  // the pick column: as wide as the longest pick
  for (const tuner::TuneResult& r : session.results) {
    if (r.zero_shot && !r.zero_shot->picks.empty()) {
      width = std::max(width, ops::format_config(r.zero_shot->picks.front()).size() + 20);
    }
  }
  std::cout << "\n" << std::left << std::setw(6) << "TASK" << std::setw(6) << "x" << std::setw(9) << "PICK s"
            << std::setw(static_cast<int>(width)) << "ZERO-SHOT PICK" << "WORKLOAD\n";
  double seconds = 0;
  std::size_t fallbacks = 0;
  for (std::size_t i = 0; i < session.results.size(); ++i) {
    const tuner::TuneResult& r = session.results[i];
    double weight = 1;
    for (const auto& j : jobs) {
      if (std::string(j.op->name()) == r.op && ops::format_params(j.params) == r.workload) weight = j.weight;
    }
    std::string pick = "-", time = "-";
    if (r.zero_shot && !r.zero_shot->picks.empty()) {
      pick = ops::format_config(r.zero_shot->picks.front());
      if (r.zero_shot->fallback.empty()) {
        std::ostringstream t;
        t << std::fixed << std::setprecision(2) << r.zero_shot->seconds;
        time = t.str();
        seconds += r.zero_shot->seconds;
      } else {
        pick += " (default: no model)";
        ++fallbacks;
      }
    }
    std::cout << std::left << std::setw(6) << i + 1 << std::setw(6) << static_cast<long>(weight) << std::setw(9) << time
              << std::setw(static_cast<int>(width)) << pick << r.op << " " << r.workload << "\n";
  }
  std::cout << "\n" << session.results.size() << "/" << jobs.size() << " tasks picked by " << model_path << " in "
            << std::fixed << std::setprecision(1) << seconds << " s, nothing measured or recorded";
  if (fallbacks > 0) std::cout << "; " << fallbacks << " tasks keep their op's default (no model for their op)";
  std::cout << "\nnext: kestrel export --model " << onnx_path << " --zero-shot -o out/ (the same picks, compiled)\n";
}

void print_model_summary(const std::vector<tuner::TuneJob>& jobs, const tuner::SessionResult& session,
                         const std::string& db_path) {
  std::cout << "\n" << std::left << std::setw(6) << "TASK" << std::setw(6) << "x" << std::setw(8) << "TRIALS"
            << std::setw(10) << "GFLOP/s" << std::setw(10) << "SPEED-UP" << std::setw(12) << "EST. ms" << std::setw(16)
            << "FINAL" << "WORKLOAD\n";
  double best_s = 0, default_s = 0;
  std::size_t trials = 0;
  for (std::size_t i = 0; i < session.results.size(); ++i) {
    const tuner::TuneResult& r = session.results[i];
    // Results are in job order; jobs never started (out of time) have none.
    const tuner::TuneJob* job = nullptr;
    for (const auto& j : jobs) {
      if (std::string(j.op->name()) == r.op && ops::format_params(j.params) == r.workload) job = &j;
    }
    double weight = job ? job->weight : 1;
    const tuner::FinalEntry* best = r.recommendation();
    const double best_seconds = best ? best->median_s : std::numeric_limits<double>::infinity();
    double est = std::isfinite(best_seconds) ? weight * best_seconds : 0;
    best_s += est;
    if (std::isfinite(r.default_seconds)) default_s += weight * r.default_seconds;
    trials += r.trials;
    std::ostringstream speedup;
    if (std::isfinite(r.default_seconds) && std::isfinite(best_seconds)) {
      speedup << std::fixed << std::setprecision(2) << r.default_seconds / best_seconds << "x";
    }
    std::cout << std::left << std::setw(6) << i + 1 << std::setw(6) << static_cast<long>(weight) << std::setw(8) << r.trials
              << std::setw(10) << std::fixed << std::setprecision(1) << (best ? best->gflops(r.flops) : 0.0)
              << std::setw(10) << speedup.str()
              << std::setw(12) << std::setprecision(3) << est * 1e3 << std::setw(16) << final_text(r) << r.op << " "
              << r.workload << "\n";
  }
  std::cout << "\n" << session.results.size() << "/" << jobs.size() << " tasks, " << trials
            << " trials; stopped by "
            << (session.stop_reason == tuner::StopReason::none ? "trials" : tuner::to_string(session.stop_reason)) << "\n";
  const std::size_t final_tasks = session.final_full + session.final_fewer + session.final_skipped;
  if (!session.results.empty()) {
    auto seconds = [](std::chrono::steady_clock::duration d) {
      std::ostringstream out;
      out << std::fixed << std::setprecision(1) << std::chrono::duration<double>(d).count() << " s";
      return out.str();
    };
    std::cout << "final round: " << session.final_full << " tasks re-measured in full";
    if (session.final_fewer > 0) std::cout << ", " << session.final_fewer << " with fewer passes (time budget)";
    if (session.final_skipped > 0) {
      std::cout << ", " << session.final_skipped << " not re-measured (time budget: their best recorded stands)";
    }
    if (session.results.size() > final_tasks) {
      std::cout << ", " << session.results.size() - final_tasks << " without one (their best recorded stands)";
    }
    std::cout << "; it took " << seconds(session.final_time);
    if (session.final_reserved.count() > 0) {
      std::cout << " (the search stopped " << seconds(session.final_reserved) << " before the budget for it)";
    }
    std::cout << "\n";
  }
  if (best_s > 0) {
    std::cout << std::fixed << std::setprecision(3) << "tuned operators, estimated: " << best_s * 1e3 << " ms";
    if (default_s > 0) std::cout << std::setprecision(2) << " (defaults: " << default_s * 1e3 << " ms, " << default_s / best_s << "x)";
    std::cout << "\n";
  }
  std::cout << "records: " << db_path << " (next: kestrel export --db " << db_path << " --model ... -o out/)\n";
}

}  // namespace

int run_tune(int argc, char** argv) {
  Args args("kestrel tune",
            "Tunes one workload (or each of a named set in turn): proposes configurations, compiles them for the device's target,\n"
            "measures them on every leased device of the key, records every result, and learns.\n"
            "Without --tracker it starts a tracker and a device on this machine and tunes for it.");
  args.option("op", "NAME", "op to tune (see `kestrel ops`)", "gemm");
  args.option("shape", "SHAPE", "workload, e.g. M=512,N=512,K=512 or 512x512x512 (or --workloads)");
  args.option("model", "FILE", "tune every task of an ONNX model (see `kestrel tasks`), giving the trials to the tasks "
                               "expected to cut the model's latency most");
  args.option("buckets", "SIZES", "with --model: sizes its symbolic dimensions are tuned at, e.g. seq=8,32,128 "
                                  "(default 8,32,128)");
  args.option("block", "N", "with --model: channels per block of the convolutions' NCHWc layout (default: the "
                            "target's floats per vector)");
  args.flag("no-winograd", std::string("with --model: ") + frontend::kNoWinogradHelp);
  args.option("workloads", "SETS", "tune every workload of these named sets in turn, e.g. gemm-square,resnet18-conv "
                                   "(see `kestrel bench --list-sets`); --op then replaces the sets' op");
  args.option("only", "LABELS", "with --workloads: only these workloads, by label (e.g. 1024,layer2.conv)");
  declare(args, frontend::budget_option_specs());
  args.option("db", "FILE|URI", "records database: an SQLite file or postgresql://user@host/db; created if missing",
              "kestrel.db");
  declare(args, frontend::search_option_specs());
  declare(args, frontend::session_option_specs());
  declare(args, frontend::cost_model_option_specs());
  args.flag("quiet", "no progress output");
  args.flag("json", "print the result as JSON");
  add_pool_options(args);
  args.option("http", "PORT",
              "serve the embedded pool's dashboard (the devices, the queue, this session's live curves) on "
              "http://127.0.0.1:PORT/ while the tune runs (the page goes when it ends); with --tracker, open the "
              "tracker's own dashboard instead (kestrel tracker --http)");
  add_measure_options(args);
  args.option("log-level", "LEVEL", "debug, info, warn, error or off", "warn");
  args.epilog(
      "Every measurement, failures included, is committed to --db as it arrives. Running the\n"
      "same command again resumes: configurations already measured on that target are\n"
      "skipped and the search starts from them. Ctrl-C stops at once: a wait for a device or a\n"
      "result ends, the batch in flight is dropped (exit 130); SIGTERM also closes the tracker\n"
      "connection (exit 143);\n"
      "nothing recorded is lost. A database that cannot take a record (disk full) ends the\n"
      "session with its error, the devices released.\n\n"
      "With --model, every distinct task of the model (see `kestrel tasks --model`) is tuned in one\n"
      "session: each task's default first, then a step at a time for the task expected to cut the\n"
      "model's latency most (occurrences x time saved per trial, from its recent progress and\n"
      "from how fast similar tasks run), until --trials-per-task or --time-budget. The budget\n"
      "covers everything, the final re-measurement included: the search stops early enough to\n"
      "leave the tasks' final rounds the time they are expected to take (from what it measured;\n"
      "at most half the budget), then the tasks that weigh most in the model's latency are\n"
      "re-measured first; when time runs short the others get fewer passes or none (their best\n"
      "recorded configuration stands, and the summary says so). A line per task on stderr shows\n"
      "the final round's progress and ETA.\n"
      "Run it again to resume; then `kestrel export --model ... --db ...`.\n\n"
      "With --cost-model (a cost model from `kestrel cost-model train`), the model's ranking of the\n"
      "configurations warm-starts the search, fading as measurements arrive. With --zero-shot\n"
      "there is no search: the cost model (--cost-model, else the one Kestrel ships: `kestrel\n"
      "cost-model show` lists what it covers) picks in seconds, without a device when the target\n"
      "is known (--target native or a triple, or this machine); --zero-shot-verify N measures its\n"
      "top N and the default once on the device and keeps the fastest. A model without one for\n"
      "the workload's op and target class (or its family) is an error (with --workloads or\n"
      "--model: that workload or task gets the op's default, and says so). With --model each task\n"
      "gets its pick; `kestrel export --model ... --zero-shot` compiles the same picks.");
  try {
    if (!args.parse(argc, argv, 2)) {
      std::cout << args.help();
      return 0;
    }
    set_log_level(args, "warn");
    ArgsSource source(args);
    bool from_set = args.has("workloads");
    bool from_model = args.has("model");
    // The cost model first: a missing or foreign file fails before anything starts.
    const frontend::CostModelUse cost_model_use = frontend::cost_model_use(source);
    const std::shared_ptr<const tuner::CrossModel>& cost_model = cost_model_use.model;
    ops::Registry registry = ops::builtin_ops();
    std::vector<tuner::TuneJob> jobs;
    std::shared_ptr<const model::Model> model;
    std::vector<model::Binding> buckets;
    if (from_model) {
      if (args.has("shape") || from_set) throw UsageError("give one of --model, --shape and --workloads");
      model = std::make_shared<const model::Model>(model::Model::load(args.get("model")));
      buckets = model::parse_buckets(model->graph().symbols(), args.get("buckets"));
    } else if (args.has("buckets") || args.has("block") || args.has("no-winograd")) {
      throw UsageError("--buckets, --block and --no-winograd go with --model");
    } else if (from_set) {
      if (args.has("shape")) throw UsageError("give either --shape or --workloads, not both");
      std::string op_override = args.has("op") ? args.get("op") : "";
      for (auto& w : ops::resolve_workload_sets(registry, args.get("workloads"), args.get("only"), op_override)) {
        jobs.push_back({std::move(w)});
      }
      if (jobs.empty()) throw UsageError("--workloads " + args.get("workloads") + " selects no workload");
    } else {
      if (args.has("only")) throw UsageError("--only selects workloads of a --workloads set");
      if (!args.has("shape")) throw UsageError("--shape or --workloads is required, e.g. --shape 512x512x512");
      const ops::Op& op = registry.get(args.get("op", "gemm"));
      jobs.push_back({"", &op, ops::parse_params(op, args.get("shape"))});
    }
    tuner::TuneOptions options = frontend::tune_options(source, from_model);
    host::PoolOptions pool = pool_options(args, "kestrel tune");
    if (args.has("http")) {
      if (pool.tracker) {
        throw UsageError("--http serves the embedded pool's dashboard; with --tracker open the tracker's dashboard "
                         "instead (kestrel tracker --http PORT)");
      }
      pool.http_port = static_cast<std::uint16_t>(args.get_int("http", 0, 1, 65535));
    }
    options.device_key = pool.key;
    const std::string db_arg = args.get("db", "kestrel.db");
    const std::string db_path = records::without_password(db_arg);  // what messages show
    // Zero-shot picks without verification record nothing: an existing database is read
    // (never written), and none is created.
    const bool measures = frontend::measures(cost_model_use);
    std::unique_ptr<records::RecordStore> db = frontend::open_session_records(db_arg, measures);

    TuneSessionOptions session_options;
    session_options.session.pool = pool;
    frontend::apply_session_options(source, session_options.session);
    session_options.session.tune = options;
    // One workload tuned with a cost model that has none for its op and target class: an
    // error before anything is measured (with --workloads each such workload says so).
    frontend::use_cost_model(session_options.session, cost_model_use, frontend::target_policy(source),
                             from_set || from_model ? nullptr : jobs.front().op, registry);
    session_options.session.registry = &registry;
    if (from_model) {
      const std::int64_t block = frontend::checked_block("--block", args.get_int("block", 0, 0, 64));
      frontend::tune_model_tasks(session_options.session, model, buckets, block, registry,
                                 [&](const std::vector<tuner::TuneJob>& made, const host::Target& target) {
                                   jobs = made;
                                   if (!session_options.quiet) {
                                     std::cerr << "tune: " << args.get("model") << ": " << jobs.size() << " tasks for "
                                               << target.to_string()
                                               << (buckets.size() > 1
                                                       ? " at " + std::to_string(buckets.size()) + " bucket sizes"
                                                       : "")
                                               << "\n";
                                   }
                                 },
                                 !args.has("no-winograd"));
    }
    // A pick without measurements has no progress to show.
    session_options.quiet = args.has("quiet") || args.has("json") || !measures;
    if (pool.http_port && !session_options.session.target) {  // (no pool starts for a zero-shot pick without a device)
      std::cerr << "kestrel tune: the dashboard will be at http://127.0.0.1:" << *pool.http_port
                << "/ once the embedded pool starts\n";
    }
    tuner::SessionResult session = run_tune_session(from_model ? std::vector<tuner::TuneJob>{} : jobs, *db, session_options);
    if (from_model && !args.has("json")) {
      if (cost_model_use.zero_shot && !measures) {
        print_model_picks(jobs, session, cost_model_use.path, args.get("model"));
      } else {
        print_model_summary(jobs, session, db_path);
      }
    } else if (args.has("json")) {
      if (from_model) {
        nlohmann::json list = nlohmann::json::array();
        for (const auto& r : session.results) list.push_back(frontend::to_json(r));
        auto seconds = [](std::chrono::steady_clock::duration d) { return std::chrono::duration<double>(d).count(); };
        nlohmann::json final_round = {{"full", session.final_full}, {"fewer_passes", session.final_fewer},
                                      {"skipped", session.final_skipped},
                                      {"reserved_s", seconds(session.final_reserved)},
                                      {"seconds", seconds(session.final_time)}};
        nlohmann::json out = {{"model", args.get("model")}, {"tasks", jobs.size()}, {"results", list},
                              {"final_round", final_round},
                              {"stop_reason", std::string(tuner::to_string(session.stop_reason))}, {"db", db_path},
                              {"interrupted", session.interrupted}};
        std::cout << out.dump(2) << "\n";
      } else if (!from_set) {
        nlohmann::json out = frontend::to_json(session.results.front());
        out["db"] = measures ? nlohmann::json(db_path) : nlohmann::json(nullptr);
        if (cost_model) out["model_file"] = cost_model_use.path;
        std::cout << out.dump(2) << "\n";
      } else {
        nlohmann::json list = nlohmann::json::array();
        for (std::size_t i = 0; i < session.results.size(); ++i) {
          nlohmann::json one = frontend::to_json(session.results[i]);
          one["label"] = jobs[i].label;
          list.push_back(std::move(one));
        }
        nlohmann::json out = {{"workloads", list},
                              {"db", measures ? nlohmann::json(db_path) : nlohmann::json(nullptr)},
                              {"interrupted", session.interrupted}};
        if (cost_model) out["model_file"] = cost_model_use.path;
        std::cout << out.dump(2) << "\n";
      }
    } else {
      for (std::size_t i = 0; i < session.results.size(); ++i) {
        if (from_set) std::cout << "\n== " << jobs[i].label;
        print_summary(session.results[i], db_path, cost_model_use.path);
      }
      if (from_set && session.results.size() < jobs.size()) {
        std::cout << "\n" << jobs.size() - session.results.size() << " workloads of the set were not tuned (interrupted)\n";
      }
    }
    return session.interrupted ? 130 : 0;
  } catch (...) {
    return report_error("kestrel tune", std::current_exception());
  }
}

}  // namespace kestrel::tools
