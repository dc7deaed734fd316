// `kestrel bench`: Kestrel's best kernels side by side with OpenBLAS and oneDNN. Parses
// the options, tunes first when asked (--tune-trials), runs the comparison harness
// (kestrel::compare) and prints its report as tables or JSON.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <thread>

#include "args.h"
#include "report_error.h"
#include "commands.h"
#include "kestrel/compare/harness.h"
#include "kestrel/host/target.h"
#include "kestrel/ops/workload_sets.h"
#include "kestrel/records/records.h"
#include "measure_args.h"
#include "tune_session.h"

namespace kestrel::tools {
namespace {

using compare::Problem;
using compare::Report;
using compare::Row;
using compare::Timing;
using compare::WorkloadReport;

std::string fixed(double value, int digits) {
  std::ostringstream out;
  out << std::fixed << std::setprecision(digits) << value;
  return out.str();
}

std::string first_line_of(const std::string& path, const std::string& key) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key, 0) == 0) {
      auto colon = line.find(':');
      if (colon == std::string::npos) return line;
      auto start = line.find_first_not_of(" \t", colon + 1);
      return start == std::string::npos ? "" : line.substr(start);
    }
  }
  return {};
}

std::string load_average() {
  std::ifstream in("/proc/loadavg");
  std::string a, b, c;
  in >> a >> b >> c;
  return a.empty() ? "unknown" : a + " " + b + " " + c;
}

std::vector<unsigned> parse_threads(const std::string& text) {
  std::vector<unsigned> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    std::size_t used = 0;
    long value = 0;
    try {
      value = std::stol(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != item.size() || value < 1 || value > 1024) {
      throw UsageError("--threads expects a list of thread counts such as 1,2; got '" + text + "'");
    }
    if (std::find(out.begin(), out.end(), static_cast<unsigned>(value)) == out.end()) {
      out.push_back(static_cast<unsigned>(value));
    }
  }
  if (out.empty()) throw UsageError("--threads expects a list of thread counts such as 1,2");
  return out;
}

std::string read_source_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw UsageError("cannot read --kernel-source " + path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// ---- output ----------------------------------------------------------------------------------

std::string cell(const Timing* t) {
  if (!t) return "-";
  if (t->status != "ok") return t->status.rfind("wrong answer", 0) == 0 ? "WRONG" : "FAILED";
  return fixed(t->gflops, 1);
}

std::string ratio_cell(const Timing& kestrel, const Timing* lib) {
  auto r = compare::speed_ratio(kestrel, lib);
  return r ? fixed(*r, 2) + "x" : "-";
}

void print_table(const std::vector<WorkloadReport>& prepared, const std::vector<Row>& rows, const std::vector<unsigned>& threads,
                 const std::vector<std::string>& columns) {
  std::size_t label_width = 8;
  for (const auto& w : prepared) label_width = std::max(label_width, w.workload.label.size() + 2);
  bool have_one_thread = std::find(threads.begin(), threads.end(), 1u) != threads.end();
  for (unsigned t : threads) {
    std::cout << "\nthreads: " << t << " (GFLOP/s of the median round";
    if (!columns.empty()) {
      std::cout << "; RATIO = Kestrel's speed / the library's, median of the per-round ratios; above 1: Kestrel is "
                   "faster";
    }
    std::cout << ")\n";
    std::cout << std::left << std::setw(static_cast<int>(label_width)) << "WORKLOAD" << std::right << std::setw(9)
              << "KESTREL";
    for (const auto& c : columns) {
      std::string upper = c;
      std::transform(upper.begin(), upper.end(), upper.begin(), [](unsigned char ch) { return std::toupper(ch); });
      std::cout << std::setw(12) << upper << std::setw(9) << "RATIO";
    }
    if (t != 1 && have_one_thread) std::cout << std::setw(10) << "VS 1T";
    std::cout << "  CONFIG\n";
    std::map<std::string, std::vector<double>> ratios;
    std::map<std::string, int> wins;
    for (const auto& row : rows) {
      if (row.threads != t) continue;
      const WorkloadReport& w = prepared[row.workload];
      std::cout << std::left << std::setw(static_cast<int>(label_width)) << w.workload.label << std::right
                << std::setw(9) << cell(&row.kestrel);
      for (const auto& c : columns) {
        auto it = row.libraries.find(c);
        const Timing* lib = it == row.libraries.end() ? nullptr : &it->second;
        std::cout << std::setw(12) << cell(lib) << std::setw(9) << ratio_cell(row.kestrel, lib);
        if (auto r = compare::speed_ratio(row.kestrel, lib)) {
          ratios[c].push_back(*r);
          if (*r > 1) ++wins[c];
        }
      }
      if (t != 1 && have_one_thread) {
        std::string scaling = "-";
        for (const auto& other : rows) {
          if (other.workload == row.workload && other.threads == 1 && other.kestrel.status == "ok" &&
              row.kestrel.status == "ok" && other.kestrel.gflops > 0) {
            scaling = fixed(row.kestrel.gflops / other.kestrel.gflops, 2) + "x";
          }
        }
        std::cout << std::setw(10) << scaling;
      }
      std::cout << "  " << w.choice.source << "\n";
    }
    for (const auto& c : columns) {
      const auto& list = ratios[c];
      if (list.empty()) continue;
      double log_sum = 0;
      for (double r : list) log_sum += std::log(r);
      std::cout << "geomean Kestrel/" << c << ": " << fixed(std::exp(log_sum / static_cast<double>(list.size())), 2)
                << "x over " << list.size() << " workloads (Kestrel faster on " << wins[c] << ")\n";
    }
  }
}

nlohmann::json timing_json(const Timing& t) {
  nlohmann::json j = {{"status", t.status}};
  if (!t.description.empty()) j["description"] = t.description;
  if (t.status == "ok") {
    j["gflops"] = t.gflops;
    j["median_s"] = t.median_s;
    j["round_seconds"] = t.rounds;
    j["calls_per_round"] = t.calls_per_round;
  }
  return j;
}

// The command as typed, preceded by the environment variables that change how the
// libraries run (so that the printed line reproduces the figures).
std::string command_line(int argc, char** argv) {
  std::string out;
  for (const char* name : {"OPENBLAS_CORETYPE", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "OMP_WAIT_POLICY",
                           "GOMP_SPINCOUNT", "OMP_PROC_BIND", "OMP_PLACES", "ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA",
                           "OPENBLAS_L2_SIZE"}) {
    if (const char* value = std::getenv(name)) out += std::string(name) + "=" + value + " ";
  }
  out += "kestrel";
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    bool quote = a.find_first_of(" \t'\"$;&|*?") != std::string::npos;
    out += " " + (quote ? "'" + a + "'" : a);
  }
  return out;
}

void list_sets() {
  for (const auto& set : ops::builtin_workload_sets()) {
    std::cout << set.name << ": " << set.description << "\n";
    for (const auto& e : set.entries) {
      std::cout << "  " << std::left << std::setw(22) << e.label << e.op << " " << e.shape << "\n";
    }
  }
}

}  // namespace

int run_bench(int argc, char** argv) {
  Args args("kestrel bench",
            "Times Kestrel's best kernels against OpenBLAS (cblas_sgemm, a loop of it for batch_matmul;\n"
            "im2col + sgemm for conv2d) and oneDNN (matmul, on 3-D tensors for batch_matmul, with its\n"
            "post-ops for gemm's epilogue; convolution on NCHW and on the layout oneDNN picks) in this process, on the\n"
            "same inputs, interleaved round by round, for each thread count; prints GFLOP/s and the\n"
            "ratio to each library. Kestrel's output is checked against a library's before it is timed.");
  args.option("workloads", "SETS", "named workload sets, e.g. gemm-square,gemm-skinny,resnet18-conv (--list-sets)");
  args.option("only", "LABELS", "with --workloads: only these workloads, by label (e.g. 1024,layer2.conv)");
  args.option("op", "NAME", "op of --shape; with --workloads, replaces the sets' op (same parameters)", "gemm");
  args.option("shape", "SHAPE", "one workload instead of sets, e.g. 1024x1024x1024");
  args.option("config", "CONFIG", "with --shape: time this configuration instead of the database's best");
  args.option("kernel-source", "FILE", "time this C kernel file instead of the op's own kernel (it gets the same "
                                       "#defines and arguments)");
  args.option("db", "FILE|URI", "records database the best configurations come from (SQLite file or PostgreSQL URI)",
              "kestrel.db");
  args.option("tune-trials", "N", "first tune every workload to N trials (into --db) on this machine");
  args.option("threads", "LIST", "thread counts to compare at", "1,2");
  args.option("repeat", "N", "timed rounds per contender (interleaved; the median is reported)", "7");
  args.option("min-round-ms", "MS", "each contender's share of a round lasts at least this long", "50");
  args.option("settle-ms", "MS", "pause after each contender in a round, so that library threads spinning for "
                                "work go idle before the next contender runs", "0 on 1 thread, 150 on more");
  args.option("seed", "N", "seed of the random inputs", "1");
  args.flag("list-sets", "list the named workload sets and exit");
  args.flag("json", "print the results as JSON");
  args.option("log-level", "LEVEL", "debug, info, warn, error or off", "warn");
  args.epilog(
      "A workload with no record in --db runs the op's default configuration and is labelled\n"
      "`default`; --tune-trials tunes such workloads first (tuning resumes: trials already\n"
      "recorded count). Configurations come from records of this machine's target only.\n"
      "OpenBLAS and oneDNN are optional build dependencies (libopenblas-dev, libdnnl-dev);\n"
      "without them only Kestrel's side is timed and the output says what is missing.\n"
      "oneDNN's reorders into its chosen layout (onednn-any) are done once, outside the timing.");
  try {
    if (!args.parse(argc, argv, 2)) {
      std::cout << args.help();
      return 0;
    }
    if (args.has("list-sets")) {
      list_sets();
      return 0;
    }
    set_log_level(args, "warn");
    ops::Registry registry = ops::builtin_ops();
    std::vector<ops::Workload> workloads;
    if (args.has("workloads")) {
      if (args.has("shape")) throw UsageError("give either --shape or --workloads, not both");
      if (args.has("config")) throw UsageError("--config goes with --shape (one workload)");
      workloads = ops::resolve_workload_sets(registry, args.get("workloads"), args.get("only"),
                                             args.has("op") ? args.get("op") : "");
    } else {
      if (args.has("only")) throw UsageError("--only selects workloads of a --workloads set");
      if (!args.has("shape")) throw UsageError("--workloads or --shape is required (see --list-sets)");
      const ops::Op& op = registry.get(args.get("op", "gemm"));
      ops::Params params = ops::parse_params(op, args.get("shape"));
      workloads.push_back({ops::describe_workload(op, params), &op, params});
    }
    std::vector<unsigned> threads = parse_threads(args.get("threads", "1,2"));
    compare::Options options;
    compare::TimingSettings& settings = options.timing;
    settings.repeat = static_cast<std::uint32_t>(args.get_int("repeat", 7, 1, 10'000));
    settings.min_round_s = static_cast<double>(args.get_int("min-round-ms", 50, 0, 600'000)) * 1e-3;
    if (args.has("settle-ms")) settings.settle_s = static_cast<double>(args.get_int("settle-ms", 0, 0, 60'000)) * 1e-3;
    auto seed = static_cast<std::uint64_t>(args.get_int("seed", 1, 0, INT64_MAX));
    std::string kernel_path = args.get("kernel-source");
    std::string kernel_text = kernel_path.empty() ? "" : read_source_file(kernel_path);
    for (const auto& w : workloads) {
      auto backends = w.op->backends();
      if (std::find(backends.begin(), backends.end(), ops::Backend::cpu) == backends.end()) {
        throw UsageError("op " + std::string(w.op->name()) + " has no CPU kernel to benchmark");
      }
    }

    host::Target target = host::parse_target("native");
    std::string db_path = args.get("db", "kestrel.db");
    std::vector<records::Best> best;
    std::unique_ptr<records::RecordStore> db;
    bool json = args.has("json");
    if (args.has("tune-trials")) {
      db = records::open_records(db_path);
      TuneSessionOptions tune_options;
      tune_options.session.pool.key = "local";
      tune_options.session.pool.client_name = "kestrel bench";
      tune_options.session.tune.trials = static_cast<std::size_t>(args.get_int("tune-trials", 0, 1, 100'000'000));
      tune_options.session.tune.measure.repeat = 5;
      tune_options.quiet = json;
      tune_options.program = "kestrel bench";
      std::vector<tuner::TuneJob> jobs;
      for (const auto& w : workloads) jobs.push_back({w});
      if (!json) {
        std::cerr << "kestrel bench: tuning " << jobs.size() << " workloads to " << tune_options.session.tune.trials
                  << " trials each into " << db->location() << "\n";
      }
      tuner::SessionResult tuned = run_tune_session(jobs, *db, tune_options);
      if (tuned.interrupted) {
        std::cerr << "kestrel bench: tuning interrupted; records so far are in " << db->location() << "\n";
        return 130;
      }
      best = db->best();
    } else if (records::records_exist(db_path)) {
      db = records::open_records(db_path, records::OpenMode::existing);
      best = db->best();
    } else if (args.has("db")) {
      throw UsageError("no records database at " + records::without_password(db_path));
    }

    compare::LibraryStatus libraries = compare::library_status();
    std::string cpu = first_line_of("/proc/cpuinfo", "model name");
    unsigned cores = std::max(1u, std::thread::hardware_concurrency());
    std::string load = load_average();
    std::string command = command_line(argc, argv);

    if (!json) {
      std::cout << "kestrel bench: " << (cpu.empty() ? "unknown CPU" : cpu) << ", " << cores << " cores, target "
                << target.to_string() << "\n";
      std::cout << "command: " << command << "\n";
      std::cout << "libraries: " << (libraries.openblas ? libraries.openblas_version : "no OpenBLAS") << "; "
                << (libraries.onednn ? libraries.onednn_version : "no oneDNN") << "\n";
      for (const auto& m : libraries.missing) std::cout << "note: " << m << "\n";
      for (const auto& m : libraries.notices) std::cout << "note: " << m << "\n";
      std::cout << "method: one process; each round times every contender in turn (rotating who goes first), "
                << settings.repeat << " rounds of >= " << fixed(settings.min_round_s * 1e3, 0)
                << " ms each after a warm-up";
      if (settings.settle_s) {
        if (*settings.settle_s > 0) std::cout << ", " << fixed(*settings.settle_s * 1e3, 0) << " ms pause after each";
      } else {
        std::cout << ", on more than 1 thread a " << fixed(settings.settle_for(2) * 1e3, 0)
                  << " ms pause after each (library threads go idle)";
      }
      std::cout << "; median per call\n";
      std::cout << "load average at start: " << load << "\n" << std::flush;
    }

    options.workloads = workloads;
    options.threads = threads;
    options.seed = seed;
    options.config = args.get("config");
    options.kernel_text = kernel_text;
    options.kernel_path = kernel_path;
    options.target = target;
    options.best = best;
    options.db = db.get();
    if (!json) {
      options.on_workload = [](const ops::Workload& w, unsigned t) {
        std::cerr << "kestrel bench: " << w.label << " on " << t << " thread" << (t == 1 ? "" : "s") << "\n";
      };
    }
    Report report = compare::run(options);
    const std::vector<WorkloadReport>& prepared = report.workloads;
    const std::vector<Row>& rows = report.rows;
    const std::vector<std::string>& notes = report.notes;

    std::vector<std::string> columns;
    for (const auto& c : compare::library_columns()) {
      bool used = std::any_of(rows.begin(), rows.end(), [&](const Row& r) { return r.libraries.contains(c); });
      if (used) columns.push_back(c);
    }

    if (json) {
      nlohmann::json out;
      out["command"] = command;
      out["machine"] = {{"cpu", cpu}, {"cores", cores}, {"target", target.to_string()}, {"load_average", load}};
      out["libraries"] = {{"openblas", libraries.openblas ? nlohmann::json(libraries.openblas_version) : nullptr},
                          {"onednn", libraries.onednn ? nlohmann::json(libraries.onednn_version) : nullptr},
                          {"missing", libraries.missing},
                          {"notices", libraries.notices}};
      out["settings"] = {{"repeat", settings.repeat},
                         {"min_round_ms", settings.min_round_s * 1e3},
                         {"settle_ms_one_thread", settings.settle_for(1) * 1e3},
                         {"settle_ms_more_threads", settings.settle_for(2) * 1e3},
                         {"seed", seed}};
      nlohmann::json list = nlohmann::json::array();
      for (const auto& row : rows) {
        const WorkloadReport& w = prepared[row.workload];
        nlohmann::json libs = nlohmann::json::object();
        for (const auto& [name, t] : row.libraries) {
          libs[name] = timing_json(t);
          if (auto r = compare::speed_ratio(row.kestrel, &t)) libs[name]["ratio"] = *r;
        }
        nlohmann::json kestrel = timing_json(row.kestrel);
        kestrel["config"] = ops::format_config(w.choice.config);
        kestrel["config_source"] = w.choice.source;
        kestrel["config_detail"] = w.choice.detail;
        list.push_back({{"label", w.workload.label},
                        {"op", std::string(w.workload.op->name())},
                        {"workload", ops::format_params(w.workload.params)},
                        {"threads", row.threads},
                        {"flops", w.workload.op->flops(w.workload.params)},
                        {"checked_against", row.checked_against},
                        {"kestrel", kestrel},
                        {"libraries", libs}});
      }
      out["results"] = list;
      out["notes"] = notes;
      std::cout << out.dump(2) << "\n";
    } else {
      print_table(prepared, rows, threads, columns);
      std::cout << "\nworkloads:\n";
      for (const auto& w : prepared) {
        std::cout << "  " << w.workload.label << ": " << w.text << "; " << w.choice.source << " config "
                  << ops::format_config(w.choice.config) << " (" << w.choice.detail << ")\n";
      }
      std::map<std::string, std::string> descriptions;
      for (const auto& row : rows) {
        for (const auto& [name, t] : row.libraries) {
          std::string kind(compare::to_string(prepared[row.workload].problem->kind));
          descriptions.emplace(name + " (" + kind + ")", t.description);
        }
      }
      if (!descriptions.empty()) std::cout << "\ncontenders (first workload of each kind):\n";
      for (const auto& [name, d] : descriptions) std::cout << "  " << name << ": " << d << "\n";
      std::set<std::string> failures;
      for (const auto& row : rows) {
        const WorkloadReport& w = prepared[row.workload];
        if (row.kestrel.status != "ok") {
          failures.insert(w.workload.label + ": kestrel: " + row.kestrel.status);
        }
        for (const auto& [name, t] : row.libraries) {
          if (t.status != "ok") failures.insert(w.workload.label + ": " + name + ": " + t.status);
        }
        if (row.checked_against.empty() && row.kestrel.status == "ok") {
          failures.insert(w.workload.label + ": kestrel's output was not checked (no library or reference)");
        }
      }
      for (const auto& f : failures) std::cout << "problem: " << f << "\n";
      for (const auto& n : notes) std::cout << "note: " << n << "\n";
    }
    bool wrong = std::any_of(rows.begin(), rows.end(), [](const Row& r) { return r.kestrel.status != "ok"; });
    return wrong ? 1 : 0;
  } catch (...) {
    return report_error("kestrel bench", std::current_exception());
  }
}

}  // namespace kestrel::tools
