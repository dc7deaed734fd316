// The comparison harness (see harness.h): preparing workloads, the correctness gate and
// the interleaved timing of Kestrel's kernel and the libraries.
#include "kestrel/base/stats.h"
#include "kestrel/compare/harness.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <stdexcept>
#include <thread>

#include "kestrel/device_runtime/kernel_runner.h"
#include "kestrel/device_runtime/kernel_services.h"
#include "kestrel/host/compiler.h"

namespace kestrel::compare {
namespace {

using device::CpuKernelModule;
using device::FloatBuffer;

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The median, 0 for none (a contender that timed nothing).
double median(const std::vector<double>& v) { return v.empty() ? 0 : stats::median(v); }

// "wrong answer: max error ... exceeds tolerance ...; first: element ..." when an output
// is not within the tolerance of the expected one, else empty.
std::string compare(std::size_t argument, std::span<const float> got, std::span<const float> want, double tolerance) {
  device::OutputCheck check(tolerance);
  check.add(argument, got, want);
  return check.ok() ? std::string() : "wrong answer: " + check.message();
}

// One workload, prepared once for every thread count: inputs, the compiled kernel, and
// (when needed) the op reference kernel's output.
struct Prepared {
  WorkloadReport report;
  bool canonical = false;
  std::vector<FloatBuffer> buffers;  // the op's tensors, in argument order
  std::vector<kestrel_arg> args;
  std::size_t output_index = 0;
  std::optional<CpuKernelModule> kernel;
  std::optional<FloatBuffer> reference_output;
  std::vector<FloatBuffer> library_inputs;  // when the op's layout is not the canonical one
  std::string error;                        // compile or load failure: no Kestrel figures
};

class KestrelContender final : public Contender {
 public:
  KestrelContender(Prepared& w, device::KernelServices& services) : w_(w), services_(services) {}
  std::string name() const override { return "kestrel"; }
  std::string description() const override { return "Kestrel kernel " + ops::format_config(w_.report.choice.config); }
  void run() override {
    std::int32_t rc = w_.kernel->call(services_.table(), w_.args);
    if (rc != 0) throw std::runtime_error("the Kestrel kernel returned error code " + std::to_string(rc));
  }
  std::span<const float> output() override { return w_.buffers[w_.output_index].view(); }

 private:
  Prepared& w_;
  device::KernelServices& services_;
};

// ---- timing ---------------------------------------------------------------------------------

// Calls per round from the runner's calibration, then interleaved rounds.
void time_contenders(std::vector<Contender*> contenders, std::vector<Timing*> timings, double flops,
                     device::KernelServices& services, const TimingSettings& settings) {
  const double settle = settings.settle_for(services.threads());
  std::vector<std::uint64_t> number(contenders.size(), 1);
  for (std::size_t i = 0; i < contenders.size(); ++i) {
    number[i] = device::calibrate_number(settings.min_round_s, [&](std::uint32_t calls) {
      double start = now_seconds();
      for (std::uint32_t call = 0; call < calls; ++call) contenders[i]->run();
      double seconds = now_seconds() - start;
      services.reclaim_scratch();
      return seconds;
    });
    timings[i]->calls_per_round = number[i];
  }
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
                   const TimingSettings& settings, std::vector<std::string>& notes) {
  Row row;
  row.workload = index;
  row.threads = threads;
  row.kestrel.name = "kestrel";
  if (!w.error.empty()) row.kestrel.status = w.error;
  const ops::Op& op = *w.report.workload.op;
  const ops::Params& params = w.report.workload.params;
  double flops = op.flops(params);
  double tolerance = op.tolerance(params);

  std::vector<std::unique_ptr<Contender>> libraries;
  if (w.report.problem) {
    std::vector<const float*> inputs;
    if (w.canonical) {
      for (std::size_t i = 0; i < w.buffers.size(); ++i) {
        if (i != w.output_index) inputs.push_back(w.buffers[i].data());
      }
    } else {
      for (auto& b : w.library_inputs) inputs.push_back(b.data());
    }
    libraries = make_contenders(*w.report.problem, inputs, notes);
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
  std::vector<Contender*> timed;
  std::vector<Timing*> timings;
  if (w.canonical && !libraries.empty()) {
    libraries.front()->run();
    auto out = libraries.front()->output();
    expected.emplace(out.begin(), out.end());
    row.checked_against = libraries.front()->name();
  } else if (w.reference_output) {
    expected.emplace(w.reference_output->view().begin(), w.reference_output->view().end());
    row.checked_against = "the op's reference kernel";
  }
  KestrelContender kestrel(w, services);
  if (w.error.empty()) {
    std::string problem;
    try {
      device::fill_nan(w.buffers[w.output_index].span());
      kestrel.run();
      services.reclaim_scratch();
      if (expected) problem = compare(w.output_index, kestrel.output(), *expected, tolerance);
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
      std::string problem = compare(w.output_index, lib->output(), *expected, tolerance);
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

// ---- preparing workloads -----------------------------------------------------------------

// Inputs, the compiled kernel and, without a library of the same layout, the op reference
// kernel's output. Failures land in w.error.
void prepare(Prepared& w, host::Compiler& compiler, const Options& options, device::KernelServices& services) {
  const ops::Op& op = *w.report.workload.op;
  const ops::Params& params = w.report.workload.params;
  w.report.problem = problem_for(op, params);
  w.canonical = w.report.problem && canonical_layout(op, params, *w.report.problem);
  // The device worker's inputs: argument i is filled from seed + i.
  auto tensors = op.tensors(params);
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    w.buffers.emplace_back(tensors[i].elements());
    if (tensors[i].role == ops::Role::input) device::fill_uniform(w.buffers.back().span(), options.seed + i);
    else w.output_index = i;
    w.args.push_back(kestrel_arg{w.buffers.back().data(), tensors[i].elements(), 0.0});
  }
  if (w.report.problem && !w.canonical) {
    std::uint64_t s = options.seed + 100;
    for (const auto& shape : w.report.problem->input_shapes()) {
      std::int64_t n = 1;
      for (auto d : shape) n *= d;
      w.library_inputs.emplace_back(n);
      device::fill_uniform(w.library_inputs.back().span(), s++);
    }
  }
  const std::string name(op.name());
  std::string error;
  try {
    ops::KernelSource source = op.source(ops::Backend::cpu, params, w.report.choice.config);
    if (!options.kernel_text.empty()) {
      source.text = options.kernel_text;
      source.file_name = options.kernel_path;
    }
    host::CompileResult compiled = compiler.compile({source, options.target, 3});
    if (!compiled.ok) {
      w.error = "compile error: " + compiled.diagnostics.substr(0, 400);
      return;
    }
    w.kernel = CpuKernelModule::load(compiled.shared_object, name, "", error);
    if (!w.kernel) {
      w.error = error;
      return;
    }
  } catch (const std::exception& e) {
    w.error = e.what();
    return;
  }
  // Without a library of the same layout, the op's reference kernel checks Kestrel.
  LibraryStatus libraries = library_status();
  if (w.canonical && (libraries.openblas || libraries.onednn)) return;
  host::CompileResult ref = compiler.compile({op.reference(params), options.target, 2});
  if (!ref.ok) {
    w.error = "reference kernel: compile error: " + ref.diagnostics.substr(0, 400);
    return;
  }
  auto reference = CpuKernelModule::load(ref.shared_object, name + "-ref", "", error);
  if (!reference) {
    w.error = "reference kernel: " + error;
    return;
  }
  device::fill_nan(w.buffers[w.output_index].span());
  std::int32_t rc = reference->call(services.table(), w.args);
  services.reclaim_scratch();
  if (rc != 0) {
    w.error = "reference kernel returned " + std::to_string(rc);
    return;
  }
  w.reference_output.emplace(w.buffers[w.output_index].size());
  auto out = w.buffers[w.output_index].view();
  std::copy(out.begin(), out.end(), w.reference_output->data());
}

}  // namespace

Report run(const Options& options) {
  Report report;
  for (const auto& m : library_status().missing) report.notes.push_back(m);
  host::Compiler compiler;
  std::vector<Prepared> prepared(options.workloads.size());
  {
    // Reference outputs are computed on one thread, before timing.
    device::KernelServices services(1);
    for (std::size_t i = 0; i < options.workloads.size(); ++i) {
      Prepared& w = prepared[i];
      w.report.workload = options.workloads[i];
      const ops::Op& op = *w.report.workload.op;
      w.report.text = ops::describe_workload(op, w.report.workload.params);
      w.report.choice = config_to_time(op, w.report.workload.params, options.target.id(), options.target.traits, options.best, options.db, options.config);
      if (!options.kernel_path.empty()) {
        w.report.choice.detail = "kernel " + options.kernel_path + " with the " + w.report.choice.source + " config";
        w.report.choice.source = "file";
      }
      prepare(w, compiler, options, services);
    }
  }
  for (unsigned t : options.threads) {
    device::KernelServices services(t);
    set_library_threads(t);
    for (std::size_t i = 0; i < prepared.size(); ++i) {
      if (options.on_workload) options.on_workload(prepared[i].report.workload, t);
      report.rows.push_back(bench_workload(prepared[i], i, t, services, options.timing, report.notes));
    }
  }
  for (auto& w : prepared) report.workloads.push_back(std::move(w.report));
  std::sort(report.notes.begin(), report.notes.end());
  report.notes.erase(std::unique(report.notes.begin(), report.notes.end()), report.notes.end());
  return report;
}

}  // namespace kestrel::compare
