// GPU candidates through the sandboxed measurement path: OpenCL on whatever OpenCL
// device this machine has (PoCL on the CPU in CI), CUDA where a GPU exists. Each test
// needs its backend (see tests/gpu_main.cpp: skipped, exit 77, without it).
//
// This executable links no LLVM/Clang: the OpenCL driver must never share a process
// with libclang-cpp (the reference kernels are compiled by a clang-19 subprocess).
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "support/traits.h"
#include "kestrel/device_runtime/measure.h"
#include "kestrel/device_runtime/module_store.h"
#include "kestrel/ops/op.h"
#include "kestrel/kernel/gpu_module.h"
#include "kestrel/base/log.h"
#include "ops/kernel_harness.h"
#include "support/fixtures.h"
#include "support/gpu_batch.h"

using namespace kestrel;
using namespace kestrel::device;

namespace {

// A fixture module as a batch candidate: the request and the module's memfd.
struct FixtureCandidate {
  rpc::CandidateRequest request;
  int fd = -1;
};

void add_candidates(BatchSpec& spec, std::initializer_list<FixtureCandidate> candidates) {
  for (const auto& c : candidates) spec.add(c.request, c.fd);
}

using test::read_bytes;

// A store of modules named by their content, and candidates for them.
struct Modules : test::ContentModules {
  FixtureCandidate candidate(std::uint64_t id, const std::string& hash) { return {{id, hash, ""}, store.fd(hash)}; }
};

std::vector<std::uint8_t> opencl_module(const std::string& source, const std::string& entry, std::uint32_t groups,
                                        std::uint32_t group_size) {
  kernel::GpuModule module;
  module.backend = kernel::GpuBackend::opencl;
  module.code_kind = kernel::GpuCodeKind::opencl_source;
  module.code.assign(source.begin(), source.end());
  module.entry = entry;
  module.grid = {groups, 1, 1};
  module.block = {group_size, 1, 1};
  return kernel::encode_gpu_module(module);
}

using Outcome = test::BatchOutcome;
constexpr auto* op_module = &test::op_gpu_module;
constexpr auto* run_batch = &test::run_gpu_batch;

constexpr std::int64_t kAddN = 10'000;

const char* kAdd = R"(
__kernel void add(__global const float* a, __global const float* b, __global float* out) {
  size_t i = get_global_id(0);
  if (i < 10000) out[i] = a[i] + b[i];
})";

BatchSpec add_batch(Modules& m) {
  BatchSpec spec;
  spec.request.args = {{kAddN, false}, {kAddN, false}, {kAddN, true}};
  spec.request.reference_hash = m.put(read_bytes(std::string(KESTREL_FIXTURE_DIR) + "/fixture_add_ref.so"));
  spec.reference_fd = m.store.fd(spec.request.reference_hash);
  spec.request.tolerance = 1e-6;
  spec.request.settings.repeat = 3;
  spec.request.settings.min_repeat_ms = 5;
  spec.request.settings.timeout_ms = 20'000;
  spec.request.settings.threads = 2;
  return spec;
}

}  // namespace

TEST_CASE("opencl: candidates are built by the driver, checked against the CPU reference and timed with events",
          "[gpu][opencl]") {
  log::set_level(log::Level::warn);
  Modules m;
  BatchSpec spec = add_batch(m);
  std::string good = m.put(opencl_module(kAdd, "add", (kAddN + 63) / 64, 64));
  std::string wrong = m.put(opencl_module(
      R"(__kernel void add(__global const float* a, __global const float* b, __global float* out) {
           size_t i = get_global_id(0); if (i < 10000) out[i] = a[i] - b[i]; })",
      "add", (kAddN + 63) / 64, 64));
  std::string broken = m.put(opencl_module("__kernel void add(__global float* a) { this is not C; }", "add", 1, 1));
  std::string no_entry = m.put(opencl_module(kAdd, "plus", (kAddN + 63) / 64, 64));
  std::string partial = m.put(opencl_module(kAdd, "add", 10, 64));  // covers 640 elements only
  std::vector<std::uint8_t> truncated = opencl_module(kAdd, "add", 1, 64);
  truncated.resize(24);
  std::string malformed = m.put(truncated);
  add_candidates(spec, {m.candidate(1, good),     m.candidate(2, wrong),   m.candidate(3, broken),
                     m.candidate(4, no_entry), m.candidate(5, partial), m.candidate(6, malformed),
                     m.candidate(7, good)});
  spec.request.settings.flush_cache = true;
  Outcome out = run_batch(spec);
  REQUIRE(out.done);
  CHECK(out.done->empty());
  REQUIRE(out.results.size() == spec.request.candidates.size());
  for (std::uint64_t id : {1, 7}) {
    const rpc::CandidateResult& r = out.results[id];
    INFO("candidate " << id << ": " << r.message);
    CHECK(r.status == Status::ok);
    CHECK(r.max_error == 0.0);
    CHECK(r.number >= 1);
    REQUIRE(r.round_seconds.size() == 3);
    for (double s : r.round_seconds) CHECK(s > 0);
  }
  CHECK(out.results[2].status == Status::wrong_answer);
  CHECK_THAT(out.results[2].message, Catch::Contains("max error"));
  CHECK(out.results[3].status == Status::device_compile_error);
  CHECK_THAT(out.results[3].message, Catch::Contains("OpenCL build failed") && Catch::Contains("error"));
  CHECK(out.results[4].status == Status::device_load_error);
  CHECK_THAT(out.results[4].message, Catch::Contains("no kernel 'plus'"));
  CHECK(out.results[5].status == Status::wrong_answer);
  CHECK_THAT(out.results[5].message, Catch::Contains("element 640 "));
  CHECK(out.results[6].status == Status::device_load_error);
  CHECK_THAT(out.results[6].message, Catch::Contains("GPU module"));
}

TEST_CASE("opencl: the GPU gemm kernels match the reference for every knob family", "[gpu][opencl][gemm]") {
  log::set_level(log::Level::warn);
  ops::Registry registry = ops::builtin_ops();
  const ops::Op& op = registry.get("gemm", ops::Backend::opencl);
  ops::test::TempDir dir;
  // Whole tiles and ragged edges (no dimension a multiple of any tile).
  for (std::string shape : {"64x64x32", "37x29x19"}) {
    ops::Params params = ops::parse_params(op, shape);
    Modules m;
    BatchSpec spec;
    for (const auto& t : op.tensors(params)) spec.request.args.push_back({t.elements(), t.role == ops::Role::output});
    ops::test::Kernel::build(op.reference(params), dir.path(), "gemm_ref_" + std::to_string(params.at("M")));
    spec.request.reference_hash = m.put(read_bytes(dir.path() / ("gemm_ref_" + std::to_string(params.at("M")) + ".so")));
    spec.reference_fd = m.store.fd(spec.request.reference_hash);
    spec.request.tolerance = op.tolerance(params);
    spec.request.settings.repeat = 1;
    spec.request.settings.number = 1;
    spec.request.settings.timeout_ms = 30'000;
    const std::vector<std::string> configs = {
        "",                                                                // the default
        "stage=0,vec=1,tm=1,tn=1,bm=16,bn=16,unroll=1",                    // direct global reads, scalar
        "stage=0,vec=4,tm=2,tn=4,bm=16,bn=32,unroll=2",                    // direct reads, float4 loads of B
        "stage=1,vec=2,tm=2,tn=2,bm=16,bn=16,bk=4,unroll=1",               // staged, float2 loads
        "stage=1,vec=4,tm=4,tn=8,bm=32,bn=32,bk=16,unroll=8",              // staged, float4, big thread tile
        "stage=1,vec=1,tm=8,tn=1,bm=64,bn=8,bk=32,unroll=4",               // tall thread tile
    };
    std::vector<std::string> labels;
    for (std::size_t i = 0; i < configs.size(); ++i) {
      ops::Config config = ops::parse_config(op, params, configs[i], test::fixed_traits());
      REQUIRE(op.check(params, config, test::fixed_traits()).empty());
      add_candidates(spec, {m.candidate(i, m.put(op_module(op.source(ops::Backend::opencl, params, config))))});
      labels.push_back(ops::format_config(config));
    }
    Outcome out = run_batch(spec);
    REQUIRE(out.done);
    CHECK(out.done->empty());
    for (std::size_t i = 0; i < configs.size(); ++i) {
      INFO(shape << " [" << labels[i] << "]: " << out.results[i].message);
      CHECK(out.results[i].status == Status::ok);
      CHECK(out.results[i].max_error <= spec.request.tolerance * 4);
    }
  }
}

TEST_CASE("opencl: the GPU batch_matmul kernels match the reference for every transpose", "[gpu][opencl][batch_matmul]") {
  log::set_level(log::Level::warn);
  ops::Registry registry = ops::builtin_ops();
  const ops::Op& op = registry.get("batch_matmul", ops::Backend::opencl);
  ops::test::TempDir dir;
  int n = 0;
  // Ragged (no dimension a multiple of any tile) with every transpose, and whole tiles.
  for (std::string shape : {"batch=3,M=37,N=29,K=19", "batch=3,M=37,N=29,K=19,trans_b=1",
                            "batch=3,M=37,N=29,K=19,trans_a=1", "batch=3,M=37,N=29,K=19,trans_a=1,trans_b=1",
                            "batch=2,M=32,N=64,K=32,trans_b=1"}) {
    ops::Params params = ops::parse_params(op, shape);
    Modules m;
    BatchSpec spec;
    for (const auto& t : op.tensors(params)) spec.request.args.push_back({t.elements(), t.role == ops::Role::output});
    std::string name = "bmm_ref_" + std::to_string(n++);
    ops::test::Kernel::build(op.reference(params), dir.path(), name);
    spec.request.reference_hash = m.put(read_bytes(dir.path() / (name + ".so")));
    spec.reference_fd = m.store.fd(spec.request.reference_hash);
    spec.request.tolerance = op.tolerance(params);
    spec.request.settings.repeat = 1;
    spec.request.settings.number = 1;
    spec.request.settings.timeout_ms = 30'000;
    const std::vector<std::string> configs = {
        "",                                            // the default
        "bm=16,bn=16,bk=8,tm=1,tn=1,unroll=1",         // one element per work-item
        "bm=32,bn=16,bk=16,tm=4,tn=2,unroll=4",        // rectangular thread tile
    };
    std::vector<std::string> labels;
    for (std::size_t i = 0; i < configs.size(); ++i) {
      ops::Config config = ops::parse_config(op, params, configs[i], test::fixed_traits());
      INFO(ops::format_params(params) << " [" << configs[i] << "]");
      REQUIRE(op.check(params, config, test::fixed_traits()).empty());
      add_candidates(spec, {m.candidate(i, m.put(op_module(op.source(ops::Backend::opencl, params, config))))});
      labels.push_back(ops::format_config(config));
    }
    Outcome out = run_batch(spec);
    REQUIRE(out.done);
    CHECK(out.done->empty());
    for (std::size_t i = 0; i < configs.size(); ++i) {
      INFO(ops::format_params(params) << " [" << labels[i] << "]: " << out.results[i].message);
      CHECK(out.results[i].status == Status::ok);
      CHECK(out.results[i].max_error <= spec.request.tolerance * 4);
    }
  }
}

#ifdef KESTREL_FIXTURE_ADD_PTX
TEST_CASE("cuda: PTX candidates are loaded by the driver, checked against the CPU reference and timed with events",
          "[gpu][cuda]") {
  log::set_level(log::Level::warn);
  Modules m;
  BatchSpec spec = add_batch(m);
  kernel::GpuModule module;
  module.backend = kernel::GpuBackend::cuda;
  module.code_kind = kernel::GpuCodeKind::ptx;
  module.code = read_bytes(KESTREL_FIXTURE_ADD_PTX);
  module.entry = "add";
  module.grid = {(kAddN + 127) / 128, 1, 1};
  module.block = {128, 1, 1};
  std::string good = m.put(kernel::encode_gpu_module(module));
  kernel::GpuModule short_grid = module;
  short_grid.grid = {2, 1, 1};
  std::string partial = m.put(kernel::encode_gpu_module(short_grid));
  kernel::GpuModule garbage = module;
  garbage.code = std::vector<std::uint8_t>{'n', 'o', 't', ' ', 'p', 't', 'x'};
  std::string broken = m.put(kernel::encode_gpu_module(garbage));
  add_candidates(spec, {m.candidate(1, good), m.candidate(2, partial), m.candidate(3, broken)});
  spec.request.settings.flush_cache = true;
  // As a forked worker (what a program without a worker image gets), then as the worker
  // kestrel-device execs (a fresh image with the trimmed environment: docs/security.md).
  for (const char* image : {"", KESTREL_DEVICE_BIN}) {
    INFO("worker image: " << (*image ? image : "none (fork)"));
    set_worker_image(image);
    Outcome out = run_batch(spec);
    set_worker_image("");
    REQUIRE(out.done);
    CHECK(out.done->empty());
    INFO(out.results[1].message);
    CHECK(out.results[1].status == Status::ok);
    CHECK(out.results[1].round_seconds.size() == 3);
    CHECK(out.results[2].status == Status::wrong_answer);
    CHECK(out.results[3].status == Status::device_compile_error);
  }
}
#endif

namespace {

// Runs the OpenCL conv2d variant's `configs` on every shape through the device runtime,
// each against the CPU reference.
void check_opencl_conv2d(const std::vector<std::string>& shapes, const std::vector<std::string>& configs) {
  log::set_level(log::Level::warn);
  ops::Registry registry = ops::builtin_ops();
  const ops::Op& op = registry.get("conv2d", ops::Backend::opencl);
  ops::test::TempDir dir;
  int n = 0;
  for (const std::string& shape : shapes) {
    ops::Params params = ops::parse_params(op, shape);
    Modules m;
    BatchSpec spec;
    for (const auto& t : op.tensors(params)) spec.request.args.push_back({t.elements(), t.role == ops::Role::output});
    std::string name = "conv2d_ref_" + std::to_string(n++);
    ops::test::Kernel::build(op.reference(params), dir.path(), name);
    spec.request.reference_hash = m.put(read_bytes(dir.path() / (name + ".so")));
    spec.reference_fd = m.store.fd(spec.request.reference_hash);
    spec.request.tolerance = op.tolerance(params);
    spec.request.settings.repeat = 1;
    spec.request.settings.number = 1;
    spec.request.settings.timeout_ms = 30'000;
    std::vector<std::string> labels;
    for (std::size_t i = 0; i < configs.size(); ++i) {
      ops::Config config = ops::parse_config(op, params, configs[i], test::fixed_traits());
      INFO(shape << " [" << configs[i] << "]");
      REQUIRE(op.check(params, config, test::fixed_traits()).empty());
      add_candidates(spec, {m.candidate(i, m.put(op_module(op.source(ops::Backend::opencl, params, config))))});
      labels.push_back(ops::format_config(config));
    }
    Outcome out = run_batch(spec);
    REQUIRE(out.done);
    CHECK(out.done->empty());
    for (std::size_t i = 0; i < configs.size(); ++i) {
      INFO(shape << " [" << labels[i] << "]: " << out.results[i].message);
      CHECK(out.results[i].status == Status::ok);
    }
  }
}

}  // namespace

TEST_CASE("opencl: the GPU conv2d kernels match the reference for every knob family", "[gpu][opencl][conv2d]") {
  // Padding, stride, dilation and ragged tiles.
  check_opencl_conv2d({"N=2,C=5,H=9,W=11,K=6,R=3,S=3,pad=1", "C=4,H=12,W=10,K=9,R=3,S=2,stride=2,pad=2,dilation=2"},
                      {
                          "",                                           // the default
                          "stage=0,bq=8,bk=4,tq=1,tk=1,unroll=1",       // weights from global memory
                          "stage=0,bq=8,bk=8,tq=4,tk=2,unroll=4",       // bigger thread tile
                          "stage=1,bq=8,bk=4,tq=2,tk=4,cc=1,unroll=1",  // one channel staged per step
                          "stage=1,bq=8,bk=8,tq=2,tk=2,cc=4,unroll=2",  // chunks not dividing C
                      });
}

TEST_CASE("opencl: the grouped GPU conv2d kernels match the reference", "[gpu][opencl][conv2d]") {
  // Channels per group not a multiple of the block or the staged chunk; groups = C
  // (depthwise); a ResNeXt-like shape with several blocks per group.
  check_opencl_conv2d({"C=9,H=7,W=9,K=12,R=3,S=3,pad=1,groups=3", "N=2,C=6,H=10,W=8,K=6,R=3,S=3,stride=2,pad=1,groups=6",
                       "C=24,H=6,W=6,K=64,R=3,S=3,pad=1,dilation=2,groups=4"},
                      {
                          "",                                           // the default
                          "stage=0,bq=8,bk=4,tq=1,tk=1,unroll=1",       // weights from global memory
                          "stage=0,bq=8,bk=4,tq=2,tk=4,unroll=2",       // one thread holds a block's channels
                          "stage=1,bq=8,bk=4,tq=2,tk=2,cc=1,unroll=1",  // one channel staged per step
                          "stage=1,bq=8,bk=4,tq=1,tk=2,cc=2,unroll=4",  // chunks not dividing C/groups (3)
                      });
}

TEST_CASE("opencl: built programs are cached on disk by module hash across batches", "[gpu][opencl]") {
  log::set_level(log::Level::warn);
  ops::test::TempDir dir;
  const std::string cache = (dir.path() / "cl-cache").string();
  ::setenv("KESTREL_OPENCL_CACHE", cache.c_str(), 1);
  Modules m;
  BatchSpec spec = add_batch(m);
  std::string good = m.put(opencl_module(kAdd, "add", (kAddN + 63) / 64, 64));
  add_candidates(spec, {m.candidate(1, good)});
  Outcome first = run_batch(spec);
  INFO(first.results[1].message);
  REQUIRE(first.results[1].status == Status::ok);
  std::vector<std::filesystem::path> files;
  for (const auto& entry : std::filesystem::directory_iterator(cache)) files.push_back(entry.path());
  REQUIRE(files.size() == 1);
  CHECK_THAT(files[0].filename().string(), Catch::StartsWith(good + "-") && Catch::EndsWith(".bin"));

  // Proof that a later batch (a new worker) uses the binary: a module under the same
  // hash whose source no longer compiles still runs, as the cached program.
  Modules again;
  BatchSpec spec2 = add_batch(again);
  REQUIRE(again.store.put(good, opencl_module("this does not compile", "add", (kAddN + 63) / 64, 64)).empty());
  add_candidates(spec2, {again.candidate(1, good)});
  Outcome second = run_batch(spec2);
  INFO(second.results[1].message);
  CHECK(second.results[1].status == Status::ok);

  // A corrupt cache entry is dropped and the source is built again.
  std::ofstream(files[0], std::ios::binary | std::ios::trunc) << "garbage";
  Modules third;
  BatchSpec spec3 = add_batch(third);
  REQUIRE(third.store.put(good, opencl_module(kAdd, "add", (kAddN + 63) / 64, 64)).empty());
  add_candidates(spec3, {third.candidate(1, good)});
  Outcome rebuilt = run_batch(spec3);
  INFO(rebuilt.results[1].message);
  CHECK(rebuilt.results[1].status == Status::ok);
  CHECK(std::filesystem::file_size(files[0]) > 7);
  ::unsetenv("KESTREL_OPENCL_CACHE");
}
