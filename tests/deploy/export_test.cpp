// export_library: a library for this machine, loaded and called through its dispatcher
// and typed entries against the ops' reference kernels; run-time (dynamic) parameters at
// sizes that were not exported; the archive's members; no NEEDED entries; the errors.
#include "kestrel/deploy/export.h"

#include <dlfcn.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include <nlohmann/json.hpp>

#include "deploy/export_util.h"
#include "kestrel/kernel/runtime.h"

namespace kestrel::deploy {

using model::DynamicParam;
using model::ModelTask;
using model::Plan;

namespace {

using test::Library;
using test::Scratch;

ModelTask task_of(const std::string& op, const ops::Params& params, std::vector<DynamicParam> dynamic = {}) {
  ModelTask task;
  task.op = &ops::builtin_registry().get(op, ops::Backend::cpu);
  task.params = params;
  task.dynamic = std::move(dynamic);
  task.occurrences = 1;
  return task;
}

records::Record record_for(const host::Target& target, const ops::Op& op, const ops::Params& params,
                         const ops::Config& config) {
  records::Record r;
  r.op = std::string(op.name());
  r.workload = params;
  r.target = target.id();
  r.device_class = {"local", "test cpu", target.triple + "|test cpu|2"};
  r.device = "cpu0";
  r.config = config;
  r.round_seconds = {1e-3, 1e-3, 1e-3};
  r.cost = 1e-3;
  r.gflops = 12.5;
  r.session = "export-test";
  return r;
}

std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string run_command(const std::string& command) {
  std::string out;
  if (FILE* pipe = ::popen(command.c_str(), "r")) {
    char buffer[4096];
    while (std::size_t n = std::fread(buffer, 1, sizeof buffer, pipe)) out.append(buffer, n);
    ::pclose(pipe);
  }
  return out;
}

TEST_CASE("export writes a native library whose dispatcher runs the tuned and default kernels") {
  Scratch scratch;
  const host::Target target = host::parse_target("native");
  const ops::Registry registry = ops::builtin_ops();
  const ops::Op& gemm = registry.get("gemm", ops::Backend::cpu);
  const ops::Op& softmax = registry.get("softmax", ops::Backend::cpu);
  const ops::Params gemm_params{{"M", 33}, {"N", 40}, {"K", 24}};
  const ops::Params softmax_params{{"rows", 9}, {"cols", 70}};

  auto records = records::open_records((scratch.path() / "tune.db").string());
  // A valid configuration other than the default: what the record says must be compiled in.
  const ops::Config fallback = gemm.default_config(gemm_params, target.traits);
  ops::Config tuned = fallback;
  for (const auto& knob : gemm.knobs(gemm_params)) {
    for (auto value : knob.values) {
      ops::Config candidate = fallback;
      candidate[knob.name] = value;
      if (tuned == fallback && candidate != fallback && gemm.check(gemm_params, candidate, target.traits).empty()) {
        tuned = candidate;
      }
    }
  }
  REQUIRE(tuned != fallback);
  records->add(record_for(target, gemm, gemm_params, tuned));

  Plan plan;
  plan.tasks = {task_of("gemm", gemm_params), task_of("softmax", softmax_params), task_of("gemm", gemm_params)};
  ExportOptions options;
  options.target = target;
  options.out_dir = (scratch.path() / "out").string();
  options.plans = {plan};
  options.runtime_dir = KESTREL_RUNTIME_BUILD_DIR;
  options.model = "hand-built";
  host::Compiler compiler;
  std::size_t last_done = 0, last_total = 0;
  const ExportReport report = export_library(*records, compiler, options, [&](std::size_t done, std::size_t total) {
    last_done = done;
    last_total = total;
  });

  REQUIRE(report.kernels.size() == 2);  // the repeated task once
  CHECK(last_done == 2);
  CHECK(last_total == 2);
  CHECK(report.kernels[0].origin == "tuned");
  CHECK(report.kernels[0].gflops == 12.5);
  CHECK(report.kernels[0].config == ops::format_config(tuned));
  CHECK(report.kernels[1].origin == "default");
  CHECK(report.runtime_copied);
  const std::filesystem::path out = options.out_dir;
  for (const char* name : {"kestrel_kernels.h", "kestrel_abi.h", "kestrel_runtime.h", "libkestrel_kernels.so",
                           "libkestrel_kernels.a", "libkestrel_rt.a", "libkestrel_rt.so", "manifest.json"}) {
    INFO(name);
    CHECK(std::filesystem::exists(out / name));
  }
  const std::string header = read_text(out / "kestrel_kernels.h");
  CHECK(header.find("#define KESTREL_GEMM_PARAMS \"M,N,K,bias,residual,act,panels\"") != std::string::npos);
  CHECK(header.find("int32_t kestrel_softmax(const kestrel_services* svc, const kestrel_softmax_shape* shape") !=
        std::string::npos);
  CHECK(read_text(out / "kestrel_runtime.h").find("#include \"kestrel_abi.h\"") != std::string::npos);
  const auto manifest = nlohmann::json::parse(read_text(out / "manifest.json"));
  CHECK(manifest["model"] == "hand-built");
  REQUIRE(manifest["kernels"].size() == 2);
  CHECK(manifest["kernels"][0]["origin"] == "tuned");
  CHECK(manifest["kernels"][1]["op"] == "softmax");

  // No NEEDED entries: the library runs in any process, linked with any C library.
  const std::string dynamic = run_command("readelf -d '" + (out / "libkestrel_kernels.so").string() + "' 2>&1");
  CHECK(dynamic.find("Dynamic section") != std::string::npos);
  CHECK(dynamic.find("NEEDED") == std::string::npos);
  CHECK(run_command("nm -u '" + (out / "libkestrel_kernels.so").string() + "' 2>&1").empty());
  // Every object is in the archive.
  const std::string members = run_command("ar t '" + (out / "libkestrel_kernels.a").string() + "' 2>&1");
  CHECK(members == "kestrel_k0.o\nkestrel_k1.o\nkestrel_dispatch.o\n");

  Library library(out / "libkestrel_kernels.so");
  kestrel_services* svc = kestrel_runtime_create(2);
  REQUIRE(svc != nullptr);
  SECTION("the generic entry runs both kernels and matches the references") {
    CHECK(test::dispatch_matches(library, svc, gemm, gemm_params, compiler));
    CHECK(test::dispatch_matches(library, svc, softmax, softmax_params, compiler));
  }
  SECTION("the typed entries and their which functions") {
    using which_fn = const char* (*)(const std::int64_t*);
    auto gemm_which = library.symbol<which_fn>("kestrel_gemm_which");
    const std::int64_t shape[] = {33, 40, 24, 0, 0, 0, 0};
    CHECK(std::string(gemm_which(shape)) == "tuned " + ops::format_config(tuned));
    auto softmax_which = library.symbol<which_fn>("kestrel_softmax_which");
    const std::int64_t softmax_shape[] = {9, 70, 0};
    CHECK(std::string(softmax_which(softmax_shape)).starts_with("default "));
    const std::int64_t unknown[] = {34, 40, 24, 0, 0, 0, 0};
    CHECK(gemm_which(unknown) == nullptr);
    CHECK(test::typed_matches(library, svc, gemm, "kestrel_gemm", gemm_params, compiler));
  }
  SECTION("an unknown shape or op has no kernel") {
    using dispatch_fn = std::int32_t (*)(const kestrel_services*, const char*, const std::int64_t*, std::int32_t,
                                         const kestrel_arg*, std::int32_t);
    auto dispatch = library.symbol<dispatch_fn>("kestrel_dispatch");
    const std::int64_t params[] = {34, 40, 24, 0, 0, 0};
    kestrel_arg args[3] = {};
    CHECK(dispatch(svc, "gemm", params, 6, args, 3) == -1);
    CHECK(dispatch(svc, "conv2d", params, 6, args, 3) == -1);
    CHECK(dispatch(svc, "gemm", params, 3, args, 3) == -1);
    // Optional parameters at the end may be left out (a program written before softmax had
    // nan_zero): {9, 70} finds the kernel {9, 70, nan_zero=0} runs; too few or too many do not.
    auto which = library.symbol<const char* (*)(const char*, const std::int64_t*, std::int32_t)>("kestrel_dispatch_which");
    const std::int64_t given[] = {9, 70, 0, 0};
    REQUIRE(which("softmax", given, 2) != nullptr);
    CHECK(std::string(which("softmax", given, 2)) == std::string(which("softmax", given, 3)));
    CHECK(which("softmax", given, 1) == nullptr);
    CHECK(which("softmax", given, 4) == nullptr);
    const std::int64_t nan_zero[] = {9, 70, 1};
    CHECK(which("softmax", nan_zero, 3) == nullptr);
    // And the kernel runs from the two parameters as from three.
    std::vector<float> x(9 * 70), y2(9 * 70, -1.0f), y3(9 * 70, -2.0f);
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 13) * 0.25f - 1.0f;
    kestrel_arg two[2] = {{x.data(), 9 * 70, 0.0}, {y2.data(), 9 * 70, 0.0}};
    kestrel_arg three[2] = {{x.data(), 9 * 70, 0.0}, {y3.data(), 9 * 70, 0.0}};
    CHECK(dispatch(svc, "softmax", given, 2, two, 2) == 0);
    CHECK(dispatch(svc, "softmax", given, 3, three, 2) == 0);
    CHECK(y2 == y3);
  }
  kestrel_runtime_destroy(svc);
}

TEST_CASE("exported kernels with run-time parameters compute sizes that were not exported") {
  Scratch scratch;
  const host::Target target = host::parse_target("native");
  const ops::Registry registry = ops::builtin_ops();
  auto records = records::open_records((scratch.path() / "tune.db").string());
  // One record of some task, so the target has records; the dynamic kernels are defaults.
  const ops::Op& gemm = registry.get("gemm", ops::Backend::cpu);
  const ops::Params other{{"M", 8}, {"N", 8}, {"K", 8}};
  records->add(record_for(target, gemm, other, gemm.default_config(other, target.traits)));

  // A sequence length "seq" exported at the buckets 16 and 48, as an encoder layer's tasks.
  auto plan_at = [](std::int64_t seq) {
    Plan plan;
    plan.symbols = {{"seq", seq}};
    plan.tasks = {
        task_of("gemm", {{"M", seq}, {"N", 48}, {"K", 40}, {"bias", 1}, {"act", 3}}, {{"M", "seq", 1}}),
        task_of("softmax", {{"rows", 3 * seq}, {"cols", seq}}, {{"rows", "seq", 3}, {"cols", "seq", 1}}),
        task_of("batch_matmul", {{"batch", 3}, {"M", seq}, {"N", seq}, {"K", 16}, {"trans_b", 1}},
                {{"M", "seq", 1}, {"N", "seq", 1}}),
        task_of("batch_matmul", {{"batch", 3}, {"M", seq}, {"N", 16}, {"K", seq}}, {{"M", "seq", 1}, {"K", "seq", 1}}),
        task_of("layernorm", {{"rows", seq}, {"cols", 48}, {"residual", 1}}, {{"rows", "seq", 1}}),
        task_of("elementwise", {{"n", 48 * seq}, {"kind", 5}}, {{"n", "seq", 48}}),
    };
    return plan;
  };
  ExportOptions options;
  options.target = target;
  options.out_dir = (scratch.path() / "out").string();
  options.plans = {plan_at(16), plan_at(48)};
  options.runtime_dir = KESTREL_RUNTIME_BUILD_DIR;
  host::Compiler compiler;
  const ExportReport report = export_library(*records, compiler, options);
  REQUIRE(report.kernels.size() == 12);
  CHECK(report.notes.empty());
  for (const ExportedKernel& k : report.kernels) CHECK(!k.dynamic.empty());

  Library library(std::filesystem::path(options.out_dir) / "libkestrel_kernels.so");
  kestrel_services* svc = kestrel_runtime_create(2);
  REQUIRE(svc != nullptr);
  for (std::int64_t seq : {1, 7, 16, 30, 48, 61}) {
    const Plan plan = plan_at(seq);
    for (const ModelTask& task : plan.tasks) {
      INFO(task.op << " " << ops::format_params(task.params) << " at seq=" << seq);
      const ops::Op& op = *task.op;
      const std::string which = library.which(op, task.params);
      CHECK(which.starts_with(seq == 16 || seq == 48 ? "default " : "bucket seq="));
      if (seq != 16 && seq != 48) CHECK(which.starts_with(seq <= 16 ? "bucket seq=16 " : "bucket seq=48 "));
      CHECK(test::dispatch_matches(library, svc, op, task.params, compiler));
    }
  }
  // A shape whose dynamic parameters disagree on the symbol has no kernel.
  const ops::Op& softmax = registry.get("softmax", ops::Backend::cpu);
  CHECK(library.which(softmax, {{"rows", 3 * 20}, {"cols", 21}}).empty());
  kestrel_runtime_destroy(svc);
}

TEST_CASE("export refuses a target with no records and an unwritable output folder") {
  Scratch scratch;
  const host::Target target = host::parse_target("native");
  auto records = records::open_records((scratch.path() / "tune.db").string());
  Plan plan;
  plan.tasks = {task_of("softmax", {{"rows", 4}, {"cols", 8}})};
  ExportOptions options;
  options.target = target;
  options.out_dir = (scratch.path() / "out").string();
  options.plans = {plan};
  host::Compiler compiler(host::CompilerOptions{1, 16});
  CHECK_THROWS_WITH(export_library(*records, compiler, options),
                    Catch::Contains("no records for " + target.triple) && Catch::Contains("tune for it first"));

  const ops::Registry registry = ops::builtin_ops();
  const ops::Op& gemm = registry.get("gemm", ops::Backend::cpu);
  const ops::Params p{{"M", 8}, {"N", 8}, {"K", 8}};
  records::Record other = record_for(target, gemm, p, gemm.default_config(p, target.traits));
  other.target = *ops::TargetId::parse("aarch64-linux-gnu (cortex-a72)");
  records->add(other);
  CHECK_THROWS_WITH(export_library(*records, compiler, options), Catch::Contains("no records for " + target.triple));

  records->add(record_for(target, gemm, p, gemm.default_config(p, target.traits)));
  // A runtime folder without the runtime: the library is written, the note says how to build it.
  std::filesystem::create_directories(scratch.path() / "empty");
  options.runtime_dir = (scratch.path() / "empty").string();
  const ExportReport without = export_library(*records, compiler, options);
  CHECK_FALSE(without.runtime_copied);
  CHECK(without.runtime_note.find("no libkestrel_rt.{a,so} for " + target.triple) != std::string::npos);
  CHECK(without.runtime_note.find("cmake --build build --target kestrel_rt kestrel_rt_shared") != std::string::npos);
  CHECK(std::filesystem::exists(scratch.path() / "out" / "libkestrel_kernels.so"));

  std::ofstream(scratch.path() / "file") << "x";
  options.out_dir = (scratch.path() / "file" / "out").string();
  CHECK_THROWS_WITH(export_library(*records, compiler, options), Catch::Contains("cannot write to the output folder"));
}

}  // namespace
}  // namespace kestrel::deploy

namespace kestrel::deploy {
namespace {

TEST_CASE("kernels of every CPU op link into one library and each runs through the dispatcher") {
  test::Scratch scratch;
  const host::Target target = host::parse_target("native");
  const ops::Registry registry = ops::builtin_ops();
  const std::int64_t b = std::max<std::int64_t>(4, target.traits.vector_floats);
  std::vector<std::pair<std::string, ops::Params>> tasks = {
      {"conv2d", {{"C", 6}, {"H", 9}, {"W", 9}, {"K", 5}, {"R", 3}, {"S", 3}, {"pad", 1}}},
      {"conv2d_nchwc",
       {{"C", 2 * b}, {"H", 9}, {"W", 9}, {"K", 2 * b}, {"R", 3}, {"S", 3}, {"pad", 1}, {"block", b}, {"bias", 1},
        {"act", 1}}},
      {"depthwise_conv2d", {{"C", 2 * b}, {"H", 9}, {"W", 9}, {"R", 3}, {"S", 3}, {"pad", 1}, {"block", b}}},
      {"pool2d", {{"C", 2 * b}, {"H", 8}, {"W", 8}, {"R", 2}, {"S", 2}, {"stride", 2}, {"block", b}}},
      {"layout_nchwc", {{"C", 2 * b}, {"H", 5}, {"W", 5}, {"block", b}}},
      {"batch_matmul", {{"batch", 2}, {"M", 9}, {"N", 10}, {"K", 11}}},
      {"gemm", {{"M", 12}, {"N", 13}, {"K", 14}, {"residual", 1}}},
      {"softmax", {{"rows", 3}, {"cols", 17}}},
      {"layernorm", {{"rows", 3}, {"cols", 40}}},
      {"elementwise", {{"n", 100}, {"kind", 0}}},
      {"elementwise", {{"n", 100}, {"kind", 6}}},
  };
  auto records = records::open_records((scratch.path() / "tune.db").string());
  const ops::Op& gemm = registry.get("gemm", ops::Backend::cpu);
  const ops::Params some{{"M", 8}, {"N", 8}, {"K", 8}};
  records->add(record_for(target, gemm, some, gemm.default_config(some, target.traits)));
  Plan plan;
  // Workloads as the planner gives them: validated, parameters with a fallback filled in.
  for (auto& [op, params] : tasks) {
    params = ops::parse_params(registry.get(op, ops::Backend::cpu), ops::format_params(params));
    plan.tasks.push_back(task_of(op, params));
  }
  ExportOptions options;
  options.target = target;
  options.out_dir = (scratch.path() / "out").string();
  options.plans = {plan};
  // No runtime folder given: the search finds this build's (beside the test program).
  ::unsetenv("KESTREL_RUNTIME_DIR");
  host::Compiler compiler;
  const ExportReport report = export_library(*records, compiler, options);
  REQUIRE(report.kernels.size() == tasks.size());
  CHECK(report.runtime_copied);
  CHECK(report.runtime_note == "runtime from " + std::filesystem::path(KESTREL_RUNTIME_BUILD_DIR).string());

  Library library(std::filesystem::path(options.out_dir) / "libkestrel_kernels.so");
  kestrel_services* svc = kestrel_runtime_create(2);
  REQUIRE(svc != nullptr);
  for (const auto& [name, params] : tasks) {
    INFO(name << " " << ops::format_params(params));
    const ops::Op& op = registry.get(name, ops::Backend::cpu);
    CHECK(library.which(op, params).starts_with("default "));
    CHECK(test::dispatch_matches(library, svc, op, params, compiler));
  }
  kestrel_runtime_destroy(svc);
}

}  // namespace
}  // namespace kestrel::deploy
