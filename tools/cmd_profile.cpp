// `kestrel profile`: compile one configuration of an op (or a user kernel file with a
// small JSON spec), time it on a device, and print the statistics.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <sstream>

#include "args.h"
#include "report_error.h"
#include "commands.h"
#include "kestrel/base/log.h"
#include "kestrel/base/stats.h"
#include "kestrel/host/compiler.h"
#include "kestrel/host/leased_pool.h"
#include "kestrel/ops/op.h"
#include "kestrel/tuner/evaluator.h"
#include "kestrel/tuner/task.h"
#include "measure_args.h"

namespace kestrel::tools {
namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw UsageError("cannot read '" + path + "'");
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

// What is being profiled: an op's configuration (a task) or a user kernel file.
struct Subject {
  std::string label;
  double flops = 0;
  // --op
  std::optional<tuner::Task> task;
  ops::Config config;
  // --kernel
  tuner::PreparedKernel kernel;
  tuner::PreparedWorkload workload;
};

// The op's variant for `target`'s backend (GPU kernels have knobs of their own).
Subject subject_from_op(const ops::Registry& registry, const Args& args, const host::Target& target) {
  const ops::Op& op = registry.get(args.get("op"), target.backend);
  if (!args.has("shape")) throw UsageError("--shape is required with --op (see `kestrel ops --op " + args.get("op") + "`)");
  Subject s;
  tuner::Task task;
  task.op = &op;
  task.params = ops::parse_params(op, args.get("shape"));
  task.target = target;
  s.config = ops::parse_config(op, task.params, args.get("config"), target.traits);
  s.label = task.op_name() + " " + task.workload() + " [" + ops::format_config(s.config) + "]";
  s.flops = task.flops();
  s.task = std::move(task);
  return s;
}

// A user kernel: --kernel FILE.c --spec FILE.json, where the spec is
// {"args": [{"name": "x", "elements": 1024, "output": false}, ...],
//  "defines": {"N": "1024"}, "flops": 2048, "reference": "ref.c", "tolerance": 1e-5}
Subject subject_from_file(const Args& args) {
  if (!args.has("spec")) throw UsageError("--kernel needs --spec FILE.json describing its arguments");
  std::string spec_path = args.get("spec");
  nlohmann::json spec = nlohmann::json::parse(read_file(spec_path), nullptr, false);
  if (spec.is_discarded() || !spec.is_object()) throw UsageError("spec '" + spec_path + "' is not a JSON object");
  Subject s;
  s.label = args.get("kernel");
  s.kernel.source.file_name = std::filesystem::path(args.get("kernel")).filename().string();
  s.kernel.source.text = read_file(args.get("kernel"));
  if (!spec.contains("args") || !spec["args"].is_array() || spec["args"].empty()) {
    throw UsageError("spec '" + spec_path + "' needs \"args\": [{\"elements\": N, \"output\": bool}, ...]");
  }
  for (const auto& a : spec["args"]) {
    if (!a.contains("elements") || !a["elements"].is_number_integer() || a["elements"].get<std::int64_t>() <= 0) {
      throw UsageError("spec '" + spec_path + "': every arg needs a positive integer \"elements\"");
    }
    s.workload.workload.args.push_back({a["elements"].get<std::int64_t>(), a.value("output", false)});
  }
  if (spec.contains("defines")) {
    for (const auto& [name, value] : spec["defines"].items()) {
      s.kernel.source.defines.push_back({name, value.is_string() ? value.get<std::string>() : value.dump()});
    }
  }
  s.flops = spec.value("flops", 0.0);
  s.workload.workload.tolerance = spec.value("tolerance", 1e-4);
  if (spec.contains("reference")) {
    auto ref_path = std::filesystem::path(spec_path).parent_path() / spec["reference"].get<std::string>();
    ops::KernelSource ref;
    ref.file_name = ref_path.filename().string();
    ref.text = read_file(ref_path.string());
    ref.defines = s.kernel.source.defines;
    s.workload.reference = ref;
  }
  return s;
}

void print_text(const Subject& subject, const tuner::Evaluation& m, const host::Target& target) {
  std::cout << "kernel:   " << subject.label << "\n"
            << "target:   " << target.to_string() << "\n"
            << "device:   " << (m.device.empty() ? "-" : m.device) << "\n"
            << "status:   " << kernel::to_string(m.status) << "\n";
  if (!m.message.empty()) std::cout << "message:  " << m.message << "\n";
  if (m.compile_ms > 0) std::cout << "compile:  " << std::fixed << std::setprecision(1) << m.compile_ms << " ms\n";
  if (m.status != kernel::Status::ok) return;
  const stats::Summary s = stats::summarize(m.round_seconds);
  std::cout << std::fixed << std::setprecision(3) << "rounds:   " << m.round_seconds.size() << " x " << m.number
            << " calls\n"
            << "min:      " << s.min * 1e3 << " ms\n"
            << "median:   " << s.median * 1e3 << " ms\n"
            << "mean:     " << s.mean * 1e3 << " ms\n"
            << "stddev:   " << s.stddev * 1e3 << " ms\n";
  if (subject.flops > 0) {
    std::cout << std::setprecision(2) << "GFLOP/s:  " << subject.flops / s.median / 1e9 << " (median)\n";
  }
  std::cout << std::scientific << std::setprecision(2) << "max err:  " << m.max_error << "\n";
}

nlohmann::json to_json(const Subject& subject, const tuner::Evaluation& m, const host::Target& target) {
  const stats::Summary s = stats::summarize(m.round_seconds);
  nlohmann::json out = {{"kernel", subject.label},      {"target", target.to_string()},
                        {"device", m.device},           {"status", kernel::to_string(m.status)},
                        {"message", m.message},         {"compile_ms", m.compile_ms},
                        {"number", m.number},           {"round_seconds", m.round_seconds},
                        {"max_error", m.max_error},     {"flops", subject.flops}};
  if (m.status == kernel::Status::ok) {
    out["min_s"] = s.min;
    out["median_s"] = s.median;
    out["mean_s"] = s.mean;
    out["stddev_s"] = s.stddev;
    if (subject.flops > 0) out["gflops"] = subject.flops / s.median / 1e9;
  }
  return out;
}

}  // namespace

int run_profile(int argc, char** argv) {
  Args args("kestrel profile",
            "Compiles one kernel configuration for a device, times it there, and prints the\n"
            "statistics of the timed rounds (min, median, mean, stddev, GFLOP/s) and its status.\n"
            "Without --tracker it starts a local tracker and device and profiles on this machine.");
  args.option("op", "NAME", "op to profile (see `kestrel ops`)");
  args.option("shape", "SHAPE", "workload, e.g. M=512,N=512,K=512 or 512x512x512");
  args.option("config", "KNOBS", "knob values, e.g. mc=64,nr=16 (others: the default config)");
  args.option("kernel", "FILE.c", "profile your own kernel file instead of an op");
  args.option("spec", "FILE.json", "with --kernel: {\"args\": [{\"elements\": N, \"output\": bool}], "
                                     "\"defines\": {}, \"flops\": F, \"reference\": \"ref.c\", \"tolerance\": T}");
  add_pool_options(args);
  add_measure_options(args);
  args.flag("json", "print JSON instead of text");
  args.option("log-level", "LEVEL", "debug, info, warn, error or off", "warn");
  try {
    if (!args.parse(argc, argv, 2)) {
      std::cout << args.help();
      return 0;
    }
    set_log_level(args, "warn");
    if (args.has("op") == args.has("kernel")) throw UsageError("give either --op NAME or --kernel FILE");
    ops::Registry registry = ops::builtin_ops();
    // An op's subject depends on the target (its backend's variant), known once a device
    // is leased; the workload is checked now so that a bad --shape fails fast.
    Subject subject;
    if (args.has("op")) {
      if (!args.has("shape")) throw UsageError("--shape is required with --op (see `kestrel ops --op " + args.get("op") + "`)");
      ops::parse_params(registry.get(args.get("op")), args.get("shape"));
    } else {
      subject = subject_from_file(args);
    }
    rpc::MeasureSettings measure = measure_options(args);
    host::PoolOptions pool_options = tools::pool_options(args, "kestrel profile");
    pool_options.reconnect_window = std::chrono::milliseconds(0);

    tuner::Evaluation result;
    host::Target target;
    host::run_leased(pool_options, [&](host::LeasedPool& leased) -> rpc::awaitable<void> {
      target = resolve_target(args, leased.device());
      if (args.has("op")) {
        subject = subject_from_op(registry, args, target);
      } else if (target.is_gpu()) {
        throw UsageError("--kernel files are CPU C kernels; use --op for " + target.to_string() + " kernels");
      }
      host::Compiler compiler({2});
      tuner::MeasuredEvaluator evaluator(compiler, leased.measurer(), pool_options.key);
      std::vector<tuner::Evaluation> results;
      if (subject.task) {
        std::vector<ops::Config> configs(1, subject.config);
        results = co_await evaluator.evaluate(*subject.task, configs, measure);
      } else {
        std::vector<tuner::PreparedKernel> kernels(1, subject.kernel);
        results = co_await evaluator.evaluate_kernels(kernels, subject.workload, target, measure);
      }
      result = results.front();
      if (result.device.empty()) result.device = leased.device().name;
    });
    if (args.has("json")) {
      std::cout << to_json(subject, result, target).dump(2) << "\n";
    } else {
      print_text(subject, result, target);
    }
    return result.ok() ? 0 : 1;
  } catch (...) {
    return report_error("kestrel profile", std::current_exception());
  }
}

}  // namespace kestrel::tools
