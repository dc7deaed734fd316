// `kestrel bench`: Kestrel's best kernels side by side with OpenBLAS and oneDNN. For each
// workload it takes the best configuration from the records database (tuning it first
// when asked), compiles it for this machine, loads it into this process, checks its
// output against a library's (or the op's reference kernel), and times it interleaved
// with the libraries on the same inputs, for each thread count.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include "args.h"
#include "bench_kernel.h"
#include "bench_libraries.h"
#include "commands.h"
#include "kestrel/device_runtime/kernel_services.h"
#include "kestrel/host/compiler.h"
#include "kestrel/host/target.h"
#include "kestrel/ops/workload_sets.h"
#include "kestrel/rpc/errors.h"
#include "kestrel/tuner/records.h"
#include "kestrel/tuner/strategy.h"
#include "measure_args.h"
#include "tune_session.h"

namespace kestrel::tools {
namespace {

using bench::Contender;
using bench::FloatBuffer;
using bench::Problem;

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

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

// Compares an output with the expected one: empty when every element is within
// tol * (1 + |expected|), else what differs first and the largest error.
std::string compare(std::span<const float> got, std::span<const float> want, double tolerance) {
  if (got.size() != want.size()) {
    return "output has " + std::to_string(got.size()) + " elements, expected " + std::to_string(want.size());
  }
  double max_error = 0;
  std::size_t first = got.size();
  for (std::size_t i = 0; i < got.size(); ++i) {
    double e = want[i], g = got[i];
    double err = std::fabs(g - e);
    if (!(err <= tolerance * (1.0 + std::fabs(e)))) {
      if (first == got.size()) first = i;
      max_error = std::isnan(err) ? INFINITY : std::max(max_error, err);
    }
  }
  if (first == got.size()) return {};
  std::ostringstream out;
  out << "wrong answer: max error " << std::setprecision(3) << max_error << " exceeds tolerance " << tolerance
      << "; element " << first << " is " << std::setprecision(6) << got[first] << ", expected " << want[first];
  return out.str();
}

// ---- the Kestrel side ------------------------------------------------------------------

// Where a workload's configuration came from.
struct ConfigChoice {
  ops::Config config;
  std::string source;  // "db", "default", "--config"
  std::string detail;  // e.g. "best of 200 trials, 95.1 GFLOP/s when tuned"
};

// One workload, prepared once for every thread count: inputs, the compiled kernel, and
// (when needed) the op reference kernel's output.
struct Prepared {
  ops::Workload workload;
  std::string text;  // describe_workload
  std::optional<Problem> problem;
  bool canonical = false;
  ConfigChoice choice;
  std::vector<FloatBuffer> buffers;  // the op's tensors, in argument order
  std::vector<kestrel_arg> args;
  std::size_t output_index = 0;
  std::unique_ptr<bench::LoadedKernel> kernel;
  std::unique_ptr<bench::LoadedKernel> reference;
  std::optional<FloatBuffer> reference_output;
  std::vector<FloatBuffer> library_inputs;  // when the op's layout is not the canonical one
  std::string error;                       // compile or load failure: no Kestrel figures
};

class KestrelContender final : public Contender {
 public:
  KestrelContender(Prepared& w, device::KernelServices& services) : w_(w), services_(services) {}
  std::string name() const override { return "kestrel"; }
  std::string description() const override { return "Kestrel kernel " + ops::format_config(w_.choice.config); }
  void run() override {
    std::int32_t rc = w_.kernel->call(services_.table(), w_.args);
    if (rc != 0) throw std::runtime_error("the Kestrel kernel returned error code " + std::to_string(rc));
  }
  std::span<const float> output() override { return w_.buffers[w_.output_index].view(); }

 private:
  Prepared& w_;
  device::KernelServices& services_;
};

// ---- results ------------------------------------------------------------------------------

struct Timing {
  std::string name, description;
  std::string status = "ok";  // "ok", or why there is no figure
  double median_s = 0;
  double gflops = 0;
  std::vector<double> rounds;
  std::uint64_t calls_per_round = 0;
};

struct Row {
  std::size_t workload = 0;  // index into the prepared list
  unsigned threads = 1;
  Timing kestrel;
  std::map<std::string, Timing> libraries;
  std::string checked_against;
};

const std::vector<std::string> kLibraryColumns = {"openblas", "onednn", "onednn-any"};

struct Settings {
  std::uint32_t repeat = 7;
  double min_round_s = 0.05;
  std::optional<double> settle_s;  // pause after each contender's share of a round; none: auto
  // OpenBLAS's idle threads spin (yielding) for about 2^28 cycles after a call, OpenMP's
  // for a while too: on more than one thread, pause long enough for them to go to sleep.
  double settle_for(unsigned threads) const { return settle_s ? *settle_s : threads > 1 ? 0.15 : 0.0; }
};

// Warm-up and correctness, then interleaved rounds.
void time_contenders(std::vector<Contender*> contenders, std::vector<Timing*> timings, double flops,
                     device::KernelServices& services, const Settings& settings) {
  const double settle = settings.settle_for(services.threads());
  std::vector<std::uint64_t> number(contenders.size(), 1);
  for (std::size_t i = 0; i < contenders.size(); ++i) {
    // A second warm call estimates the per-call time; a round lasts min_round_s.
    double start = now_seconds();
    contenders[i]->run();
    double single = std::max(now_seconds() - start, 1e-9);
    number[i] = static_cast<std::uint64_t>(std::clamp(std::ceil(settings.min_round_s / single), 1.0, 1e6));
    timings[i]->calls_per_round = number[i];
  }
  services.reclaim_scratch();
  std::size_t n = contenders.size();
  for (std::uint32_t round = 0; round < settings.repeat; ++round) {
    for (std::size_t j = 0; j < n; ++j) {
      std::size_t i = (j + round) % n;  // rotate who goes first
      // After a pause the second core may have gone idle (a virtual CPU is descheduled):
      // one untimed call wakes it and the contender's threads before the timed ones.
      if (settle > 0) contenders[i]->run();
      double start = now_seconds();
      for (std::uint64_t call = 0; call < number[i]; ++call) contenders[i]->run();
      double per_call = (now_seconds() - start) / static_cast<double>(number[i]);
      services.reclaim_scratch();
      timings[i]->rounds.push_back(per_call);
      // Library threads that spin-wait for more work (OpenBLAS, OpenMP) would otherwise
      // compete with the next contender.
      if (settle > 0) std::this_thread::sleep_for(std::chrono::duration<double>(settle));
    }
  }
  for (auto* t : timings) {
    t->median_s = median(t->rounds);
    t->gflops = t->median_s > 0 ? flops / t->median_s * 1e-9 : 0;
  }
}

Row bench_workload(Prepared& w, std::size_t index, unsigned threads, device::KernelServices& services,
                   const Settings& settings, std::vector<std::string>& notes) {
  Row row;
  row.workload = index;
  row.threads = threads;
  row.kestrel.name = "kestrel";
  if (!w.error.empty()) {
    row.kestrel.status = w.error;
  }
  const ops::Op& op = *w.workload.op;
  double flops = op.flops(w.workload.params);
  double tolerance = op.tolerance(w.workload.params);

  std::vector<std::unique_ptr<Contender>> libraries;
  if (w.problem) {
    std::vector<const float*> inputs;
    if (w.canonical) {
      for (std::size_t i = 0; i < w.buffers.size(); ++i) {
        if (i != w.output_index) inputs.push_back(w.buffers[i].data());
      }
    } else {
      for (auto& b : w.library_inputs) inputs.push_back(b.data());
    }
    libraries = bench::make_contenders(*w.problem, inputs, notes);
  }
  for (auto& lib : libraries) {
    Timing t;
    t.name = lib->name();
    t.description = lib->description();
    row.libraries[t.name] = t;
  }

  // Correctness: every contender's first run is checked against the expected output: the
  // first library's when the layouts match (the other libraries are checked against it
  // too, so a harness mistake shows as a library's wrong answer), else the op's
  // reference kernel's.
  std::optional<std::vector<float>> expected;
  std::string expected_from;
  std::vector<Contender*> timed;
  std::vector<Timing*> timings;
  if (w.canonical && !libraries.empty()) {
    libraries.front()->run();
    auto out = libraries.front()->output();
    expected.emplace(out.begin(), out.end());
    expected_from = libraries.front()->name();
  } else if (w.reference_output) {
    expected.emplace(w.reference_output->view().begin(), w.reference_output->view().end());
    expected_from = "the op's reference kernel";
  }
  row.checked_against = expected_from;
  KestrelContender kestrel(w, services);
  if (w.error.empty()) {
    std::string problem;
    try {
      std::fill(w.buffers[w.output_index].data(), w.buffers[w.output_index].data() + w.buffers[w.output_index].size(),
                std::nanf(""));
      kestrel.run();
      services.reclaim_scratch();
      if (expected) problem = compare(kestrel.output(), *expected, tolerance);
    } catch (const std::exception& e) {
      problem = e.what();
    }
    if (problem.empty()) {
      timed.push_back(&kestrel);
      timings.push_back(&row.kestrel);
    } else {
      row.kestrel.status = problem;
    }
  }
  for (auto& lib : libraries) {
    Timing& t = row.libraries[lib->name()];
    lib->run();
    if (w.canonical && expected) {
      std::string problem = compare(lib->output(), *expected, tolerance);
      if (!problem.empty()) {
        t.status = problem;
        continue;
      }
    }
    timed.push_back(lib.get());
    timings.push_back(&t);
  }
  if (!timed.empty()) time_contenders(timed, timings, flops, services, settings);
  return row;
}

// ---- preparing workloads -------------------------------------------------------------------

std::string read_source_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw UsageError("cannot read --kernel-source " + path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

ConfigChoice choose_config(const ops::Op& op, const ops::Params& params, const std::string& target,
                           const std::vector<tuner::Best>& best, const tuner::RecordStore* db,
                           const std::string& explicit_config) {
  ConfigChoice choice;
  if (!explicit_config.empty()) {
    choice.config = ops::parse_config(op, params, explicit_config);
    choice.source = "--config";
    return choice;
  }
  for (const auto& b : best) {
    if (b.op != op.name() || b.workload != params || b.target != target) continue;
    const std::string recorded = ops::format_config(b.record.config);
    try {
      choice.config = ops::parse_config(op, params, recorded);
    } catch (const ops::OpError& e) {
      // The op changed since it was tuned (a knob renamed or its domain narrowed).
      choice.detail = "the recorded best (" + recorded + ") is no longer valid: " + e.what();
      break;
    }
    if (std::string why = op.check(params, choice.config); !why.empty()) {
      choice.detail = "the recorded best (" + recorded + ") is no longer valid: " + why;
      break;
    }
    choice.source = "db";
    std::size_t trials = b.trials;
    if (db) {
      auto records = db->find(b.op, b.workload, b.target, &b.device_class);
      trials = static_cast<std::size_t>(
          std::count_if(records.begin(), records.end(), [](const tuner::Record& r) { return !r.final_measurement; }));
    }
    choice.detail = "best of " + std::to_string(trials) + " trials, " + fixed(b.record.gflops, 1) +
                    " GFLOP/s when tuned";
    return choice;
  }
  choice.config = op.default_config(params);
  choice.source = "default";
  if (choice.detail.empty()) choice.detail = "no record for this workload and target";
  return choice;
}

void prepare(Prepared& w, host::Compiler& compiler, const host::Target& target, const std::string& kernel_text,
             const std::string& kernel_path, std::uint64_t seed, device::KernelServices& services) {
  const ops::Op& op = *w.workload.op;
  const ops::Params& params = w.workload.params;
  w.problem = bench::problem_for(op, params);
  w.canonical = w.problem && bench::canonical_layout(op, params, *w.problem);
  auto tensors = op.tensors(params);
  std::uint64_t input = 0;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    w.buffers.emplace_back(tensors[i].elements());
    if (tensors[i].role == ops::Role::input) bench::fill_random(w.buffers.back(), seed + input++);
    else w.output_index = i;
    w.args.push_back(kestrel_arg{w.buffers.back().data(), tensors[i].elements(), 0.0});
  }
  if (w.problem && !w.canonical) {
    std::uint64_t s = seed + 100;
    for (const auto& shape : w.problem->input_shapes()) {
      std::int64_t n = 1;
      for (auto d : shape) n *= d;
      w.library_inputs.emplace_back(n);
      bench::fill_random(w.library_inputs.back(), s++);
    }
  }
  try {
    ops::KernelSource source = op.source(ops::Backend::cpu, params, w.choice.config);
    if (!kernel_text.empty()) {
      source.text = kernel_text;
      source.file_name = kernel_path;
    }
    host::CompileResult compiled = compiler.compile({source, target, 3});
    if (!compiled.ok) {
      w.error = "compile error: " + compiled.diagnostics.substr(0, 400);
      return;
    }
    w.kernel = std::make_unique<bench::LoadedKernel>(compiled.shared_object, std::string(op.name()));
  } catch (const std::exception& e) {
    w.error = e.what();
    return;
  }
  // Without a library of the same layout, the op's reference kernel checks Kestrel.
  bench::LibraryStatus libraries = bench::library_status();
  if (w.canonical && (libraries.openblas || libraries.onednn)) return;
  host::CompileResult ref = compiler.compile({op.reference(params), target, 2});
  if (!ref.ok) {
    w.error = "reference kernel: compile error: " + ref.diagnostics.substr(0, 400);
    return;
  }
  w.reference = std::make_unique<bench::LoadedKernel>(ref.shared_object, std::string(op.name()) + "-ref");
  std::int32_t rc = w.reference->call(services.table(), w.args);
  services.reclaim_scratch();
  if (rc != 0) {
    w.error = "reference kernel returned " + std::to_string(rc);
    return;
  }
  w.reference_output.emplace(w.buffers[w.output_index].size());
  std::copy(w.buffers[w.output_index].data(), w.buffers[w.output_index].data() + w.buffers[w.output_index].size(),
            w.reference_output->data());
}

// ---- output ----------------------------------------------------------------------------------

std::string cell(const Timing* t) {
  if (!t) return "-";
  if (t->status != "ok") return t->status.rfind("wrong answer", 0) == 0 ? "WRONG" : "FAILED";
  return fixed(t->gflops, 1);
}

// Kestrel's speed over the library's: the median over rounds of the ratio within each
// round (the two ran next to each other, so a load change on a shared machine cancels
// out); the ratio of the medians if the round counts differ. Null without two figures.
std::optional<double> speed_ratio(const Timing& kestrel, const Timing* lib) {
  if (!lib || lib->status != "ok" || kestrel.status != "ok" || lib->median_s <= 0 || kestrel.median_s <= 0) {
    return std::nullopt;
  }
  if (lib->rounds.size() != kestrel.rounds.size()) return lib->median_s / kestrel.median_s;
  std::vector<double> per_round;
  for (std::size_t i = 0; i < lib->rounds.size(); ++i) per_round.push_back(lib->rounds[i] / kestrel.rounds[i]);
  return median(per_round);
}

std::string ratio_cell(const Timing& kestrel, const Timing* lib) {
  auto r = speed_ratio(kestrel, lib);
  return r ? fixed(*r, 2) + "x" : "-";
}

void print_table(const std::vector<Prepared>& prepared, const std::vector<Row>& rows, const std::vector<unsigned>& threads,
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
      const Prepared& w = prepared[row.workload];
      std::cout << std::left << std::setw(static_cast<int>(label_width)) << w.workload.label << std::right
                << std::setw(9) << cell(&row.kestrel);
      for (const auto& c : columns) {
        auto it = row.libraries.find(c);
        const Timing* lib = it == row.libraries.end() ? nullptr : &it->second;
        std::cout << std::setw(12) << cell(lib) << std::setw(9) << ratio_cell(row.kestrel, lib);
        if (auto r = speed_ratio(row.kestrel, lib)) {
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
            "Times Kestrel's best kernels against OpenBLAS (cblas_sgemm; im2col + sgemm for conv2d) and\n"
            "oneDNN (matmul; convolution on NCHW and on the layout oneDNN picks) in this process, on the\n"
            "same inputs, interleaved round by round, for each thread count; prints GFLOP/s and the\n"
            "ratio to each library. Kestrel's output is checked against a library's before it is timed.");
  args.option("workloads", "SETS", "named workload sets, e.g. gemm-square,gemm-skinny,resnet18-conv (--list-sets)");
  args.option("only", "LABELS", "with --workloads: only these workloads, by label (e.g. 1024,layer2.conv)");
  args.option("op", "NAME", "op of --shape; with --workloads, replaces the sets' op (same parameters)", "gemm");
  args.option("shape", "SHAPE", "one workload instead of sets, e.g. 1024x1024x1024");
  args.option("config", "CONFIG", "with --shape: time this configuration instead of the database's best");
  args.option("kernel-source", "FILE", "time this C kernel file instead of the op's own kernel (it gets the same "
                                       "#defines and arguments)");
  args.option("db", "FILE", "records database the best configurations come from", "kestrel.db");
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
    Settings settings;
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
    std::vector<tuner::Best> best;
    std::unique_ptr<tuner::RecordStore> db;
    bool json = args.has("json");
    if (args.has("tune-trials")) {
      db = tuner::open_records(db_path);
      TuneSessionOptions options;
      options.session.pool.key = "local";
      options.session.pool.client_name = "kestrel bench";
      options.session.tune.trials = static_cast<std::size_t>(args.get_int("tune-trials", 0, 1, 100'000'000));
      options.session.tune.measure.repeat = 5;
      options.quiet = json;
      options.program = "kestrel bench";
      std::vector<tuner::TuneJob> jobs;
      for (const auto& w : workloads) jobs.push_back({w.label, w.op, w.params});
      if (!json) std::cerr << "kestrel bench: tuning " << jobs.size() << " workloads to " << options.session.tune.trials
                           << " trials each into " << db_path << "\n";
      tuner::SessionResult tuned = run_tune_session(jobs, *db, options);
      if (tuned.interrupted) {
        std::cerr << "kestrel bench: tuning interrupted; records so far are in " << db_path << "\n";
        return 130;
      }
      best = db->best();
    } else if (::access(db_path.c_str(), F_OK) == 0) {
      db = tuner::open_records(db_path, tuner::OpenMode::existing);
      best = db->best();
    } else if (args.has("db")) {
      throw UsageError("no records database at " + db_path);
    }

    bench::LibraryStatus libraries = bench::library_status();
    std::vector<std::string> notes;
    for (const auto& m : libraries.missing) notes.push_back(m);
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

    host::Compiler compiler;
    std::vector<Prepared> prepared(workloads.size());
    std::vector<Row> rows;
    {
      // Reference outputs are computed on one thread, before timing.
      device::KernelServices services(1);
      for (std::size_t i = 0; i < workloads.size(); ++i) {
        Prepared& w = prepared[i];
        w.workload = workloads[i];
        w.text = ops::describe_workload(*w.workload.op, w.workload.params);
        w.choice = choose_config(*w.workload.op, w.workload.params, target.to_string(), best, db.get(),
                                 args.get("config"));
        if (!kernel_path.empty()) {
          w.choice.detail = "kernel " + kernel_path + " with the " + w.choice.source + " config";
          w.choice.source = "file";
        }
        prepare(w, compiler, target, kernel_text, kernel_path, seed, services);
      }
    }
    for (unsigned t : threads) {
      device::KernelServices services(t);
      bench::set_library_threads(t);
      for (std::size_t i = 0; i < prepared.size(); ++i) {
        if (!json) {
          std::cerr << "kestrel bench: " << prepared[i].workload.label << " on " << t << " thread"
                    << (t == 1 ? "" : "s") << "\n";
        }
        rows.push_back(bench_workload(prepared[i], i, t, services, settings, notes));
      }
    }

    std::vector<std::string> columns;
    for (const auto& c : kLibraryColumns) {
      bool used = std::any_of(rows.begin(), rows.end(), [&](const Row& r) { return r.libraries.contains(c); });
      if (used) columns.push_back(c);
    }
    std::sort(notes.begin(), notes.end());
    notes.erase(std::unique(notes.begin(), notes.end()), notes.end());

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
        const Prepared& w = prepared[row.workload];
        nlohmann::json libs = nlohmann::json::object();
        for (const auto& [name, t] : row.libraries) {
          libs[name] = timing_json(t);
          if (auto r = speed_ratio(row.kestrel, &t)) libs[name]["ratio"] = *r;
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
          std::string kind = prepared[row.workload].problem->kind == Problem::Kind::gemm ? "gemm" : "conv2d";
          descriptions.emplace(name + " (" + kind + ")", t.description);
        }
      }
      if (!descriptions.empty()) std::cout << "\ncontenders (first workload of each kind):\n";
      for (const auto& [name, d] : descriptions) std::cout << "  " << name << ": " << d << "\n";
      std::set<std::string> failures;
      for (const auto& row : rows) {
        const Prepared& w = prepared[row.workload];
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
  } catch (const UsageError& e) {
    std::cerr << "kestrel bench: " << e.what() << "\n(see kestrel bench --help)\n";
    return 2;
  } catch (const ops::OpError& e) {
    std::cerr << "kestrel bench: " << e.what() << "\n";
    return 2;
  } catch (const tuner::RecordsError& e) {
    std::cerr << "kestrel bench: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "kestrel bench: " << e.what() << "\n";
    return 1;
  }
}

}  // namespace kestrel::tools
