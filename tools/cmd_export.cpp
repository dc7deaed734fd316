// `kestrel export`: the best recorded kernel of every task of a model, compiled for one
// target into a library with a C header and shape dispatch (model/export.h).
#include <unistd.h>

#include <algorithm>
#include <iomanip>
#include <optional>
#include <iostream>
#include <memory>
#include <sstream>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "args.h"
#include "report_error.h"
#include "commands.h"
#include "kestrel/deploy/export.h"
#include "kestrel/frontend/tune_setup.h"
#include "kestrel/host/compiler.h"
#include "kestrel/host/target.h"
#include "kestrel/model/buckets.h"
#include "kestrel/model/graph.h"
#include "kestrel/model/tasks.h"
#include "kestrel/tuner/cross_model.h"
#include "kestrel/records/records.h"

namespace kestrel::tools {
namespace {

// The workload with its run-time parameters: "K=768,M=16,N=768 [M=seq]".
std::string workload_text(const deploy::ExportedKernel& k) {
  std::string text = ops::format_params(k.params);
  const std::string dynamic = model::to_string(k.dynamic);
  return dynamic.empty() ? text : text + " [" + dynamic + "]";
}

std::string megabytes(std::uint64_t bytes) {
  std::ostringstream text;
  text << std::fixed << std::setprecision(1);
  if (bytes < 1'000'000) text << static_cast<double>(bytes) / 1e3 << " KB";
  else text << static_cast<double>(bytes) / 1e6 << " MB";
  return text.str();
}

void print_table(const deploy::ExportReport& report, const std::string& out_dir) {
  std::size_t op_width = 4, workload_width = 10;
  for (const deploy::ExportedKernel& k : report.kernels) {
    op_width = std::max(op_width, k.op.size() + 2);
    workload_width = std::max(workload_width, workload_text(k).size() + 2);
  }
  const int ow = static_cast<int>(op_width), ww = static_cast<int>(workload_width);
  std::cout << "\n" << std::left << std::setw(ow) << "OP" << std::setw(ww) << "WORKLOAD" << std::setw(11) << "ORIGIN"
            << std::setw(10) << "GFLOP/s" << std::setw(13) << "ENTRY" << "CONFIG\n";
  std::size_t tuned = 0, picked = 0;
  for (const deploy::ExportedKernel& k : report.kernels) {
    std::ostringstream gflops;
    if (k.origin == "tuned") gflops << std::fixed << std::setprecision(1) << k.gflops;
    else gflops << "-";
    std::cout << std::left << std::setw(ow) << k.op << std::setw(ww) << workload_text(k) << std::setw(11) << k.origin
              << std::setw(10) << gflops.str() << std::setw(13) << k.entry << k.config << "\n";
    if (k.origin == "tuned") ++tuned;
    if (k.origin == "zero-shot") ++picked;
  }
  std::cout << "\n" << report.kernels.size() << " kernels (" << tuned << " tuned, ";
  if (picked) std::cout << picked << " picked by the cost model, ";
  std::cout << report.kernels.size() - tuned - picked << " at the op's default) in " << out_dir << "/libkestrel_kernels.{so,a}, header kestrel_kernels.h\n";
  for (const std::string& note : report.notes) std::cout << "note: " << note << "\n";
  std::cout << (report.runtime_copied ? "" : "warning: ") << report.runtime_note << "\n";
  if (!report.programs.empty()) {
    std::cout << "the whole model: ";
    for (std::size_t i = 0; i < report.programs.size(); ++i) std::cout << (i ? ", " : "") << out_dir << "/" << report.programs[i];
    std::cout << " (run it with kestrel-model-run " << out_dir;
    if (report.programs.size() > 1) std::cout << " --program " << report.programs.back();
    std::cout << " on the target, kestrel run --kernels " << out_dir << " here), libkestrel_model.so's header kestrel_model.h "
              << "and the example kestrel_model_run.c\n"
              << (report.model_runtime_copied ? "" : "warning: ") << report.model_runtime_note << "\n";
    std::uint64_t programs = 0;
    for (std::uint64_t bytes : report.program_bytes) programs += bytes;
    std::cout << "weights: " << out_dir << "/" << deploy::kWeightsFile << " " << megabytes(report.weights_bytes) << ", shared by "
              << report.programs.size() << " program" << (report.programs.size() == 1 ? "" : "s") << " ("
              << report.weight_arrays_stored << " distinct arrays of " << report.weight_arrays << " read; programs "
              << megabytes(programs) << ")\n";
    for (std::size_t i = 0; i < report.memory.size(); ++i) {
      const deploy::MemoryStats& m = report.memory[i];
      std::cout << "activation memory of " << report.programs[i] << ": arena " << megabytes(m.arena) << " (buffers "
                << megabytes(m.sum) << " in all, at most " << megabytes(m.peak) << " live at once; " << m.buffers
                << " buffers)\n";
    }
  }
}

nlohmann::json report_json(const deploy::ExportReport& report, const std::string& target,
                           const std::string& cost_model) {
  nlohmann::json kernels = nlohmann::json::array();
  for (const deploy::ExportedKernel& k : report.kernels) {
    nlohmann::json dynamic = nlohmann::json::array();
    for (const model::DynamicParam& d : k.dynamic)
      dynamic.push_back({{"param", d.param}, {"symbol", d.symbol}, {"multiplier", d.multiplier}});
    kernels.push_back({{"op", k.op},
                       {"params", ops::format_params(k.params)},
                       {"dynamic", dynamic},
                       {"config", k.config},
                       {"origin", k.origin},
                       {"gflops", k.gflops},
                       {"entry", k.entry}});
  }
  nlohmann::json weights = nullptr;
  nlohmann::json memory = nlohmann::json::array();
  if (!report.programs.empty()) {
    weights = {{"file", deploy::kWeightsFile},
               {"bytes", report.weights_bytes},
               {"program_bytes", report.program_bytes},
               {"arrays", report.weight_arrays},
               {"arrays_stored", report.weight_arrays_stored}};
    for (std::size_t i = 0; i < report.memory.size(); ++i) {
      const deploy::MemoryStats& m = report.memory[i];
      memory.push_back({{"program", report.programs[i]}, {"arena_bytes", m.arena}, {"buffers_bytes", m.sum},
                        {"peak_bytes", m.peak}, {"buffers", m.buffers}});
    }
  }
  return {{"target", target},
          {"cost_model", cost_model.empty() ? nlohmann::json(nullptr) : nlohmann::json(cost_model)},
          {"kernels", kernels},
          {"programs", report.programs},
          {"weights", weights},
          {"memory", memory},
          {"model_runtime", report.programs.empty() ? nlohmann::json(nullptr)
                                                    : nlohmann::json({{"copied", report.model_runtime_copied},
                                                                      {"note", report.model_runtime_note}})},
          {"files", report.files},
          {"runtime_copied", report.runtime_copied},
          {"runtime_note", report.runtime_note},
          {"notes", report.notes}};
}

}  // namespace

int run_export(int argc, char** argv) {
  Args args("kestrel export",
            "Writes a kernel library for a target: every task of the model (at each bucket of its symbolic\n"
            "dimensions) compiled at its best recorded configuration, or when the task has no record at the\n"
            "cost model's pick (--cost-model, --zero-shot) or the op's default, linked into libkestrel_kernels.so and .a with\n"
            "kestrel_kernels.h (a dispatcher by shape and one typed entry per op), the target's libkestrel_rt and a\n"
            "manifest; and the whole model: model.kprog (the plan lowered, with its memory plan; one\n"
            "model.<binding>.kprog per bucket of a model with symbols), model.weights (their weights packed for the\n"
            "target, each once) and libkestrel_model.so for the target with its\n"
            "header kestrel_model.h and an example program; kestrel-model-run DIR [--program FILE] runs it on the\n"
            "board, kestrel run --kernels DIR here. See docs/export.md.");
  args.option("db", "FILE|URI", "records database (from kestrel tune): SQLite file or PostgreSQL URI", "kestrel.db");
  args.option("model", "FILE", "the ONNX model whose tasks are exported");
  args.option("target", "TRIPLE", "the target: native, aarch64-linux-gnu, armv7a-linux-gnueabihf, ...", "native");
  args.option("cpu", "NAME", "-mcpu / -march for the target (e.g. cortex-a72); default: the triple's baseline");
  args.option("o,out", "DIR", "output folder (created)");
  args.option("buckets", "SIZES", "sizes of the model's symbolic dimensions to export kernels for, e.g. seq=8,32,128 "
                                  "(default: 8,32,128)");
  args.option("key", "KEY", "only records measured on devices of this pool key");
  args.option("block", "N", "channels per block of the convolutions' NCHWc layout (default: the target's)");
  args.flag("no-winograd", frontend::kNoWinogradHelp);
  args.option("runtime-dir", "DIR", "where the target's libkestrel_rt.{a,so} is (default: $KESTREL_RUNTIME_DIR, "
                                    "then the build trees beside kestrel)");
  args.option("cost-model", "FILE", "a cross-workload cost model (kestrel cost-model train): tasks with no record get its "
                                    "zero-shot pick instead of the op's default");
  args.flag("zero-shot", "tasks with no record get the zero-shot pick of the cost model Kestrel ships (or of "
                         "--cost-model); no database is needed");
  args.flag("kernels-only", "write the kernel library alone, not the whole model");
  args.flag("json", "print the report as JSON");
  try {
    if (!args.parse(argc, argv, 2)) {
      std::cout << args.help();
      return 0;
    }
    if (!args.has("model")) throw UsageError("--model is required (the ONNX model whose tasks to export)");
    if (!args.has("out")) throw UsageError("-o/--out is required (the folder the library is written to)");
    // The cost model first: a missing or foreign file fails before anything is read.
    const frontend::CostModelUse use =
        frontend::load_cost_model(args.get("cost-model"), args.has("zero-shot"), "--zero-shot", "--cost-model");
    const std::shared_ptr<const tuner::CrossModel>& cost_model = use.model;
    const std::string& cost_model_path = use.path;
    host::Target target;
    try {
      target = host::parse_target(args.get("target", "native"), args.get("cpu"));
    } catch (const std::invalid_argument& e) {
      throw UsageError(e.what());
    }
    const std::string db_path = args.get("db", "kestrel.db");
    // Zero-shot picks need no records: without --db, a missing kestrel.db is an empty
    // store (nothing is created); one that exists is read.
    auto records = args.has("zero-shot") && !args.has("db") ? frontend::open_session_records(db_path, false)
                                                            : records::open_records(db_path, records::OpenMode::existing);
    const model::Model loaded = model::Model::load(args.get("model"));
    const std::vector<model::Binding> buckets = model::parse_buckets(loaded.graph().symbols(), args.get("buckets"));

    deploy::ExportOptions options;
    options.target = target;
    options.out_dir = args.get("out");
    options.device_key = args.get("key");
    options.runtime_dir = args.get("runtime-dir");
    options.model = args.get("model");
    options.cost_model = cost_model;
    options.cost_model_path = cost_model_path;
    const std::int64_t block = args.get_int("block", 0, 0, 64);
    for (const model::Binding& binding : buckets) {
      model::PlanOptions plan_options;
      plan_options.block = block;
      plan_options.traits = target.traits;
      plan_options.symbols = binding;
      plan_options.winograd = !args.has("no-winograd");
      options.plans.push_back(model::plan_model(loaded, plan_options));
    }
    // The whole model: one program per bucket.
    std::vector<model::Graph> bound;
    if (!args.has("kernels-only")) {
      bound.reserve(buckets.size());
      for (const model::Binding& binding : buckets) {
        bound.push_back(loaded.bind(binding));
        options.graphs.push_back(&bound.back());
        options.bindings.push_back(binding);
      }
    }

    const bool json = args.has("json");
    host::Compiler compiler;
    if (!json) std::cerr << "exporting " << args.get("model") << " for " << target.to_string() << "\n";
    const deploy::ExportReport report =
        deploy::export_library(*records, compiler, options, [&](std::size_t done, std::size_t total) {
          if (json) return;
          // In place on a terminal; one line at the end otherwise (logs).
          if (::isatty(2)) std::cerr << "\rcompiling kernels " << done << "/" << total << std::flush;
          if (done == total) std::cerr << (::isatty(2) ? "\n" : "compiled " + std::to_string(total) + " kernels\n");
        });
    if (json) std::cout << report_json(report, target.to_string(), cost_model_path).dump(2) << "\n";
    else print_table(report, options.out_dir);
    return 0;
  } catch (...) {
    return report_error("kestrel export", std::current_exception());
  }
}

}  // namespace kestrel::tools
