// The GPU variants of pool2d, softmax, layernorm and elementwise: registry lookup by backend,
// launch geometry, defines and knob domains. (Their kernels run against the reference
// on an OpenCL device in tests/device_runtime/glue_gpu_measure_test.cpp.)
#include <catch2/catch.hpp>

#include "kestrel/ops/op.h"
#include "kestrel/ops/target_traits.h"

using namespace kestrel::ops;

namespace {

std::string define(const KernelSource& s, const std::string& name) {
  for (const auto& d : s.defines) {
    if (d.name == name) return d.value;
  }
  return "<missing>";
}

}  // namespace

TEST_CASE("GPU glue ops: variants of the CPU ops with the CPU workload and reference", "[ops][gpu][glue]") {
  Registry registry = builtin_ops();
  const TargetTraits traits = TargetTraits::of(Isa::avx2);  // ignored by GPU variants
  for (std::string shape_of : {"softmax:rows=5,cols=77", "layernorm:rows=3,cols=100,residual=1,eps=12",
                               "elementwise:n=1000,kind=5"}) {
    const std::string name = shape_of.substr(0, shape_of.find(':')), shape = shape_of.substr(shape_of.find(':') + 1);
    INFO(name);
    const Op& cpu = registry.get(name);
    const Op& gpu = registry.get(name, Backend::opencl);
    CHECK(&gpu == &registry.get(name, Backend::cuda));
    CHECK(&gpu != &cpu);
    CHECK(registry.variants(name).size() == 2);
    Params p = parse_params(gpu, shape);
    CHECK(p == parse_params(cpu, shape));
    CHECK(gpu.flops(p) == cpu.flops(p));
    CHECK(gpu.tolerance(p) == cpu.tolerance(p));
    CHECK(gpu.reference(p).text == cpu.reference(p).text);
    Config c = gpu.default_config(p, traits);
    CHECK(gpu.check(p, c, traits).empty());
    for (Backend backend : {Backend::opencl, Backend::cuda}) {
      KernelSource s = gpu.source(backend, p, c);
      CHECK(s.backend == backend);
      CHECK(s.file_name == name + (backend == Backend::cuda ? ".cu" : ".cl"));
      CHECK(s.launch.entry == name);
      CHECK(s.launch.threads() <= 1024);
    }
    CHECK_THROWS_WITH(gpu.source(Backend::cpu, p, c), Catch::Contains("no cpu kernel"));
  }
}

TEST_CASE("GPU pool2d: one thread per output element", "[ops][gpu][glue]") {
  Registry registry = builtin_ops();
  const Op& op = registry.get("pool2d", Backend::opencl);
  CHECK(&op != &registry.get("pool2d"));
  Params p = parse_params(op, "N=2,C=13,H=9,W=11,R=3,S=3,stride=2,pad=1,kind=1,block=4");
  KernelSource s = op.source(Backend::opencl, p, parse_config(op, p, "threads=128", TargetTraits{}));
  CHECK(s.launch.entry == "pool2d");
  CHECK(s.launch.grid == std::array<std::int64_t, 3>{8, 1, 1});  // ceil(2*4*5*6*4 / 128)
  CHECK(s.launch.block == std::array<std::int64_t, 3>{128, 1, 1});
  CHECK(define(s, "POOL_GLOBAL") == "0");  // optional parameters reach the kernel at their fallback
  CHECK(define(s, "POOL_THREADS") == "128");
  CHECK(op.tolerance(p) == registry.get("pool2d").tolerance(p));
}

TEST_CASE("GPU softmax and layernorm: one work-group per row", "[ops][gpu][glue]") {
  Registry registry = builtin_ops();
  const Op& softmax = registry.get("softmax", Backend::cuda);
  Params p = parse_params(softmax, "rows=1536,cols=128");
  Config c = parse_config(softmax, p, "threads=64", TargetTraits{});
  KernelSource s = softmax.source(Backend::opencl, p, c);
  CHECK(s.launch.grid == std::array<std::int64_t, 3>{1536, 1, 1});
  CHECK(s.launch.block == std::array<std::int64_t, 3>{64, 1, 1});
  CHECK(s.launch.shared_bytes == 64 * 4);
  CHECK(define(s, "SOFTMAX_COLS") == "128");
  CHECK(define(s, "SOFTMAX_THREADS") == "64");
  CHECK(softmax.default_config(parse_params(softmax, "rows=2,cols=7"), TargetTraits::of(Isa::avx2)).at("threads") == 64);
  CHECK(softmax.default_config(parse_params(softmax, "rows=2,cols=5000"), TargetTraits::of(Isa::avx2)).at("threads") ==
        256);
  CHECK_THROWS_WITH(parse_config(softmax, p, "threads=48", TargetTraits{}), Catch::Contains("threads"));
  const Op& layernorm = registry.get("layernorm", Backend::opencl);
  Params bert = parse_params(layernorm, "rows=384,cols=768,eps=12,residual=1");
  KernelSource ln = layernorm.source(Backend::cuda, bert, parse_config(layernorm, bert, "threads=256", TargetTraits{}));
  CHECK(ln.launch.grid == std::array<std::int64_t, 3>{384, 1, 1});
  CHECK(define(ln, "LAYERNORM_EPSILON") == "1e-12f");
  CHECK(define(ln, "LAYERNORM_RESIDUAL") == "1");
  Params plain = parse_params(layernorm, "rows=4,cols=8");
  CHECK(define(layernorm.source(Backend::cuda, plain, layernorm.default_config(plain, TargetTraits::of(Isa::avx2))),
               "LAYERNORM_RESIDUAL") == "0");
}

TEST_CASE("GPU elementwise: blocks of threads x items elements", "[ops][gpu][glue]") {
  Registry registry = builtin_ops();
  const Op& op = registry.get("elementwise", Backend::cuda);
  Params p = parse_params(op, "n=100001,kind=2");
  KernelSource s = op.source(Backend::cuda, p, parse_config(op, p, "threads=128,items=4", TargetTraits{}));
  CHECK(s.launch.grid == std::array<std::int64_t, 3>{196, 1, 1});  // ceil(100001 / 512)
  CHECK(s.launch.block == std::array<std::int64_t, 3>{128, 1, 1});
  CHECK(s.launch.shared_bytes == 0);
  CHECK(define(s, "ELEMENTWISE_KIND") == "2");
  CHECK(define(s, "ELEMENTWISE_ITEMS") == "4");
  CHECK_THROWS_WITH(parse_config(op, p, "vec=4", TargetTraits{}), Catch::Contains("unknown knob 'vec'"));
}
