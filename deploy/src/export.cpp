// Export: every task of a model's plans, at its best record or the op's default,
// compiled for one target into one library with a dispatcher (dispatcher.cpp), a header,
// the runtime, and a manifest.
#include "kestrel/deploy/export.h"
#include "kestrel/deploy/kernel_provider.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <set>
#include <stdexcept>
#include <system_error>

#include <nlohmann/json.hpp>

#include "dispatcher.h"
#include "zero_shot_choice.h"
#include "kestrel/deploy/runner.h"
#include "kestrel/host/link.h"
#include "kestrel/records/config_choice.h"
#include "kestrel/tuner/space.h"
#include "kestrel/tuner/zero_shot.h"

namespace kestrel::embedded {
std::string_view kernel_abi_h();      // deploy/CMakeLists.txt: kestrel_embed
std::string_view kernel_runtime_h();
std::string_view kestrel_model_h();
std::string_view kestrel_model_run_c();
}  // namespace kestrel::embedded

namespace kestrel::deploy {

using model::DynamicParam;
using model::ModelError;
using model::ModelTask;
using model::Plan;

namespace {

namespace fs = std::filesystem;


void write_file(const fs::path& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) throw ModelError("cannot write " + path.string() + ": " + std::strerror(errno));
}

void write_file(const fs::path& path, const std::vector<std::uint8_t>& bytes) {
  write_file(path, std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
}

// Where the target's libkestrel_rt is: the option, $KESTREL_RUNTIME_DIR, then beside the
// running program's build tree (build-device-<triple>/device_runtime next to the build
// folder, or the build folder's own device_runtime for a native target).
std::vector<fs::path> runtime_candidates(const ExportOptions& options) {
  if (!options.runtime_dir.empty()) return {options.runtime_dir};
  std::vector<fs::path> out;
  if (const char* env = std::getenv("KESTREL_RUNTIME_DIR"); env && *env) out.emplace_back(env);
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return out;
  for (fs::path dir = exe.parent_path(); !dir.empty() && dir != dir.root_path(); dir = dir.parent_path()) {
    if (options.target.native) {
      out.push_back(dir / "device_runtime");
      out.push_back(dir.parent_path() / "build-device-native" / "device_runtime");
    }
    out.push_back(dir / ("build-device-" + options.target.triple) / "device_runtime");
    out.push_back(dir.parent_path() / ("build-device-" + options.target.triple) / "device_runtime");
  }
  return out;
}

}  // namespace

ExportReport export_library(records::RecordStore& records, host::Compiler& compiler, const ExportOptions& options,
                            const std::function<void(std::size_t, std::size_t)>& progress) {
  const host::Target& target = options.target;
  if (target.is_gpu()) throw ModelError("export builds CPU libraries: " + target.to_string() + " is a GPU target");
  // The output folder, checked before any compile.
  const fs::path out_dir = options.out_dir.empty() ? fs::path(".") : fs::path(options.out_dir);
  {
    std::error_code ec;
    fs::create_directories(out_dir, ec);
    if (ec || !fs::is_directory(out_dir) || ::access(out_dir.c_str(), W_OK) != 0)
      throw ModelError("cannot write to the output folder " + out_dir.string() + ": " +
                       (ec ? ec.message() : std::string(std::strerror(errno ? errno : EACCES))));
  }

  // The best own records of this target (any CPU of its triple; the exact target first).
  std::vector<records::Best> bests;
  for (records::Best& best : records.best()) {
    if (best.target.is_gpu() || best.target.triple != target.triple) continue;
    if (!options.device_key.empty() && best.device_class.key != options.device_key) continue;
    bests.push_back(std::move(best));
  }
  ExportReport report;
  if (bests.empty()) {
    const std::string none = "no records for " + target.triple +
                             (options.device_key.empty() ? "" : " (device key " + options.device_key + ")") + " in " +
                             records.location();
    if (!options.cost_model) throw ModelError(none + ": tune for it first");
    report.notes.push_back(none + ": every kernel is the cost model's pick or the op's default");
  }

  std::vector<detail::TableEntry> entries;
  std::set<std::string> unmodelled;  // ops the cost model has no model for (noted once)
  std::set<std::string> seen;
  for (const Plan& plan : options.plans) {
    for (const ModelTask& task : plan.tasks) {
      // One kernel per task and run-time parameters (two tasks of one workload at a bucket
      // may follow the symbol in different parameters).
      if (!seen.insert(task.identity()).second) continue;
      const ops::Op* op = task.op;
      const std::string op_name = task.op_name();
      detail::TableEntry entry;
      entry.op = op;
      entry.kernel.op = op_name;
      entry.kernel.params = task.params;
      entry.kernel.dynamic = task.dynamic;
      entry.kernel.entry = "kestrel_k" + std::to_string(entries.size());
      entry.params = ordered_params(*op, task.params);
      const std::vector<ops::ParamSpec> specs = op->params();
      for (std::size_t i = 0; i < specs.size(); ++i) {
        const ops::ParamSpec& spec = specs[i];
        std::int64_t multiplier = 0;
        for (const DynamicParam& d : task.dynamic) {
          if (d.param != spec.name) continue;
          if (entry.symbol.empty()) entry.symbol = d.symbol;
          // One symbol per kernel: a parameter of another symbol stays static.
          if (d.symbol == entry.symbol && d.multiplier > 0) multiplier = d.multiplier;
        }
        entry.multipliers.push_back(multiplier);
        if (multiplier) entry.bucket = entry.params[i] / multiplier;
      }
      std::erase_if(entry.kernel.dynamic, [&](const DynamicParam& d) { return d.symbol != entry.symbol; });

      // The best own record (exact target first, then the fastest of the triple), else the
      // cost model's pick, else the default.
      records::ChoiceRules rules;
      rules.same_triple = true;
      rules.device_key = options.device_key;
      if (options.cost_model) {
        rules.fallback = [&](std::vector<std::string>& notes) {
          return detail::zero_shot_choice(*options.cost_model, *op, task.params, target, unmodelled, notes);
        };
      }
      const records::ConfigChoice choice =
          records::choose_config(*op, task.params, target.id(), target.traits, bests, rules);
      for (const std::string& note : choice.notes) {
        report.notes.push_back(note.rfind(op_name, 0) == 0 ? note : op_name + " " + ops::format_params(task.params) + ": " + note);
      }
      const ops::Config& config = choice.config;
      entry.kernel.origin = choice.source == records::ConfigSource::recorded ? "tuned"
                            : choice.source == records::ConfigSource::fallback ? "zero-shot"
                                                                               : "default";
      entry.kernel.config = ops::format_config(config);
      entry.kernel.gflops = choice.record ? choice.record->gflops : 0;
      entries.push_back(std::move(entry));
    }
  }
  if (entries.empty()) throw ModelError("export: the model has no tunable task, so there is nothing to export");

  // Kernel objects, compiled on the compiler's pool.
  std::vector<std::future<host::CompileResult>> pending;
  for (detail::TableEntry& entry : entries) {
    host::CompileRequest request;
    request.target = target;
    request.output = host::CompileRequest::Output::object;
    request.source = entry.op->source(ops::Backend::cpu, entry.kernel.params, ops::parse_pairs(entry.kernel.config));
    detail::make_kernel_source(entry, request.source, report.notes);
    pending.push_back(compiler.submit(std::move(request)));
  }
  std::vector<host::ObjectInput> objects;
  for (std::size_t i = 0; i < pending.size(); ++i) {
    host::CompileResult result = pending[i].get();
    if (!result.ok)
      throw ModelError("export: compiling " + entries[i].kernel.op + " " + ops::format_params(entries[i].kernel.params) +
                       " (" + entries[i].kernel.config + ") for " + target.to_string() + " failed:\n" +
                       result.diagnostics);
    objects.push_back({entries[i].kernel.entry + ".o", std::move(result.shared_object)});
    if (progress) progress(i + 1, pending.size());
  }
  {
    host::CompileRequest request;
    request.target = target;
    request.output = host::CompileRequest::Output::object;
    request.source.file_name = "kestrel_dispatch.c";
    request.source.text = detail::dispatcher_source(entries);
    host::CompileResult result = compiler.compile(request);
    if (!result.ok) throw ModelError("export: compiling the dispatcher failed (a bug):\n" + result.diagnostics);
    objects.push_back({"kestrel_dispatch.o", std::move(result.shared_object)});
  }

  host::LinkResult shared = host::link_shared_library(objects, "libkestrel_kernels.so");
  if (!shared.ok) throw ModelError("export: linking libkestrel_kernels.so failed:\n" + shared.diagnostics);
  host::LinkResult archive = host::write_static_archive(objects);
  if (!archive.ok) throw ModelError("export: writing libkestrel_kernels.a failed:\n" + archive.diagnostics);

  auto emit = [&](const std::string& name, auto&& bytes) {
    write_file(out_dir / name, bytes);
    report.files.push_back(name);
  };
  emit("libkestrel_kernels.so", shared.bytes);
  emit("libkestrel_kernels.a", archive.bytes);
  emit("kestrel_kernels.h", detail::library_header(entries));
  emit("kestrel_abi.h", embedded::kernel_abi_h());
  std::string runtime_h(embedded::kernel_runtime_h());
  if (auto at = runtime_h.find("\"kestrel/kernel/abi.h\""); at != std::string::npos)
    runtime_h.replace(at, std::strlen("\"kestrel/kernel/abi.h\""), "\"kestrel_abi.h\"");
  emit("kestrel_runtime.h", runtime_h);

  // The runtime for the target.
  const std::vector<fs::path> candidates = runtime_candidates(options);
  for (const fs::path& dir : candidates) {
    std::error_code ec;
    if (!fs::exists(dir / "libkestrel_rt.a", ec) || !fs::exists(dir / "libkestrel_rt.so", ec)) continue;
    for (const char* name : {"libkestrel_rt.a", "libkestrel_rt.so"}) {
      fs::copy_file(dir / name, out_dir / name, fs::copy_options::overwrite_existing, ec);
      if (ec) throw ModelError("cannot copy " + (dir / name).string() + " to " + out_dir.string() + ": " + ec.message());
      report.files.push_back(name);
    }
    report.runtime_copied = true;
    report.runtime_note = "runtime from " + dir.string();
    break;
  }
  if (!report.runtime_copied) {
    const std::string build = target.native ? "cmake --build build --target kestrel_rt kestrel_rt_shared"
                                            : "scripts/build-device.sh " + target.triple;
    report.runtime_note = "no libkestrel_rt.{a,so} for " + target.triple + " found (" +
                          (options.runtime_dir.empty() ? "set KESTREL_RUNTIME_DIR or --runtime-dir"
                                                       : "looked in " + options.runtime_dir) +
                          "); build it with " + build + " and copy it beside the library";
  }

  // The whole model: the plan lowered, and the runtime that runs it on the target.
  if (!options.graphs.empty()) {
    if (options.graphs.size() != options.plans.size() || options.bindings.size() != options.plans.size()) {
      throw ModelError("export: the whole model needs a graph and a binding per plan (a bug)");
    }
    // One program at a time: the writer keeps each distinct weight once, not the programs.
    ProgramsWriter writer(out_dir.string());
    for (std::size_t i = 0; i < options.plans.size(); ++i) {
      const std::string name = options.plans.size() == 1 ? kProgramFile : program_file(options.bindings[i]);
      const Program program = lower_program(*options.graphs[i], options.plans[i], options.bindings[i]);
      writer.add(program, name);
      report.programs.push_back(name);
      report.memory.push_back(memory_stats(program.memory));
    }
    const SavedPrograms saved = writer.finish();
    report.files.push_back(kWeightsFile);
    for (const std::string& name : report.programs) report.files.push_back(name);
    report.weights_bytes = saved.weights_bytes;
    report.program_bytes = saved.program_bytes;
    report.weight_arrays = saved.arrays;
    report.weight_arrays_stored = saved.stored;
    emit("kestrel_model.h", embedded::kestrel_model_h());
    emit("kestrel_model_run.c", embedded::kestrel_model_run_c());
    for (const fs::path& dir : candidates) {
      const fs::path library = dir.parent_path() / "deploy" / "libkestrel_model.so";
      std::error_code ec;
      if (!fs::exists(library, ec)) continue;
      fs::copy_file(library, out_dir / "libkestrel_model.so", fs::copy_options::overwrite_existing, ec);
      if (ec) throw ModelError("cannot copy " + library.string() + " to " + out_dir.string() + ": " + ec.message());
      report.files.push_back("libkestrel_model.so");
      // The example program built for the target too, when it was (it finds the library
      // beside itself): the folder then runs as it is copied to the board.
      const fs::path example = library.parent_path() / "kestrel-model-run";
      if (fs::exists(example, ec)) {
        fs::copy_file(example, out_dir / "kestrel-model-run", fs::copy_options::overwrite_existing, ec);
        if (ec) throw ModelError("cannot copy " + example.string() + " to " + out_dir.string() + ": " + ec.message());
        report.files.push_back("kestrel-model-run");
      }
      report.model_runtime_copied = true;
      report.model_runtime_note = "model runtime from " + library.parent_path().string();
      break;
    }
    if (!report.model_runtime_copied) {
      const std::string build = target.native ? "cmake --build build --target kestrel_model_shared"
                                              : "scripts/build-device.sh " + target.triple;
      report.model_runtime_note = "no libkestrel_model.so for " + target.triple + " found; build it with " + build +
                                  " and copy it beside model.kprog";
    }
  }

  // The manifest.
  nlohmann::json manifest;
  manifest["target"] = target.to_string();
  manifest["block"] = options.plans.empty() ? 0 : options.plans.front().block;
  manifest["model"] = options.model;
  manifest["records"] = records.location();
  manifest["cost_model"] = options.cost_model ? nlohmann::json(options.cost_model_path) : nlohmann::json(nullptr);
  manifest["kernels"] = nlohmann::json::array();
  for (const detail::TableEntry& entry : entries) {
    const ExportedKernel& k = entry.kernel;
    nlohmann::json dynamic = nlohmann::json::array();
    for (const DynamicParam& d : k.dynamic)
      dynamic.push_back({{"param", d.param}, {"symbol", d.symbol}, {"multiplier", d.multiplier}});
    manifest["kernels"].push_back({{"op", k.op},
                                   {"params", ops::format_params(k.params)},
                                   {"dynamic", dynamic},
                                   {"config", k.config},
                                   {"origin", k.origin},
                                   {"gflops", k.gflops},
                                   {"entry", k.entry}});
    report.kernels.push_back(k);
  }
  manifest["programs"] = report.programs;
  manifest["weights"] = report.programs.empty() ? nlohmann::json(nullptr) : nlohmann::json(kWeightsFile);
  manifest["memory"] = nlohmann::json::array();
  for (std::size_t i = 0; i < report.memory.size(); ++i) {
    const MemoryStats& m = report.memory[i];
    manifest["memory"].push_back({{"program", report.programs[i]}, {"arena_bytes", m.arena}, {"buffers_bytes", m.sum},
                                  {"peak_bytes", m.peak}, {"buffers", m.buffers}});
  }
  manifest["notes"] = report.notes;
  emit("manifest.json", manifest.dump(2) + "\n");
  return report;
}

}  // namespace kestrel::deploy
