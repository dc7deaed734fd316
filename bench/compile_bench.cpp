// kestrel-bench-compile: how fast the host compiler turns candidates into loadable
// modules. For gemm and conv2d_nchwc it draws N distinct valid configurations at random
// (a fixed seed), compiles them on a fresh Compiler of T threads without a disk cache (so
// every compile misses) and prints candidates/s of wall time and the mean time of each phase of a
// compile (front end, optimiser, code generation, link), then the default configuration
// alone. A plain program that prints figures:
//   ./build/bench/kestrel-bench-compile [--count N] [--threads T] [--seed S]
//                                       [--op gemm|conv2d_nchwc] [--opt-level L] [--dump DIR]
// --opt-level: CompileRequest::opt_level (default: the compiler's, -O2), e.g. 3 to compare.
// --dump writes each candidate as DIR/<op>-<i>.c (the defines as #defines first), to
// reproduce one compile with clang itself (e.g. -ftime-report). cpu ms/candidate: the
// process's CPU time per compile, which other processes on the cores inflate less than the
// wall-clock figures (the per-phase times are wall clock of the compiling thread).
#include <algorithm>
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "kestrel/host/compiler.h"
#include "kestrel/host/target.h"
#include "kestrel/ops/op.h"

namespace {

using namespace kestrel;
using Clock = std::chrono::steady_clock;

struct Options {
  std::size_t count = 24;
  unsigned threads = 2;
  std::uint64_t seed = 7;
  std::vector<std::string> ops = {"gemm", "conv2d_nchwc"};
  std::string dump;
  int opt_level = host::CompileRequest{}.opt_level;
};

struct Workload {
  std::string op;
  std::string shape;
};

// The workloads of the targets: the tuning session's gemm and a ResNet layer in
// the blocked layout.
const std::vector<Workload> kWorkloads = {
    {"gemm", "M=512,N=512,K=512"},
    {"conv2d_nchwc", "N=1,C=128,H=28,W=28,K=128,R=3,S=3,pad=1"},
};

// Distinct valid configurations of the op's knob space, drawn at random.
std::vector<ops::Config> draw_configs(const ops::Op& op, const ops::Params& params, const ops::TargetTraits& traits,
                                      std::size_t count, std::uint64_t seed) {
  const std::vector<ops::Knob> knobs = op.knobs(params);
  std::mt19937_64 rng(seed);
  std::set<std::string> seen;
  std::vector<ops::Config> configs;
  for (int attempt = 0; attempt < 200000 && configs.size() < count; ++attempt) {
    ops::Config config;
    for (const auto& knob : knobs) {
      std::uniform_int_distribution<std::size_t> pick(0, knob.values.size() - 1);
      config[knob.name] = knob.values[pick(rng)];
    }
    if (!op.check(params, config, traits).empty()) continue;
    if (!seen.insert(ops::format_config(config)).second) continue;
    configs.push_back(std::move(config));
  }
  return configs;
}

void dump(const std::string& dir, const std::string& name, const ops::KernelSource& source) {
  std::filesystem::create_directories(dir);
  std::ofstream out(dir + "/" + name + ".c");
  for (const ops::Define& define : source.defines) out << "#define " << define.name << " " << define.value << "\n";
  out << "#line 1 \"" << source.file_name << "\"\n" << source.text;
}

// CPU time of the whole process (all threads), in ms.
double process_cpu_ms() {
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  auto ms = [](const timeval& t) { return static_cast<double>(t.tv_sec) * 1e3 + static_cast<double>(t.tv_usec) / 1e3; };
  return ms(usage.ru_utime) + ms(usage.ru_stime);
}

struct Totals {
  std::size_t compiled = 0;
  double frontend = 0, optimise = 0, codegen = 0, link = 0, total = 0;
  void add(const host::CompileResult& r) {
    ++compiled;
    frontend += r.phases.frontend_ms;
    optimise += r.phases.optimise_ms;
    codegen += r.phases.codegen_ms;
    link += r.phases.link_ms;
    total += r.compile_ms;
  }
  void print(const char* label, double wall_s, double cpu_ms) const {
    const double n = static_cast<double>(compiled);
    std::printf("  %-15s %3zu candidates %6.1f candidates/s %6.1f cpu ms/candidate | ms: front end %5.1f  optimiser"
                " %6.1f  codegen %6.1f  link %4.1f  total %6.1f\n",
                label, compiled, n / wall_s, cpu_ms / n, frontend / n, optimise / n, codegen / n, link / n, total / n);
  }
};

int run(const Options& options) {
  const ops::Registry registry = ops::builtin_ops();
  const host::Target target = host::parse_target("native");
  std::printf("kestrel-bench-compile: target %s, %u compile threads, %s -O%d\n", target.to_string().c_str(),
              options.threads, host::Compiler::version().c_str(), options.opt_level);
  int failures = 0;
  for (const Workload& workload : kWorkloads) {
    if (std::find(options.ops.begin(), options.ops.end(), workload.op) == options.ops.end()) continue;
    const ops::Op& op = registry.get(workload.op);
    const ops::Params params = ops::parse_params(op, workload.shape);
    std::printf("%s %s\n", workload.op.c_str(), ops::format_params(params).c_str());

    std::vector<host::CompileRequest> requests;
    for (const ops::Config& config : draw_configs(op, params, target.traits, options.count, options.seed)) {
      host::CompileRequest request;
      request.source = op.source(ops::Backend::cpu, params, config);
      request.target = target;
      request.opt_level = options.opt_level;
      if (!options.dump.empty()) dump(options.dump, workload.op + "-" + std::to_string(requests.size()), request.source);
      requests.push_back(std::move(request));
    }
    host::Compiler compiler(host::CompilerOptions{options.threads, 4096, "off"});
    const double cpu_start = process_cpu_ms();
    const auto start = Clock::now();
    const std::vector<host::CompileResult> results = compiler.compile_all(requests);
    const double wall_s = std::chrono::duration<double>(Clock::now() - start).count();
    const double cpu_ms = process_cpu_ms() - cpu_start;
    Totals random;
    for (std::size_t i = 0; i < results.size(); ++i) {
      if (!results[i].ok) {
        ++failures;
        std::printf("  candidate %zu failed:\n%s\n", i, results[i].diagnostics.c_str());
      } else {
        random.add(results[i]);
      }
    }
    random.print("random configs", wall_s, cpu_ms);

    // The default configuration alone, on one thread: what `kestrel profile` compiles.
    host::CompileRequest request;
    request.source = op.source(ops::Backend::cpu, params, op.default_config(params, target.traits));
    request.target = target;
    request.opt_level = options.opt_level;
    if (!options.dump.empty()) dump(options.dump, workload.op + "-default", request.source);
    host::Compiler single(host::CompilerOptions{1, 4096, "off"});
    const double one_cpu = process_cpu_ms();
    const auto one = Clock::now();
    const host::CompileResult result = single.compile(request);
    const double one_s = std::chrono::duration<double>(Clock::now() - one).count();
    const double one_cpu_ms = process_cpu_ms() - one_cpu;
    Totals fallback;
    if (result.ok) {
      fallback.add(result);
      fallback.print("default config", one_s, one_cpu_ms);
    } else {
      ++failures;
      std::printf("  the default config failed:\n%s\n", result.diagnostics.c_str());
    }
  }
  return failures == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  try {
    for (int i = 1; i < argc; ++i) {
      const std::string_view arg = argv[i];
      auto value = [&]() -> std::string {
        if (i + 1 >= argc) throw std::invalid_argument(std::string(arg) + " needs a value");
        return argv[++i];
      };
      if (arg == "--count") options.count = std::stoul(value());
      else if (arg == "--threads") options.threads = static_cast<unsigned>(std::stoul(value()));
      else if (arg == "--seed") options.seed = std::stoull(value());
      else if (arg == "--op") options.ops = {value()};
      else if (arg == "--dump") options.dump = value();
      else if (arg == "--opt-level") options.opt_level = std::stoi(value());
      else throw std::invalid_argument("unknown option " + std::string(arg) + " (see the header of compile_bench.cpp)");
    }
    return run(options);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kestrel-bench-compile: %s\n", e.what());
    return 2;
  }
}
