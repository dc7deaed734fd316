// The GPU kernels of the glue ops (pool2d, softmax, layernorm, elementwise) through the sandboxed
// measurement path, against their CPU references: OpenCL on whatever OpenCL device this
// machine has (PoCL on the CPU in CI). Each test needs its backend (tests/gpu_main.cpp:
// skipped, exit 77, without it). The CUDA kernels run the same way where a GPU exists.
#include <catch2/catch.hpp>

#include "kestrel/base/log.h"
#include "ops/kernel_harness.h"
#include "support/fixtures.h"
#include "support/gpu_batch.h"

using namespace kestrel;

namespace {

// Every configuration of `configs` ("" is the default) of op `name`'s GPU variant on each
// workload of `shapes`, run once on `backend` and checked against the CPU reference with
// the op's tolerance. `bug` (from, to), when given, is injected into the last
// configuration's source, which must then fail.
void check_gpu(ops::Backend backend, const std::string& name, const std::vector<std::string>& shapes,
               const std::vector<std::string>& configs) {
  ops::Registry registry = ops::builtin_ops();
  const ops::Op& op = registry.get(name, backend);
  ops::test::TempDir dir;
  int n = 0;
  for (const std::string& shape : shapes) {
    ops::Params params = ops::parse_params(op, shape);
    test::ContentModules m;
    device::BatchSpec spec;
    for (const auto& t : op.tensors(params)) spec.request.args.push_back({t.elements(), t.role == ops::Role::output});
    const std::string ref = name + "_ref_" + std::to_string(n++);
    ops::test::Kernel::build(op.reference(params), dir.path(), ref);
    spec.request.reference_hash = m.put(test::read_bytes(dir.path() / (ref + ".so")));
    spec.reference_fd = m.store.fd(spec.request.reference_hash);
    spec.request.tolerance = op.tolerance(params);
    spec.request.settings.repeat = 1;
    spec.request.settings.number = 1;
    spec.request.settings.timeout_ms = 30'000;
    std::vector<std::string> labels;
    for (std::size_t i = 0; i < configs.size(); ++i) {
      ops::Config config = configs[i].empty() ? op.default_config(params, ops::TargetTraits{})
                                              : ops::parse_config(op, params, configs[i], ops::TargetTraits{});
      labels.push_back(ops::format_config(config));
      std::string hash = m.put(test::op_gpu_module(op.source(backend, params, config)));
      spec.add({i, hash, ""}, m.store.fd(hash));
    }
    test::BatchOutcome out = test::run_gpu_batch(spec);
    REQUIRE(out.done);
    CHECK(out.done->empty());
    for (std::size_t i = 0; i < configs.size(); ++i) {
      INFO(name << " " << shape << " [" << labels[i] << "]: " << out.results[i].message);
      CHECK(out.results[i].status == kernel::Status::ok);
    }
  }
}

// The default GPU source of op `name` on `shape`, and the same with `from` replaced by `to`:
// the first must match the reference, the second must not.
void check_gpu_bug(ops::Backend backend, const std::string& name, const std::string& shape, const std::string& from,
                   const std::string& to) {
  ops::Registry registry = ops::builtin_ops();
  const ops::Op& op = registry.get(name, backend);
  ops::test::TempDir dir;
  ops::Params params = ops::parse_params(op, shape);
  test::ContentModules m;
  device::BatchSpec spec;
  for (const auto& t : op.tensors(params)) spec.request.args.push_back({t.elements(), t.role == ops::Role::output});
  ops::test::Kernel::build(op.reference(params), dir.path(), "ref");
  spec.request.reference_hash = m.put(test::read_bytes(dir.path() / "ref.so"));
  spec.reference_fd = m.store.fd(spec.request.reference_hash);
  spec.request.tolerance = op.tolerance(params);
  spec.request.settings.repeat = 1;
  spec.request.settings.number = 1;
  spec.request.settings.timeout_ms = 30'000;
  ops::KernelSource good = op.source(backend, params, op.default_config(params, ops::TargetTraits{}));
  ops::KernelSource bad = good;
  auto at = bad.text.find(from);
  REQUIRE(at != std::string::npos);
  bad.text.replace(at, from.size(), to);
  std::string good_hash = m.put(test::op_gpu_module(good)), bad_hash = m.put(test::op_gpu_module(bad));
  spec.add({0, good_hash, ""}, m.store.fd(good_hash));
  spec.add({1, bad_hash, ""}, m.store.fd(bad_hash));
  test::BatchOutcome out = test::run_gpu_batch(spec);
  REQUIRE(out.done);
  INFO(out.results[0].message << " / " << out.results[1].message);
  CHECK(out.results[0].status == kernel::Status::ok);
  CHECK(out.results[1].status == kernel::Status::wrong_answer);
}

}  // namespace

TEST_CASE("opencl: the GPU softmax kernel matches the reference on ragged rows", "[gpu][opencl][softmax]") {
  log::set_level(log::Level::warn);
  check_gpu(ops::Backend::opencl, "softmax", {"rows=7,cols=33", "rows=3,cols=1001", "rows=1,cols=1"},
            {"", "threads=32", "threads=256", "threads=1024"});
  check_gpu_bug(ops::Backend::opencl, "softmax", "rows=6,cols=385", "s += exp(xr[c] - m);",
                "s += c + 1 < COLS ? exp(xr[c] - m) : 0.0f;");
}

TEST_CASE("opencl: the GPU layernorm kernel matches the reference, with and without a residual",
          "[gpu][opencl][layernorm]") {
  log::set_level(log::Level::warn);
  check_gpu(ops::Backend::opencl, "layernorm", {"rows=5,cols=37", "rows=9,cols=768,eps=12,residual=1", "rows=1,cols=1"},
            {"", "threads=32", "threads=512"});
  check_gpu_bug(ops::Backend::opencl, "layernorm", "rows=4,cols=384,residual=1", "reduce_sum(scratch, q) / (float)COLS",
                "reduce_sum(scratch, q) / (float)(COLS - 1)");
}

TEST_CASE("opencl: the GPU elementwise kernel matches the reference for every kind", "[gpu][opencl][elementwise]") {
  log::set_level(log::Level::warn);
  for (int kind = 0; kind < 8; ++kind) {
    check_gpu(ops::Backend::opencl, "elementwise", {"n=1037,kind=" + std::to_string(kind)},
              {"", "threads=64,items=1", "threads=128,items=8"});
  }
  check_gpu_bug(ops::Backend::opencl, "elementwise", "n=1000,kind=5", "erf(x * 0.70710678118654752f)",
                "tanh(x * 0.7978845608f * (1.0f + 0.044715f * x * x))");
}

TEST_CASE("opencl: the GPU pool2d kernel matches the reference: max, average, global, NCHW and NCHWc",
          "[gpu][opencl][pool2d]") {
  log::set_level(log::Level::warn);
  check_gpu(ops::Backend::opencl, "pool2d",
            {"N=2,C=13,H=9,W=11,R=3,S=3,stride=2,pad=1,kind=0", "C=20,H=10,W=13,R=3,S=2,pad=1,kind=1,block=8",
             "N=2,C=21,H=7,W=9,kind=1,global=1,block=16"},
            {"", "threads=64"});
  check_gpu_bug(ops::Backend::opencl, "pool2d", "C=13,H=9,W=11,R=3,S=3,stride=2,pad=1,kind=1,block=4",
                "acc / (float)((he - hs) * (xe - xs))", "acc / (float)(R * S)");
}
