// `kestrel run`: executes a model with Kestrel's kernels (an exported library, or kernels
// compiled here at the ops' defaults) and portable implementations for the rest, checks
// its outputs against ONNX Runtime's on the same seeded random inputs, and reports both
// latencies at the same thread count.
#include <stdlib.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iomanip>
#include <iostream>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "args.h"
#include "report_error.h"
#include "python_tool.h"
#include "commands.h"
#include "kestrel/base/stats.h"
#include "kestrel/deploy/kernel_provider.h"
#include "kestrel/deploy/runner.h"
#include "kestrel/host/target.h"
#include "kestrel/records/config_choice.h"
#include "kestrel/model/buckets.h"
#include "kestrel/model/graph.h"
#include "kestrel/model/tasks.h"

namespace kestrel::tools {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr double kDefaultTolerance = 1e-3;

struct Latency {
  double median_ms = 0, min_ms = 0;
  int runs = 0;
};

// Run-time failures after the arguments were accepted (exit 1).
struct RunError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Uniform in [-1, 1) from a seed (splitmix64), one stream per input.
void fill_random(deploy::AlignedFloats& values, std::uint64_t seed) {
  std::uint64_t state = seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull;
  for (float& v : values) {
    std::uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    v = static_cast<float>(static_cast<double>(z >> 40) / static_cast<double>(1ull << 24) * 2.0 - 1.0);
  }
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The block the exported library's convolutions were built for (its manifest).
std::int64_t manifest_block(const std::string& dir) {
  fs::path path = fs::path(dir) / "manifest.json";
  if (!fs::exists(path)) throw UsageError("no " + path.string() + ": is " + dir + " the output of kestrel export?");
  try {
    json m = json::parse(read_file(path));
    return m.at("block").get<std::int64_t>();
  } catch (const json::exception& e) {
    throw UsageError("cannot read the block from " + path.string() + ": " + e.what());
  }
}

// "AMD EPYC (2 cores)": this machine, for the latency figures' context.
std::string machine_text() {
  std::ifstream in("/proc/cpuinfo");
  std::string line, model;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0 || line.rfind("Model", 0) == 0) {
      auto colon = line.find(':');
      if (colon != std::string::npos) model = line.substr(colon + 2);
      break;
    }
  }
  unsigned cores = std::thread::hardware_concurrency();
  return (model.empty() ? "unknown CPU" : model) + " (" + std::to_string(cores) + (cores == 1 ? " core)" : " cores)");
}

Latency time_runs(const std::function<void()>& run, int repeat) {
  std::vector<double> ms;
  for (int i = 0; i < repeat; ++i) {
    auto start = std::chrono::steady_clock::now();
    run();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  }
  const stats::Summary s = stats::summarize(ms);
  Latency l;
  l.runs = repeat;
  l.min_ms = s.min;
  l.median_ms = s.median;
  return l;
}

struct OrtResult {
  bool available = false;
  std::string why;  // when not available
  std::map<std::string, deploy::Tensor> outputs;
  Latency latency;
  std::string version;
};

OrtResult run_ort(const std::string& python, const std::string& script, const std::string& model_path,
                  const std::map<std::string, deploy::Tensor>& inputs, int threads, int repeat, const fs::path& dir) {
  std::string command = shell_quote(python) + " " + shell_quote(script) + " " + shell_quote(model_path);
  for (const auto& [name, t] : inputs) {
    const fs::path file = dir / ("input_" + std::to_string(std::distance(inputs.begin(), inputs.find(name))) + ".bin");
    std::ofstream out(file, std::ios::binary);
    out.write(reinterpret_cast<const char*>(t.f32.data()), static_cast<std::streamsize>(t.f32.size() * sizeof(float)));
    if (!out) throw RunError("cannot write " + file.string());
    std::string dims;
    for (auto d : t.shape) dims += (dims.empty() ? "" : ",") + std::to_string(d);
    command += " --input " + shell_quote(name + "=" + file.string() + "@" + dims);
  }
  const fs::path err = dir / "ort_stderr.txt";
  command += " --out-dir " + shell_quote((dir / "ort").string()) + " --threads " + std::to_string(threads) + " --repeat " +
             std::to_string(repeat) + " 2> " + shell_quote(err.string());
  if (!fs::exists(script)) {
    OrtResult missing;
    missing.why = "no script " + script + " (give its path with --ort-script)";
    return missing;
  }
  std::string stdout_text;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (!pipe) throw RunError("cannot start " + python);
  char buffer[4096];
  std::size_t n = 0;
  while ((n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0) stdout_text.append(buffer, n);
  int status = ::pclose(pipe);
  int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128;
  std::string err_text = read_file(err);
  while (!err_text.empty() && (err_text.back() == '\n' || err_text.back() == ' ')) err_text.pop_back();
  OrtResult r;
  if (code == 3 || code == 126 || code == 127) {
    r.why = code == 3 ? err_text : python + (code == 127 ? " was not found" : " cannot be run");
    return r;
  }
  if (code != 0) throw RunError("onnxruntime failed (" + script + ", exit " + std::to_string(code) + "): " + err_text);
  json j;
  try {
    j = json::parse(stdout_text);
  } catch (const json::exception&) {
    throw RunError("unexpected output from " + script + ": " + stdout_text.substr(0, 300));
  }
  r.available = true;
  r.version = j.value("onnxruntime", "");
  r.latency.median_ms = j["latency_ms"]["median"].get<double>();
  r.latency.min_ms = j["latency_ms"]["min"].get<double>();
  r.latency.runs = j["latency_ms"]["runs"].get<int>();
  for (const auto& o : j["outputs"]) {
    deploy::Tensor t;
    t.shape = o["shape"].get<std::vector<std::int64_t>>();
    t.f32.resize(static_cast<std::size_t>(t.elements()));
    std::ifstream in(o["file"].get<std::string>(), std::ios::binary);
    in.read(reinterpret_cast<char*>(t.f32.data()), static_cast<std::streamsize>(t.f32.size() * sizeof(float)));
    if (!in) throw RunError("cannot read onnxruntime's output " + o["file"].get<std::string>());
    r.outputs[o["name"].get<std::string>()] = std::move(t);
  }
  return r;
}

struct Comparison {
  std::string name;
  std::vector<std::int64_t> shape;
  double max_abs = 0, magnitude = 0, relative = 0;
  bool ok = false;
  std::string problem;
};

Comparison compare(const std::string& name, const deploy::Tensor& got, const deploy::Tensor* want, double tolerance) {
  Comparison c;
  c.name = name;
  c.shape = got.shape;
  if (!want) {
    c.problem = "onnxruntime has no output " + name;
    return c;
  }
  if (want->shape != got.shape) {
    c.problem = "shape " + deploy::shape_text(got.shape) + ", onnxruntime's is " + deploy::shape_text(want->shape);
    return c;
  }
  for (std::size_t i = 0; i < got.f32.size(); ++i) {
    double d = std::abs(static_cast<double>(got.f32[i]) - want->f32[i]);
    c.max_abs = std::isnan(d) ? INFINITY : std::max(c.max_abs, d);
    c.magnitude = std::max(c.magnitude, std::abs(static_cast<double>(want->f32[i])));
  }
  c.relative = c.max_abs / std::max(c.magnitude, 1e-30);
  c.ok = c.relative <= tolerance;
  if (!c.ok) {
    std::ostringstream s;
    s << "max error " << c.max_abs << " is " << c.relative << " of the output's magnitude " << c.magnitude
      << ", above the tolerance " << tolerance;
    c.problem = s.str();
  }
  return c;
}

}  // namespace

int run_model(int argc, char** argv) {
  Args args("kestrel run",
            "Runs an ONNX model with Kestrel's kernels for its tuned operators (from an exported\n"
            "library with --kernels, else compiled here: at each task's best record of --db, chosen\n"
            "as kestrel export chooses, or the op's default configuration) and\n"
            "portable implementations for the rest, on seeded random inputs. Checks the outputs\n"
            "against ONNX Runtime's (scripts/ort_run.py; install it with scripts/setup-python.sh):\n"
            "pass when the largest absolute difference is at most --tolerance times the largest\n"
            "magnitude of ONNX Runtime's output. Reports the median latency of both at the same\n"
            "thread count. Exit status: 0 match, 1 mismatch or failure, 2 bad input or no ONNX\n"
            "Runtime (unless --no-check).");
  args.option("model", "FILE", "the ONNX model");
  args.option("kernels", "DIR", "an exported kernel library (kestrel export -o DIR)");
  args.option("db", "FILE|URI", "records (from kestrel tune) whose best configurations the kernels compiled here "
                                "use; tasks without a record use the op's default");
  args.option("key", "KEY", "with --db: only records measured on devices of this pool key");
  args.option("threads", "N", "threads of Kestrel's kernels and of ONNX Runtime (intra-op)", "1");
  args.option("shape", "SYM=N", "values of the model's symbolic dimensions, e.g. seq=50");
  args.option("repeat", "R", "timed runs of each (after one untimed run)", "10");
  args.option("seed", "S", "seed of the random inputs", "1");
  args.option("tolerance", "T", "allowed max error relative to the output's largest magnitude", "0.001");
  args.option("python", "PATH", "Python with onnxruntime (default: $KESTREL_PYTHON, .venv, python3)");
  args.option("ort-script", "PATH", "the ONNX Runtime helper (default: scripts/ort_run.py of the source tree)");
  args.flag("no-check", "run without ONNX Runtime when it is not installed");
  args.flag("profile", "print the ten slowest steps of the last timed run");
  args.flag("json", "print one JSON object");
  try {
    if (!args.parse(argc, argv, 2)) {
      std::cout << args.help();
      return 0;
    }
    if (!args.has("model")) throw UsageError("--model is required");
    if (args.has("kernels") && args.has("db")) {
      throw UsageError("--kernels and --db contradict each other: an exported library already holds its configurations");
    }
    if (args.has("key") && !args.has("db")) throw UsageError("--key goes with --db");
    const int threads = static_cast<int>(args.get_int("threads", 1, 1, 1024));
    const int repeat = static_cast<int>(args.get_int("repeat", 10, 1, 100000));
    const auto seed = static_cast<std::uint64_t>(args.get_int("seed", 1, 0, std::int64_t{1} << 62));
    double tolerance = kDefaultTolerance;
    if (args.has("tolerance")) {
      try {
        tolerance = std::stod(args.get("tolerance"));
      } catch (const std::exception&) {
        throw UsageError("--tolerance expects a number, got '" + args.get("tolerance") + "'");
      }
      if (!(tolerance > 0)) throw UsageError("--tolerance must be positive");
    }
    const std::string model_path = args.get("model");
    model::Model m = model::Model::load(model_path);
    const std::string python = find_python(args);
    const std::string script = args.has("ort-script") ? args.get("ort-script")
                                                      : (fs::path(KESTREL_SOURCE_DIR) / "scripts" / "ort_run.py").string();
    // Before the model runs: is there an ONNX Runtime to check it against?
    if (!args.has("no-check")) {
      std::string why;
      if (!fs::exists(script)) {
        why = "no script " + script + " (give its path with --ort-script)";
      } else if (std::system((shell_quote(python) + " -c 'import onnxruntime, numpy' > /dev/null 2>&1").c_str()) != 0) {
        why = python + " cannot import onnxruntime and numpy";
      }
      if (!why.empty()) {
        std::cerr << "kestrel run: ONNX Runtime is not available to check the outputs: " << why
                  << "\n(install it with scripts/setup-python.sh, point --python at a Python that has it, or pass --no-check)\n";
        return 2;
      }
    }
    const model::Binding symbols = model::parse_binding(m.graph().symbols(), args.get("shape"));
    model::Graph graph = m.bind(symbols);

    ops::Registry ops = ops::builtin_ops();
    const host::Target native = host::parse_target("native");
    model::PlanOptions plan_options;
    plan_options.traits = native.traits;
    plan_options.symbols = symbols;
    std::unique_ptr<deploy::KernelProvider> kernels;
    std::string kernels_text;
    plan_options.block = args.has("kernels") ? manifest_block(args.get("kernels")) : model::default_block(native.traits);
    model::Plan plan = model::plan_model(m, plan_options);
    if (args.has("kernels")) {
      auto lib = std::make_unique<deploy::ExportedLibrary>(args.get("kernels"), ops, static_cast<unsigned>(threads));
      kernels_text = lib->path();
      kernels = std::move(lib);
    } else {
      std::map<std::string, ops::Config> configs;
      if (args.has("db")) {
        const auto db = records::open_records(args.get("db"), records::OpenMode::existing);
        const std::vector<records::Best> bests = db->best();
        records::ChoiceRules rules;
        rules.same_triple = true;
        rules.device_key = args.get("key");
        for (const model::ModelTask& task : plan.tasks) {
          const ops::Op* op = ops.find(task.op, ops::Backend::cpu);
          if (op == nullptr) continue;
          const records::ConfigChoice choice =
              records::choose_config(*op, task.params, native.to_string(), native.triple, native.traits, bests, rules);
          for (const std::string& note : choice.notes) std::cerr << "kestrel run: note: " << task.key() << ": " << note << "\n";
          if (choice.source == records::ConfigSource::recorded) configs[task.key()] = choice.config;
        }
        kernels_text = "compiled here: " + std::to_string(configs.size()) + " of " + std::to_string(plan.tasks.size()) +
                       " tasks at their best record in " + db->location() + ", the rest at the ops' defaults (" +
                       native.to_string() + ")";
      } else {
        kernels_text = "compiled here at the ops' default configurations (" + native.to_string() + ")";
      }
      kernels = std::make_unique<deploy::CompiledKernels>(ops, static_cast<unsigned>(threads), std::move(configs));
    }
    if (!args.has("json")) std::cerr << "kestrel run: preparing " << plan.tasks.size() << " kernels\n";
    // From here on a model error is a failure of the run (a kernel that fails, a step that
    // cannot execute), not of the input.
    std::unique_ptr<deploy::Runner> runner_ptr;
    try {
      runner_ptr = std::make_unique<deploy::Runner>(graph, plan, *kernels, ops, symbols);
    } catch (const model::ModelError& e) {
      throw RunError(e.what());
    }
    deploy::Runner& runner = *runner_ptr;

    std::map<std::string, deploy::Tensor> inputs;
    std::uint64_t stream = seed;
    for (const auto& in : graph.inputs) {
      if (in.type != model::ElemType::f32) {
        throw UsageError("model input " + in.name + " is not float: kestrel run feeds random float inputs only");
      }
      std::vector<std::int64_t> shape;
      for (const auto& d : *in.shape) shape.push_back(d.value);
      deploy::Tensor t = deploy::Tensor::floats(shape);
      fill_random(t.f32, stream++);
      inputs[in.name] = std::move(t);
    }
    std::map<std::string, deploy::Tensor> outputs;
    Latency ours;
    try {
      outputs = runner.run(inputs);
      ours = time_runs([&] { runner.run(inputs); }, repeat);
    } catch (const model::ModelError& e) {
      throw RunError(e.what());
    }

    // ONNX Runtime on the same inputs, in a scratch directory.
    std::string tmpl = (fs::temp_directory_path() / "kestrel-run-XXXXXX").string();
    if (!::mkdtemp(tmpl.data())) throw RunError("cannot create a temporary directory in " + fs::temp_directory_path().string());
    const fs::path scratch = tmpl;
    struct Cleanup {
      fs::path dir;
      ~Cleanup() {
        std::error_code ec;
        fs::remove_all(dir, ec);
      }
    } cleanup{scratch};
    OrtResult ort = run_ort(python, script, model_path, inputs, threads, repeat, scratch);
    if (!ort.available && !args.has("no-check")) {
      std::cerr << "kestrel run: ONNX Runtime is not available to check the outputs: " << ort.why
                << "\n(install it with scripts/setup-python.sh, point --python at a Python that has it, or pass --no-check)\n";
      return 2;
    }

    std::vector<Comparison> comparisons;
    bool ok = true;
    for (const auto& o : graph.outputs) {
      const auto it = ort.outputs.find(o.name);
      if (!ort.available) continue;
      comparisons.push_back(compare(o.name, outputs.at(o.name), it == ort.outputs.end() ? nullptr : &it->second, tolerance));
      ok = ok && comparisons.back().ok;
    }

    std::size_t task_steps = 0;
    for (const auto& s : plan.steps) task_steps += s.kind == model::Step::Kind::task;
    if (args.has("json")) {
      json j;
      j["model"] = model_path;
      j["symbols"] = symbols;
      j["threads"] = threads;
      j["machine"] = machine_text();
      j["target"] = native.to_string();
      j["kernels"] = kernels_text;
      j["block"] = plan.block;
      j["tasks"] = plan.tasks.size();
      j["task_steps"] = task_steps;
      j["portable_steps"] = plan.steps.size() - task_steps;
      j["kernels_used"] = runner.kernels_used();
      j["tolerance"] = tolerance;
      j["checked"] = ort.available;
      j["ok"] = ok;
      j["outputs"] = json::array();
      for (const auto& c : comparisons) {
        json o{{"name", c.name}, {"shape", c.shape}, {"max_abs_error", c.max_abs}, {"max_magnitude", c.magnitude},
               {"relative_error", c.relative}, {"ok", c.ok}};
        if (!c.problem.empty()) o["problem"] = c.problem;
        j["outputs"].push_back(o);
      }
      j["latency_ms"]["kestrel"] = {{"median", ours.median_ms}, {"min", ours.min_ms}, {"runs", ours.runs}};
      if (ort.available) {
        j["latency_ms"]["onnxruntime"] = {{"median", ort.latency.median_ms}, {"min", ort.latency.min_ms}, {"runs", ort.latency.runs}};
        j["onnxruntime"] = ort.version;
        j["speedup"] = ours.median_ms > 0 ? ort.latency.median_ms / ours.median_ms : 0.0;
      }
      std::cout << j.dump(2) << "\n";
    } else {
      std::cout << "model: " << model_path;
      for (const auto& [sym, value] : symbols) std::cout << " " << sym << "=" << value;
      std::cout << "\nmachine: " << machine_text() << ", " << native.to_string() << "\nkernels: " << kernels_text << "\n"
                << "steps: " << task_steps << " on Kestrel kernels (" << plan.tasks.size() << " distinct), "
                << plan.steps.size() - task_steps << " portable\n";
      if (!ort.available) std::cout << "check: skipped (--no-check; " << ort.why << ")\n";
      for (const auto& c : comparisons) {
        std::cout << "output " << c.name << " " << deploy::shape_text(c.shape) << ": max abs error " << c.max_abs
                  << ", relative to max |onnxruntime| " << c.relative << " (tolerance " << tolerance << "): "
                  << (c.ok ? "match" : "MISMATCH: " + c.problem) << "\n";
      }
      std::cout << std::fixed << std::setprecision(3) << "latency (median of " << repeat << ", " << threads
                << (threads == 1 ? " thread" : " threads") << "): kestrel " << ours.median_ms << " ms";
      if (ort.available) {
        std::cout << ", onnxruntime " << ort.latency.median_ms << " ms (x" << std::setprecision(2)
                  << (ours.median_ms > 0 ? ort.latency.median_ms / ours.median_ms : 0.0) << " speedup)";
      }
      std::cout << "\n";
    }
    if (args.has("profile")) {
      auto times = runner.step_times();
      double total = 0, tasks_s = 0;
      for (const auto& t : times) {
        total += t.seconds;
        if (t.task) tasks_s += t.seconds;
      }
      std::sort(times.begin(), times.end(), [](const auto& a, const auto& b) { return a.seconds > b.seconds; });
      std::ostream& out = args.has("json") ? std::cerr : std::cout;
      out << std::fixed << std::setprecision(3) << "profile of the last run: " << total * 1e3 << " ms in steps, "
          << tasks_s * 1e3 << " ms in task steps; slowest:\n";
      for (std::size_t i = 0; i < times.size() && i < 10; ++i) {
        out << "  " << std::setw(8) << times[i].seconds * 1e3 << " ms  " << times[i].step << "\n";
      }
    }
    return ok ? 0 : 1;
  } catch (...) {
    return report_error("kestrel run", std::current_exception());
  }
}

}  // namespace kestrel::tools
