// kestrel-bench-candidate: what one tuning candidate costs end to end on loopback,
// apart from the kernel's own run time, and how fast real kernels compile.
//
// Everything runs for real: an in-process tracker and one kestrel-device child process
// (host::LocalPool), a TrackerClient + MeasureClient holding one lease, and the
// in-process Clang/LLD compiler (host::Compiler).
//
//   BM_CandidateOverhead/compile:1/batch:B
//       A tiny gemm (M=N=K=8; the kernel runs well under a microsecond) measured with
//       number=1, repeat=1, min_repeat_ms=0, threads=1. Every candidate is a NEW
//       configuration (never seen before by the compiler's cache nor the device's module
//       store): one iteration compiles B candidates (Compiler::compile, one thread) and
//       then ships, loads, runs and collects them with one MeasureClient::measure call.
//       Time: one iteration (B candidates), wall clock.
//   BM_CandidateOverhead/compile:2/batch:16
//       The same, the batch compiled with Compiler::compile_all on two compile threads
//       (how a tuner would compile a batch on this 2-core machine).
//   BM_CandidateOverhead/compile:0/batch:B
//       The same with the modules compiled before the timed loop: only measure() is timed.
//
//   Counters (per candidate, means over the iterations):
//       cand_ms     compile + ship/load/run/return, minus the kernel's own run time
//       compile_ms  Compiler::compile
//       rest_ms     measure() minus the kernel's own run time (ship + load + run
//                   machinery + return, reference check included)
//       kernel_us   the kernel's own run time as the device reported it
//       cand/s      candidates per second of wall time (compile + measure)
//   The label compares cand_ms with the 100 ms target (TVM's RPC runner spends about
//   1 s per trial on a board).
//
//   BM_CompileThroughput/op:O/threads:T
//       Real kernels: gemm 512x512x512 (op:0) and the conv2d ResNet layer N=1,C=64,H=56,
//       W=56,K=64,R=3,S=3,pad=1 (op:1). One iteration compiles a batch of distinct valid
//       configurations with Compiler::compile_all on a Compiler of T threads (a fresh
//       Compiler per benchmark, so every compile misses the cache; threads:1 and
//       threads:2 compile the same configurations). kernels/s and ms/kernel: wall clock
//       of the compile_all calls; compile_ms: the compiler's own mean time per kernel
//       (per thread, so it grows when threads share cores); cpu_ms/kernel: CPU time of
//       the process per kernel; cores_used: CPU time / wall time (below the thread
//       count when other processes compete for the cores).
//
// Threads: the client side (TrackerClient, MeasureClient) lives on one io_context run
// by one background thread, so heartbeats are answered while the benchmark thread
// compiles; the benchmark thread hands each measure() over with co_spawn + use_future
// and waits. Teardown at the end of main: MeasureClient::close, TrackerClient::close,
// the io thread joined, then the LocalPool destroyed (device child and tracker stopped).
#include <benchmark/benchmark.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "kestrel/host/compiler.h"
#include "kestrel/host/local_pool.h"
#include "bench_pool.h"
#include "kestrel/host/measure_client.h"
#include "kestrel/host/target.h"
#include "kestrel/ops/op.h"
#include "kestrel/rpc/asio.h"
#include "kestrel/rpc/errors.h"
#include "kestrel/base/log.h"
#include "kestrel/rpc/tracker_client.h"

namespace {

using namespace kestrel;
using Clock = std::chrono::steady_clock;

constexpr std::string_view kLog = "bench";
constexpr double kTargetMs = 100.0;  // per-candidate overhead target
constexpr auto kCallLimit = std::chrono::seconds(120);  // one hand-off to the io thread

// Iterations (explicit, to bound the run time on 2 cores).
constexpr benchmark::IterationCount kSingleIterations = 30;
constexpr benchmark::IterationCount kBatchIterations = 4;
constexpr std::int64_t kBatch = 16;
constexpr benchmark::IterationCount kCompileIterations = 3;
constexpr std::size_t kCompileBatch = 4;  // kernels per compile_all call

bool g_failed = false;

double to_ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

// CPU time of the whole process (all threads), in ms.
double process_cpu_ms() {
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  auto ms = [](const timeval& t) { return static_cast<double>(t.tv_sec) * 1e3 + static_cast<double>(t.tv_usec) / 1e3; };
  return ms(usage.ru_utime) + ms(usage.ru_stime);
}

// ---- configurations that the caches have never seen ----------------------------------

// Draws distinct valid configurations of an op's knob space for one workload, at random
// with a fixed seed (the spaces of real workloads are far too large to enumerate).
class ConfigSource {
 public:
  ConfigSource(const ops::Op& op, ops::Params params, const ops::TargetTraits& target, std::uint64_t seed)
      : op_(&op), params_(std::move(params)), target_(target), knobs_(op.knobs(params_)), rng_(seed) {}

  // The next unused valid configuration; nullopt when none was found in many draws.
  std::optional<ops::Config> next() {
    for (int attempt = 0; attempt < 20000; ++attempt) {
      ops::Config config;
      for (const auto& knob : knobs_) {
        std::uniform_int_distribution<std::size_t> pick(0, knob.values.size() - 1);
        config[knob.name] = knob.values[pick(rng_)];
      }
      if (!op_->check(params_, config, target_).empty()) continue;
      if (!seen_.insert(ops::format_config(config)).second) continue;
      return config;
    }
    return std::nullopt;
  }

  const ops::Op& op() const { return *op_; }
  const ops::Params& params() const { return params_; }

 private:
  const ops::Op* op_;
  ops::Params params_;
  ops::TargetTraits target_;
  std::vector<ops::Knob> knobs_;
  std::mt19937_64 rng_;
  std::set<std::string> seen_;
};

// ---- the environment: pool, client, compiler ------------------------------------------

struct Env {
  ops::Registry registry = ops::builtin_ops();
  std::unique_ptr<bench::BenchPool> pool;
  host::Target target;

  // The tiny gemm of the overhead benchmarks.
  ops::Params tiny;
  std::unique_ptr<ConfigSource> tiny_configs;
  std::uint64_t nonce = 0;  // KESTREL_BENCH_NONCE once the configurations run out
  std::unique_ptr<host::Compiler> compiler;  // one thread: compile() on the caller
  std::unique_ptr<host::Compiler> compiler2;  // two threads: compile_all()
  host::Workload workload;
  rpc::MeasureSettings options;
  std::uint64_t next_id = 1;
  std::uint64_t refused = 0;  // configurations the compiler refused (skipped)

  void start() {
    pool = std::make_unique<bench::BenchPool>("kestrel-bench-candidate", kCallLimit);
    target = pool->target();

    const ops::Op& gemm = registry.get("gemm");
    tiny = ops::parse_params(gemm, "M=8,N=8,K=8");
    tiny_configs = std::make_unique<ConfigSource>(gemm, tiny, target.traits, 1);
    compiler = std::make_unique<host::Compiler>(host::CompilerOptions{1, 4096});
    compiler2 = std::make_unique<host::Compiler>(host::CompilerOptions{2, 4096});

    for (const auto& t : gemm.tensors(tiny)) workload.args.push_back({t.elements(), t.role == ops::Role::output});
    workload.tolerance = gemm.tolerance(tiny);
    host::CompileResult ref = compiler->compile({gemm.reference(tiny), target});
    if (!ref.ok) throw std::runtime_error("the gemm reference does not compile:\n" + ref.diagnostics);
    workload.reference = {ref.hash, std::make_shared<std::vector<std::uint8_t>>(std::move(ref.shared_object))};

    options.number = 1;
    options.repeat = 1;
    options.min_repeat_ms = 0;
    options.cooldown_ms = 0;
    options.threads = 1;

    // Warm-up outside any timed region: the reference upload, the device's first worker.
    std::vector<host::Candidate> warm = make_candidates(1);
    auto results = measure(warm);
    if (results.front().status != host::Status::ok) {
      throw std::runtime_error("warm-up candidate: " + std::string(host::to_string(results.front().status)) + ": " +
                               results.front().message);
    }
  }

  // The next never-seen kernel source of the tiny gemm.
  ops::KernelSource next_tiny_source() {
    const ops::Op& gemm = tiny_configs->op();
    if (auto config = tiny_configs->next()) return gemm.source(ops::Backend::cpu, tiny, *config);
    ops::KernelSource source = gemm.source(ops::Backend::cpu, tiny, gemm.default_config(tiny, target.traits));
    source.defines.push_back({"KESTREL_BENCH_NONCE", std::to_string(++nonce)});
    return source;
  }

  // The next new candidate the compiler accepts. Configurations it refuses for this
  // target are skipped (a tuner records them as host compile errors and goes on); they
  // still cost their compile time, which is counted.
  host::Candidate compile_candidate() {
    for (int attempt = 0; attempt < 1000; ++attempt) {
      host::CompileResult result = compiler->compile({next_tiny_source(), target});
      if (result.ok) return to_candidate(std::move(result));
      ++refused;
    }
    throw std::runtime_error("1000 tiny gemm configurations in a row do not compile for " + target.to_string());
  }

  host::Candidate to_candidate(host::CompileResult result) {
    if (result.cached) throw std::runtime_error("a candidate hit the compile cache; it should be new");
    host::Candidate candidate;
    candidate.id = next_id++;
    candidate.module.hash = result.hash;
    candidate.module.image = std::make_shared<std::vector<std::uint8_t>>(std::move(result.shared_object));
    return candidate;
  }

  // `count` new candidates, compiled one by one on this thread (Compiler::compile), or
  // with compile_all on the two-thread compiler when `parallel` (refused ones replaced
  // one by one).
  std::vector<host::Candidate> make_candidates(std::int64_t count, bool parallel = false) {
    std::vector<host::Candidate> out;
    if (!parallel) {
      for (std::int64_t i = 0; i < count; ++i) out.push_back(compile_candidate());
      return out;
    }
    std::vector<host::CompileRequest> requests;
    for (std::int64_t i = 0; i < count; ++i) {
      host::CompileRequest request;
      request.source = next_tiny_source();
      request.target = target;
      requests.push_back(std::move(request));
    }
    for (auto& result : compiler2->compile_all(requests)) {
      if (result.ok) {
        out.push_back(to_candidate(std::move(result)));
      } else {
        ++refused;
        out.push_back(compile_candidate());
      }
    }
    return out;
  }

  std::vector<host::Measurement> measure(const std::vector<host::Candidate>& candidates) {
    return pool->measure(workload, candidates, options);
  }

  // Returns false when the teardown was not clean.
  bool stop() { return pool ? pool->stop() : true; }
};

Env* g_env = nullptr;
bool g_env_failed = false;

Env& env() {
  if (g_env_failed) throw std::runtime_error("the local pool failed to start (see above)");
  if (!g_env) {
    auto fresh = std::make_unique<Env>();
    try {
      fresh->start();
    } catch (...) {
      g_env_failed = true;
      fresh->stop();
      throw;
    }
    g_env = fresh.release();
  }
  return *g_env;
}

std::string fixed(double value, int digits) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.*f", digits, value);
  return buffer;
}

// ---- BM_CandidateOverhead ----------------------------------------------------------------

void BM_CandidateOverhead(benchmark::State& state) {
  const bool with_compile = state.range(0) != 0;
  const bool parallel_compile = state.range(0) == 2;
  const std::int64_t batch = state.range(1);
  try {
    Env& e = env();
    // Without compile: every module of the run compiled up front, outside the timing.
    std::vector<host::Candidate> precompiled;
    if (!with_compile) precompiled = e.make_candidates(batch * state.max_iterations);
    std::size_t next_precompiled = 0;

    double compile_ms = 0, measure_ms = 0, kernel_ms = 0;
    std::int64_t candidates_done = 0;
    for (auto _ : state) {
      Clock::time_point t0 = Clock::now();
      std::vector<host::Candidate> candidates;
      if (with_compile) {
        candidates = e.make_candidates(batch, parallel_compile);
      } else {
        candidates.assign(precompiled.begin() + static_cast<std::ptrdiff_t>(next_precompiled),
                          precompiled.begin() + static_cast<std::ptrdiff_t>(next_precompiled + batch));
        next_precompiled += static_cast<std::size_t>(batch);
      }
      Clock::time_point t1 = Clock::now();
      std::vector<host::Measurement> results = e.measure(candidates);
      Clock::time_point t2 = Clock::now();
      for (const auto& m : results) {
        if (m.status != host::Status::ok) {
          throw std::runtime_error("candidate " + std::to_string(m.id) + ": " + std::string(host::to_string(m.status)) +
                                   ": " + m.message);
        }
        for (double s : m.round_seconds) kernel_ms += s * m.number * 1e3;
      }
      compile_ms += to_ms(t1 - t0);
      measure_ms += to_ms(t2 - t1);
      candidates_done += batch;
    }
    if (candidates_done == 0) return;
    const double n = static_cast<double>(candidates_done);
    const double compile_per = with_compile ? compile_ms / n : 0.0;
    const double rest_per = (measure_ms - kernel_ms) / n;
    const double cand_per = compile_per + rest_per;
    state.counters["cand_ms"] = cand_per;
    state.counters["compile_ms"] = compile_per;
    state.counters["rest_ms"] = rest_per;
    state.counters["kernel_us"] = kernel_ms * 1e3 / n;
    state.counters["refused"] = static_cast<double>(e.refused);  // configs the compiler refused so far (skipped)
    state.counters["cand/s"] = n / ((compile_ms * (with_compile ? 1 : 0) + measure_ms) / 1e3);
    state.SetItemsProcessed(candidates_done);
    state.SetLabel(std::string(cand_per < kTargetMs ? "OK" : "OVER") + ": " + fixed(cand_per, 1) +
                   " ms/cand vs target <" + fixed(kTargetMs, 0) + " ms (TVM RPC ~1000 ms/trial)");
  } catch (const std::exception& ex) {
    g_failed = true;
    state.SkipWithError(ex.what());
  }
}

// ---- BM_CompileThroughput ---------------------------------------------------------------

struct CompileSubject {
  std::string name;
  std::vector<host::CompileRequest> requests;  // kCompileIterations * kCompileBatch, distinct
};

// The same requests for every thread count (each benchmark has its own Compiler, so they
// all miss its cache).
const CompileSubject& compile_subject(int which) {
  static std::map<int, CompileSubject> subjects;
  auto it = subjects.find(which);
  if (it != subjects.end()) return it->second;
  Env& e = env();
  const ops::Op& op = e.registry.get(which == 0 ? "gemm" : "conv2d");
  ops::Params params = ops::parse_params(
      op, which == 0 ? "M=512,N=512,K=512" : "N=1,C=64,H=56,W=56,K=64,R=3,S=3,pad=1,stride=1,dilation=1");
  ConfigSource configs(op, params, e.target.traits, 42);
  CompileSubject subject;
  subject.name = std::string(op.name()) + " " + ops::format_params(params);
  const std::size_t needed = static_cast<std::size_t>(kCompileIterations) * kCompileBatch;
  for (std::size_t i = 0; i < needed; ++i) {
    auto config = configs.next();
    if (!config) throw std::runtime_error("ran out of configurations for " + subject.name);
    host::CompileRequest request;
    request.source = op.source(ops::Backend::cpu, params, *config);
    request.target = e.target;
    subject.requests.push_back(std::move(request));
  }
  return subjects.emplace(which, std::move(subject)).first->second;
}

void BM_CompileThroughput(benchmark::State& state) {
  const int which = static_cast<int>(state.range(0));
  const auto threads = static_cast<unsigned>(state.range(1));
  try {
    const CompileSubject& subject = compile_subject(which);
    host::Compiler compiler(host::CompilerOptions{threads, 4096});
    std::size_t next = 0;
    double sum_kernel_ms = 0;  // the compiler's own per-kernel time (compile_ms)
    double wall_ms = 0;        // compile_all calls, wall clock
    double cpu_ms = 0;         // compile_all calls, CPU time of the process
    std::int64_t kernels = 0;
    for (auto _ : state) {
      if (next + kCompileBatch > subject.requests.size()) throw std::runtime_error("more iterations than requests");
      std::vector<host::CompileRequest> batch(subject.requests.begin() + static_cast<std::ptrdiff_t>(next),
                                              subject.requests.begin() + static_cast<std::ptrdiff_t>(next + kCompileBatch));
      next += kCompileBatch;
      Clock::time_point t0 = Clock::now();
      const double cpu0 = process_cpu_ms();
      std::vector<host::CompileResult> results = compiler.compile_all(batch);
      cpu_ms += process_cpu_ms() - cpu0;
      wall_ms += to_ms(Clock::now() - t0);
      for (const auto& r : results) {
        if (!r.ok) throw std::runtime_error(subject.name + ": a kernel does not compile:\n" + r.diagnostics);
        if (r.cached) throw std::runtime_error(subject.name + ": a kernel hit the compile cache");
        sum_kernel_ms += r.compile_ms;
      }
      kernels += static_cast<std::int64_t>(results.size());
    }
    if (kernels == 0) return;
    state.counters["kernels/s"] = static_cast<double>(kernels) / (wall_ms / 1e3);
    state.counters["ms/kernel"] = wall_ms / static_cast<double>(kernels);
    state.counters["compile_ms"] = sum_kernel_ms / static_cast<double>(kernels);
    state.counters["cpu_ms/kernel"] = cpu_ms / static_cast<double>(kernels);
    state.counters["cores_used"] = cpu_ms / wall_ms;
    state.SetItemsProcessed(kernels);
    state.SetLabel(subject.name);
  } catch (const std::exception& ex) {
    g_failed = true;
    state.SkipWithError(ex.what());
  }
}

void register_benchmarks() {
  // compile:1 batch 1 and 16, compile:2 batch 16 (compile_all only pays with a batch),
  // compile:0 batch 1 and 16.
  const std::int64_t overhead_args[][2] = {{1, 1}, {1, kBatch}, {2, kBatch}, {0, 1}, {0, kBatch}};
  for (const auto& args : overhead_args) {
    benchmark::RegisterBenchmark("BM_CandidateOverhead", BM_CandidateOverhead)
        ->ArgNames({"compile", "batch"})
        ->Args({args[0], args[1]})
        ->Iterations(args[1] == 1 ? kSingleIterations : kBatchIterations)
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
  }
  for (int op : {0, 1}) {
    for (int threads : {1, 2}) {
      benchmark::RegisterBenchmark("BM_CompileThroughput", BM_CompileThroughput)
          ->ArgNames({"op", "threads"})
          ->Args({op, threads})
          ->Iterations(kCompileIterations)
          ->UseRealTime()
          ->Unit(benchmark::kMillisecond);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  bench::locate_device_binary();
  log::set_level(log::Level::warn);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  register_benchmarks();
  benchmark::RunSpecifiedBenchmarks();
  bool clean = true;
  if (g_env) {
    clean = g_env->stop();
    delete g_env;
    g_env = nullptr;
  }
  benchmark::Shutdown();
  if (!clean) std::fprintf(stderr, "kestrel-bench-candidate: shutdown was not clean (see the log above)\n");
  return clean && !g_failed && !g_env_failed ? 0 : 1;
}
