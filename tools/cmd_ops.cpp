// `kestrel ops`: the op library, its workload parameters and knob spaces.
#include <iostream>
#include <optional>

#include "args.h"
#include "report_error.h"
#include "commands.h"
#include "kestrel/host/target.h"
#include "kestrel/ops/op.h"

namespace kestrel::tools {

int run_ops(int argc, char** argv) {
  Args args("kestrel ops", "Lists the built-in ops and their workload parameters. With --op and --shape, shows\n"
                           "the knob space for that workload, its size, and the default configuration. GPU\n"
                           "kernels (cuda, opencl) are variants of an op with knobs of their own. The default\n"
                           "and the constraints follow the target's traits (vector width, registers, caches):\n"
                           "this host's unless --target/--cpu name another.");
  args.option("op", "NAME", "op to describe");
  args.option("backend", "BACKEND", "cpu, cuda or opencl: only the variant with that backend's kernel");
  args.option("shape", "SHAPE", "workload, e.g. M=512,N=512,K=512 or 512x512x512");
  args.option("target", "TRIPLE", "compile target whose traits pick the default (default: native)");
  args.option("cpu", "CPU", "-mcpu of --target, e.g. cortex-a72 or skylake-avx512");
  try {
    if (!args.parse(argc, argv, 2)) {
      std::cout << args.help();
      return 0;
    }
    ops::Registry registry = ops::builtin_ops();
    host::Target target;
    try {
      target = host::parse_target(args.has("target") ? args.get("target") : "native", args.has("cpu") ? args.get("cpu") : "");
    } catch (const std::invalid_argument& e) {
      throw UsageError(e.what());
    }
    std::vector<std::string> names;
    if (args.has("op")) {
      names.push_back(std::string(registry.get(args.get("op")).name()));
    } else {
      for (const ops::Op* op : registry.all()) names.emplace_back(op->name());
    }
    std::optional<ops::Backend> only;
    if (args.has("backend")) {
      const std::string backend = args.get("backend");
      if (backend != "cpu" && backend != "cuda" && backend != "opencl") {
        throw UsageError("--backend must be cpu, cuda or opencl");
      }
      only = backend == "cpu" ? ops::Backend::cpu : backend == "cuda" ? ops::Backend::cuda : ops::Backend::opencl;
    }
    // One entry per op name; its backend variants (a CPU op and a GPU op with knobs of
    // their own) are listed under it.
    for (const std::string& name : names) {
      std::vector<const ops::Op*> variants;
      if (only) {
        variants.push_back(&registry.get(name, *only));
      } else {
        variants = registry.variants(name);
      }
      const ops::Op& primary = *variants.front();
      std::cout << name << ": " << primary.description() << "\n  parameters:\n";
      for (const auto& p : primary.params()) {
        std::cout << "    " << p.name << "  " << p.help;
        if (p.fallback >= p.min) std::cout << " (default " << p.fallback << ")";
        std::cout << "\n";
      }
      std::cout << "  backends:";
      for (const ops::Op* op : variants) {
        for (auto b : op->backends()) std::cout << " " << ops::to_string(b);
      }
      std::cout << "\n";
      if (!args.has("shape")) {
        std::cout << "  (knob space: kestrel ops --op " << name << " --shape ...)\n\n";
        continue;
      }
      ops::Params params = ops::parse_params(primary, args.get("shape"));
      std::cout << "  target: " << target.to_string() << ", " << target.traits.to_string() << "\n";
      std::cout << "  workload: " << ops::format_params(params) << ", " << primary.flops(params) / 1e9 << " GFLOP\n";
      std::cout << "  arguments:\n";
      for (const auto& t : primary.tensors(params)) {
        std::cout << "    " << t.name << "  " << ops::to_string(t.dtype) << "[";
        for (std::size_t i = 0; i < t.shape.size(); ++i) std::cout << (i ? "," : "") << t.shape[i];
        std::cout << "]  " << (t.role == ops::Role::output ? "output" : "input") << "\n";
      }
      for (const ops::Op* op : variants) {
        std::string backends;
        for (auto b : op->backends()) backends += (backends.empty() ? "" : ", ") + std::string(ops::to_string(b));
        double points = 1;
        std::cout << "  knobs (" << backends << "):\n";
        for (const auto& k : op->knobs(params)) {
          points *= static_cast<double>(k.values.size());
          std::cout << "    " << k.name << " {";
          for (std::size_t i = 0; i < k.values.size(); ++i) std::cout << (i ? "," : "") << k.values[i];
          std::cout << "}  " << k.help << "\n";
        }
        std::cout << "  space (" << backends << "): " << points << " points before constraints\n";
        std::cout << "  default (" << backends << "): " << ops::format_config(op->default_config(params, target.traits))
                  << "\n";
      }
      std::cout << "\n";
    }
    return 0;
  } catch (...) {
    return report_error("kestrel ops", std::current_exception());
  }
}

}  // namespace kestrel::tools
