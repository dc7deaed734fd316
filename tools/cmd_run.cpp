// `kestrel run`: executes a model with Kestrel's kernels (an exported library, or kernels
// compiled here at the ops' defaults or the best records of --db) and portable
// implementations for the rest, checks its outputs against ONNX Runtime's on the same
// seeded random inputs, and reports both latencies at the same thread count. The kernels
// are deploy/model_kernels.h, the check and the timing deploy/model_check.h; this file
// parses the options and prints.
#include <algorithm>
#include <filesystem>
#include <iomanip>
#include <memory>
#include <set>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "args.h"
#include "report_error.h"
#include "commands.h"
#include "kestrel/deploy/model_check.h"
#include "kestrel/deploy/model_kernels.h"
#include "kestrel/deploy/portable_ops.h"
#include "kestrel/deploy/python_tool.h"
#include "kestrel/deploy/runner.h"
#include "kestrel/frontend/tune_setup.h"
#include "kestrel/host/target.h"
#include "kestrel/model/buckets.h"
#include "kestrel/model/graph.h"
#include "kestrel/model/tasks.h"
#include "kestrel/tuner/cross_model.h"

namespace kestrel::tools {
namespace {

using json = nlohmann::json;

void print_ort_missing(const std::string& why) {
  std::cerr << "kestrel run: ONNX Runtime is not available to check the outputs: " << why
            << "\n(install it with scripts/setup-python.sh, point --python at a Python that has it, or pass --no-check)\n";
}

}  // namespace

int run_model(int argc, char** argv) {
  Args args("kestrel run",
            "Runs an ONNX model with Kestrel's kernels for its tuned operators (from an exported\n"
            "library with --kernels, else compiled here: at each task's best record of --db, chosen\n"
            "as kestrel export chooses, else a cost model's zero-shot pick with --zero-shot or\n"
            "--cost-model, else the op's default configuration) and\n"
            "portable implementations for the rest, on seeded random inputs (float inputs uniform\n"
            "in [-1, 1); integer ones: a Gather's indices inside its table, a *mask* input ones,\n"
            "others small values; booleans true) or on --inputs FILE.npz. Checks the outputs\n"
            "against ONNX Runtime's (scripts/ort_run.py; install it with scripts/setup-python.sh):\n"
            "pass when the largest absolute difference is at most --tolerance times the largest\n"
            "magnitude of ONNX Runtime's output. Reports the median latency of both at the same\n"
            "thread count. Operators with no implementation are listed, all of them, before any\n"
            "kernel is compiled. An output whose values are all equal gets a warning: it matches\n"
            "at any error. Exit status: 0 match, 1 mismatch or failure (an operator that cannot\n"
            "run included), 2 bad input or no ONNX Runtime (unless --no-check).");
  args.option("model", "FILE", "the ONNX model");
  args.option("kernels", "DIR", "an exported kernel library (kestrel export -o DIR); when the whole model was exported "
                                "(DIR/model.kprog, or a bucket's DIR/model.<binding>.kprog at this run's sizes) that "
                                "program runs, as libkestrel_model runs it on the board");
  args.option("db", "FILE|URI", "records (from kestrel tune) whose best configurations the kernels compiled here "
                                "use; tasks without a record use the op's default");
  args.option("key", "KEY", "with --db: only records measured on devices of this pool key");
  args.option("cost-model", "FILE", "a cross-workload cost model (kestrel cost-model train): the kernels compiled here "
                                    "for tasks without a record use its zero-shot pick");
  args.flag("zero-shot", "the kernels compiled here for tasks without a record use the zero-shot pick of the cost "
                         "model Kestrel ships (or of --cost-model)");
  args.option("threads", "N", "threads of Kestrel's kernels and of ONNX Runtime (intra-op)", "1");
  args.option("shape", "SYM=N", "values of the model's symbolic dimensions, e.g. seq=50");
  args.option("repeat", "R", "timed runs of each (after one untimed run)", "10");
  args.option("seed", "S", "seed of the random inputs", "1");
  args.option("inputs", "FILE.npz", "the model's inputs (np.savez: an array per input, named NAME or input:NAME; "
                                    "output:NAME arrays, as the zoo's files hold ONNX Runtime's, are compared with "
                                    "Kestrel's outputs too) instead of random ones; they also give the "
                                    "symbolic dimensions their sizes unless --shape does");
  args.option("tolerance", "T", "allowed max error relative to the output's largest magnitude", "0.001");
  args.option("python", "PATH", "Python with onnxruntime (default: $KESTREL_PYTHON, .venv, python3)");
  args.option("ort-script", "PATH", "the ONNX Runtime helper (default: scripts/ort_run.py of the source tree)");
  args.flag("no-winograd", std::string(frontend::kNoWinogradHelp) + " (not with --kernels: the export decided)");
  args.flag("no-check", "run without ONNX Runtime when it is not installed");
  args.flag("profile", "print the ten slowest steps and the time by kind of step, each step's median over the runs (with --json: every step, in order); the per-step clock adds ~50 ns a step to the latency");
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
    if (args.has("kernels") && args.has("no-winograd")) {
      throw UsageError("--kernels and --no-winograd contradict each other: the exported library's plan is fixed "
                       "(kestrel export --no-winograd makes one without Winograd kernels)");
    }
    if (args.has("kernels") && (args.has("cost-model") || args.has("zero-shot"))) {
      throw UsageError("--kernels and --cost-model/--zero-shot contradict each other: an exported library already holds "
                       "its configurations (kestrel export --zero-shot picks them)");
    }
    // The cost model first: a missing or foreign file fails before anything runs.
    const std::shared_ptr<const tuner::CrossModel> cost_model =
        frontend::load_cost_model(args.get("cost-model"), args.has("zero-shot"), "--zero-shot", "--cost-model").model;
    if (args.has("inputs") && args.has("seed")) throw UsageError("--inputs and --seed contradict each other: the inputs are given");
    const int threads = static_cast<int>(args.get_int("threads", 1, 1, 1024));
    const int repeat = static_cast<int>(args.get_int("repeat", 10, 1, 100000));
    const auto seed = static_cast<std::uint64_t>(args.get_int("seed", 1, 0, std::int64_t{1} << 62));
    double tolerance = deploy::kDefaultTolerance;
    if (args.has("tolerance")) {
      try {
        tolerance = std::stod(args.get("tolerance"));
      } catch (const std::exception&) {
        throw UsageError("--tolerance expects a number, got '" + args.get("tolerance") + "'");
      }
      if (!(tolerance > 0)) throw UsageError("--tolerance must be positive");
    }
    const std::string model_path = args.get("model");
    std::shared_ptr<deploy::ModelKernels> kept_kernels;  // the runner borrows their provider
    model::Model m = model::Model::load(model_path);
    deploy::OnnxRuntime onnxruntime;
    onnxruntime.python = deploy::find_python(args.has("python") ? std::optional(args.get("python")) : std::nullopt);
    onnxruntime.script = args.has("ort-script") ? args.get("ort-script") : deploy::default_ort_script();
    // Before the model runs: is there an ONNX Runtime to check it against?
    if (!args.has("no-check")) {
      if (const std::optional<std::string> why = deploy::ort_unavailable(onnxruntime)) {
        print_ort_missing(*why);
        return 2;
      }
    }
    // Given inputs: read before anything else, and the sizes of the symbolic dimensions
    // from their shapes unless --shape gives them.
    std::optional<std::map<std::string, deploy::NpzArray>> given;
    std::string shape_text = args.get("shape");
    if (args.has("inputs")) {
      given = deploy::read_npz(args.get("inputs"));
      if (!args.has("shape")) shape_text = deploy::npz_binding(m.graph(), *given, args.get("inputs"));
    }
    const model::Binding symbols = model::parse_binding(m.graph().symbols(), shape_text);
    model::Graph graph = m.bind(symbols);
    // The inputs, before any kernel is compiled: a refusal comes early.
    const std::map<std::string, deploy::Tensor> inputs =
        given ? deploy::inputs_from_npz(graph, *given, args.get("inputs")) : deploy::generated_inputs(graph, seed);

    const host::Target native = host::parse_target("native");
    // An export of the whole model (model.kprog, or this run's bucket's
    // model.<binding>.kprog) runs as written, the code a board runs; otherwise the model
    // is planned here.
    std::string program_name;
    if (args.has("kernels")) {
      const std::filesystem::path dir = args.get("kernels");
      if (std::filesystem::exists(dir / deploy::kProgramFile)) program_name = deploy::kProgramFile;
      else if (!symbols.empty() && std::filesystem::exists(dir / deploy::program_file(symbols))) program_name = deploy::program_file(symbols);
    }
    bool from_program = !program_name.empty();
    model::Plan plan;  // planned here (not from_program); the runner's kernels borrow its tasks
    std::unique_ptr<deploy::Runner> runner_ptr;
    std::string kernels_text;
    std::size_t distinct_tasks = 0, task_steps = 0, all_steps = 0;
    std::int64_t block = 0;
    if (from_program) {
      const std::string program_path = (std::filesystem::path(args.get("kernels")) / program_name).string();
      auto candidate = std::make_unique<deploy::Runner>(args.get("kernels"), static_cast<unsigned>(threads), program_name);
      const deploy::Program& program = candidate->program();
      // The program was lowered at one binding: it runs only inputs of its shapes; at
      // other sizes the model is planned here on the library's kernels (bucket dispatch).
      std::string mismatch;
      for (const model::ValueInfo& in : graph.inputs) {
        auto it = std::find_if(program.inputs.begin(), program.inputs.end(),
                               [&](std::size_t id) { return program.values[id].name == in.name; });
        if (it == program.inputs.end()) {
          throw UsageError(program_path + " has no input " + in.name + ": it was exported from another model");
        }
        const auto& shape = program.values[*it].shape;
        if (mismatch.empty() && (!shape || *shape != inputs.at(in.name).shape)) {
          mismatch = "input " + in.name + " at " + (shape ? deploy::shape_text(*shape) : "?") + ", this run gives it " +
                     deploy::shape_text(inputs.at(in.name).shape);
        }
      }
      if (mismatch.empty()) {
        runner_ptr = std::move(candidate);
      } else {
        from_program = false;
        std::cerr << "kestrel run: note: " << program_path << " runs " << mismatch
                  << ": the model is planned here, on the library's kernels\n";
      }
    }
    if (from_program) {
      const std::string program_path = (std::filesystem::path(args.get("kernels")) / program_name).string();
      const deploy::Program& program = runner_ptr->program();
      std::set<std::string> distinct;
      for (const deploy::ProgramStep& step : program.steps) {
        if (!step.task) continue;
        ++task_steps;
        std::string key = step.op;
        for (std::int64_t v : step.params) key += "," + std::to_string(v);
        distinct.insert(key);
      }
      distinct_tasks = distinct.size();
      all_steps = program.steps.size();
      block = program.block;
      kernels_text = "the exported model " + program_path + " on " + args.get("kernels") + "/libkestrel_kernels.so";
      if (!args.has("json")) std::cerr << "kestrel run: running the exported model " << program_path << "\n";
    } else {
      model::PlanOptions plan_options;
      plan_options.traits = native.traits;
      plan_options.symbols = symbols;
      plan_options.winograd = !args.has("no-winograd");
      deploy::KernelSource kernel_source;
      if (args.has("kernels")) kernel_source.exported = args.get("kernels");
      if (args.has("db")) kernel_source.records = args.get("db");
      kernel_source.cost_model = cost_model;
      kernel_source.device_key = args.get("key");
      plan_options.block = deploy::plan_block(kernel_source, native.traits);
      plan = model::plan_model(m, plan_options);
      // Every operator that cannot run, before compiling kernels for the others.
      if (const auto missing = deploy::missing_portable(graph, plan); !missing.empty()) {
        throw deploy::ModelRunError(graph.path + " cannot run: " + deploy::missing_portable_text(missing) +
                                    " (kestrel tasks marks them \"cannot run\")");
      }
      auto kernels = std::make_shared<deploy::ModelKernels>(
          deploy::model_kernels(kernel_source, plan, native, static_cast<unsigned>(threads)));
      for (const std::string& note : kernels->notes) std::cerr << "kestrel run: note: " << note << "\n";
      kernels_text = kernels->description;
      if (!args.has("json")) std::cerr << "kestrel run: preparing " << plan.tasks.size() << " kernels\n";
      // From here on a model error is a failure of the run (a kernel that fails, a step that
      // cannot execute), not of the input: deploy::ModelRunError.
      runner_ptr = deploy::make_checked_runner(graph, plan, *kernels->provider, symbols);
      kept_kernels = kernels;
      distinct_tasks = plan.tasks.size();
      for (const auto& s : plan.steps) task_steps += s.kind == model::Step::Kind::task;
      all_steps = plan.steps.size();
      block = plan.block;
    }
    deploy::Runner& runner = *runner_ptr;
    if (args.has("profile")) runner.time_steps(true);

    const deploy::TimedRun timed = deploy::run_and_time(runner, inputs, repeat);
    const deploy::Latency& ours = timed.latency;

    // ONNX Runtime on the same inputs.
    const deploy::OrtRun ort = deploy::run_onnxruntime(onnxruntime, model_path, inputs, threads, repeat);
    if (!ort.available && !args.has("no-check")) {
      print_ort_missing(ort.why);
      return 2;
    }

    const std::vector<deploy::OutputCheck> comparisons = deploy::compare_outputs(graph, timed.outputs, ort, tolerance);
    bool ok = true;
    for (const auto& c : comparisons) ok = ok && c.ok;
    // The outputs a given .npz holds (the zoo's: ONNX Runtime's for those inputs): checked too.
    const std::vector<deploy::OutputCheck> npz_checks =
        given ? deploy::compare_npz_outputs(graph, timed.outputs, *given, tolerance) : std::vector<deploy::OutputCheck>{};
    for (const auto& c : npz_checks) ok = ok && c.ok;
    // An output of one value everywhere matches at any error: say so.
    const std::vector<std::string> constant = deploy::constant_outputs(graph, timed.outputs);
    for (const auto& name : constant) {
      const deploy::Tensor& t = timed.outputs.at(name);
      double v = t.type == model::ElemType::f32 ? static_cast<double>(t.f32.front()) : static_cast<double>(t.i64.front());
      if (v == 0) v = 0;  // -0 prints as 0
      std::cerr << "kestrel run: warning: output " << name << " " << deploy::shape_text(t.shape) << " is constant (every value is "
                << v << "): a match with ONNX Runtime proves little about the kernels\n";
    }

    // The activation memory: the plan's arena against no reuse at all and the live peak,
    // and whether every planned buffer got its place in the runs.
    const deploy::MemoryStats plan_stats = deploy::memory_stats(runner.program().memory);
    const deploy::ProgramRunner::Memory placements = runner.memory();
    if (args.has("json")) {
      json j;
      j["model"] = model_path;
      if (args.has("profile")) {
        j["profile"]["steps"] = json::array();
        for (const auto& t : runner.step_times()) {
          j["profile"]["steps"].push_back({{"step", t.step}, {"kind", t.kind}, {"task", t.task}, {"ms", t.seconds * 1e3}});
        }
      }
      j["memory"] = {{"arena_bytes", plan_stats.arena},  {"sum_of_buffers_bytes", plan_stats.sum},
                     {"peak_live_bytes", plan_stats.peak}, {"buffers", plan_stats.buffers},
                     {"placed", placements.placed},       {"refused", placements.refused}};
      j["symbols"] = symbols;
      j["threads"] = threads;
      j["machine"] = deploy::machine_description();
      j["target"] = native.to_string();
      j["kernels"] = kernels_text;
      j["block"] = block;
      j["tasks"] = distinct_tasks;
      j["program"] = from_program;
      j["task_steps"] = task_steps;
      j["portable_steps"] = all_steps - task_steps;
      j["kernels_used"] = runner.kernels_used();
      j["tolerance"] = tolerance;
      j["checked"] = ort.available;
      j["ok"] = ok;
      j["constant_outputs"] = constant;
      if (given) {
        j["npz_outputs"] = json::array();
        for (const auto& c : npz_checks) {
          json o{{"name", c.name}, {"max_abs_error", c.max_abs}, {"relative_error", c.relative}, {"ok", c.ok}};
          if (!c.problem.empty()) o["problem"] = c.problem;
          j["npz_outputs"].push_back(o);
        }
      }
      j["inputs"] = json::object();
      for (const auto& [name, t] : inputs) {
        j["inputs"][name] = {{"shape", t.shape},
                             {"type", t.type == model::ElemType::f32 ? "float" : "int64"},
                             {"values", given ? "from " + args.get("inputs") : deploy::generated_input_text(graph, name)}};
      }
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
        j["speedup"] = deploy::speedup(ours, ort.latency);
      }
      std::cout << j.dump(2) << "\n";
    } else {
      std::cout << "model: " << model_path;
      for (const auto& [sym, value] : symbols) std::cout << " " << sym << "=" << value;
      std::cout << "\nmachine: " << deploy::machine_description() << ", " << native.to_string() << "\nkernels: " << kernels_text << "\n"
                << "steps: " << task_steps << " on Kestrel kernels (" << distinct_tasks << " distinct), "
                << all_steps - task_steps << " portable\n";
      if (plan_stats.buffers > 0) {
        auto mb = [](std::int64_t bytes) {
          std::ostringstream text;
          text << std::fixed << std::setprecision(2) << static_cast<double>(bytes) / 1e6;
          return text.str();
        };
        std::cout << "memory: activations in one arena of " << mb(plan_stats.arena) << " MB (" << plan_stats.buffers
                  << " buffers, " << mb(plan_stats.sum) << " MB without reuse, " << mb(plan_stats.peak) << " MB live at most)";
        if (placements.refused > 0) {
          std::cout << "; " << placements.refused << " placements refused (taken from the allocator)";
        }
        std::cout << "\n";
      }
      for (const auto& [name, t] : inputs) {
        if (!given && t.type == model::ElemType::f32) continue;
        std::cout << "input " << name << " " << deploy::shape_text(t.shape) << ": "
                  << (given ? "from " + args.get("inputs") : deploy::generated_input_text(graph, name)) << "\n";
      }
      for (const auto& name : constant) {
        std::cout << "warning: output " << name << " is constant (all values equal): its match proves little\n";
      }
      if (!ort.available) std::cout << "check: skipped (--no-check; " << ort.why << ")\n";
      for (const auto& c : comparisons) {
        std::cout << "output " << c.name << " " << deploy::shape_text(c.shape) << ": max abs error " << c.max_abs
                  << ", relative to max |onnxruntime| " << c.relative << " (tolerance " << tolerance << "): "
                  << (c.ok ? "match" : "MISMATCH: " + c.problem) << "\n";
      }
      for (const auto& c : npz_checks) {
        std::cout << "output " << c.name << " against output:" << c.name << " of " << args.get("inputs") << ": max abs error "
                  << c.max_abs << ", relative " << c.relative << ": " << (c.ok ? "match" : "MISMATCH: " + c.problem) << "\n";
      }
      std::cout << std::fixed << std::setprecision(3) << "latency (median of " << repeat << ", " << threads
                << (threads == 1 ? " thread" : " threads") << "): kestrel " << ours.median_ms << " ms";
      if (ort.available) {
        std::cout << ", onnxruntime " << ort.latency.median_ms << " ms (x" << std::setprecision(2)
                  << deploy::speedup(ours, ort.latency) << " speedup)";
      }
      std::cout << "\n";
    }
    if (args.has("profile") && !args.has("json")) {  // --json carries every step instead
      const deploy::StepProfile profile = deploy::step_profile(runner);
      std::ostream& out = std::cout;
      out << std::fixed << std::setprecision(3) << "profile (each step's median over the runs): " << profile.total_s * 1e3
          << " ms in steps, " << profile.task_s * 1e3 << " ms in task steps; slowest:\n";
      for (std::size_t i = 0; i < profile.slowest.size() && i < 10; ++i) {
        out << "  " << std::setw(8) << profile.slowest[i].seconds * 1e3 << " ms  " << profile.slowest[i].step << "\n";
      }
      out << "by kind (task steps: the op; portable steps: the ONNX operator):\n";
      for (const auto& k : profile.by_kind) {
        out << "  " << std::setw(8) << k.seconds * 1e3 << " ms  " << (k.task ? "task " : "portable ") << k.kind << " ("
            << k.steps << (k.steps == 1 ? " step)\n" : " steps)\n");
      }
    }
    return ok ? 0 : 1;
  } catch (...) {
    return report_error("kestrel run", std::current_exception());
  }
}

}  // namespace kestrel::tools
