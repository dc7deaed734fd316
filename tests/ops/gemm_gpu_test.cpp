// The GPU variants of gemm and conv2d: registry lookup by backend, knob constraints, launch
// geometry and defines. (Its kernels are run against the reference on an OpenCL device
// in tests/device_runtime/gpu_measure_test.cpp.)
#include <catch2/catch.hpp>

#include <algorithm>

#include "kestrel/ops/op.h"

using namespace kestrel::ops;

namespace {

// GPU ops ignore the CPU traits; the CPU gemm of the first test gets AVX2's.
const TargetTraits kTraits = TargetTraits::of(Isa::avx2);

std::string define(const KernelSource& s, const std::string& name) {
  for (const auto& d : s.defines) {
    if (d.name == name) return d.value;
  }
  return "<missing>";
}

}  // namespace

TEST_CASE("gemm has a CPU op and a GPU variant, found by backend", "[ops][gpu]") {
  Registry registry = builtin_ops();
  const Op& cpu = registry.get("gemm");
  CHECK(&registry.get("gemm", Backend::cpu) == &cpu);
  const Op& cuda = registry.get("gemm", Backend::cuda);
  const Op& opencl = registry.get("gemm", Backend::opencl);
  CHECK(&cuda == &opencl);
  CHECK(&cuda != &cpu);
  // Primary ops only: gemm, batch_matmul, conv2d, conv2d_nchwc, conv2d_winograd,
  // depthwise_conv2d, layout_nchwc, pool2d, softmax, layernorm, elementwise.
  CHECK(registry.all().size() == 11);
  REQUIRE(registry.variants("gemm").size() == 2);
  CHECK(registry.variants("gemm")[0] == &cpu);
  CHECK(registry.find("conv2d", Backend::cuda) != &registry.get("conv2d"));
  CHECK(registry.find("nope", Backend::cuda) == nullptr);
  CHECK_THROWS_AS(cpu.source(Backend::opencl, parse_params(cpu, "8x8x8"), cpu.default_config(parse_params(cpu, "8x8x8"), kTraits)),
                  OpError);
}

TEST_CASE("GPU gemm: the workload, reference and tolerance are the CPU op's", "[ops][gpu]") {
  Registry registry = builtin_ops();
  const Op& cpu = registry.get("gemm");
  const Op& gpu = registry.get("gemm", Backend::cuda);
  Params p = parse_params(gpu, "100x70x30");
  CHECK(p == parse_params(cpu, "100x70x30"));
  CHECK(gpu.flops(p) == cpu.flops(p));
  CHECK(gpu.tolerance(p) == cpu.tolerance(p));
  CHECK(gpu.reference(p).text == cpu.reference(p).text);
  CHECK(gpu.reference(p).backend == Backend::cpu);
  CHECK_THROWS_AS(parse_params(gpu, "0x1x1"), OpError);
}

TEST_CASE("GPU gemm: the launch geometry follows the knobs", "[ops][gpu]") {
  Registry registry = builtin_ops();
  const Op& op = registry.get("gemm", Backend::opencl);
  Params p = parse_params(op, "100x70x30");
  Config c = parse_config(op, p, "bm=32,bn=16,tm=4,tn=2,vec=2,stage=1,bk=8,unroll=2", kTraits);
  REQUIRE(op.check(p, c, kTraits).empty());
  for (Backend backend : {Backend::opencl, Backend::cuda}) {
    KernelSource s = op.source(backend, p, c);
    CHECK(s.backend == backend);
    CHECK(s.file_name == (backend == Backend::cuda ? "gemm.cu" : "gemm.cl"));
    CHECK(s.launch.entry == "gemm");
    CHECK(s.launch.grid == std::array<std::int64_t, 3>{5, 4, 1});   // ceil(70/16), ceil(100/32)
    CHECK(s.launch.block == std::array<std::int64_t, 3>{8, 8, 1});  // bn/tn, bm/tm
    CHECK(s.launch.threads() == 64);
    CHECK(s.launch.shared_bytes == (32 + 16) * 8 * 4);
    CHECK(define(s, "GEMM_M") == "100");
    CHECK(define(s, "GEMM_BM") == "32");
    CHECK(define(s, "GEMM_STAGE") == "1");
    CHECK_THAT(s.text, Catch::Contains("GEMM_BK"));
  }
  Config direct = parse_config(op, p, "stage=0,bm=32,bn=16,tm=4,tn=2,vec=2", kTraits);
  CHECK(op.source(Backend::cuda, p, direct).launch.shared_bytes == 0);
}

TEST_CASE("GPU gemm: invalid configurations say why and are never sources", "[ops][gpu][bad-input]") {
  Registry registry = builtin_ops();
  const Op& op = registry.get("gemm", Backend::cuda);
  Params p = parse_params(op, "256x256x256");
  auto why = [&](const std::string& text) { return op.check(p, parse_config(op, p, text, kTraits), kTraits); };
  CHECK_THAT(why("bm=16,tm=8,tn=4,vec=4,bn=32"), Catch::Equals(""));
  CHECK_THAT(why("bm=8,tm=8,bn=8,tn=8,vec=4"), Catch::Equals(""));
  CHECK_THAT(why("tn=2,vec=4"), Catch::Contains("not a multiple of vec"));
  CHECK_THAT(why("bm=8,tm=8,bn=8,tn=8,vec=1,bk=4"), Catch::Equals(""));
  CHECK_THAT(why("bm=128,bn=128,tm=1,tn=1,vec=1"), Catch::Contains("16384 threads"));
  CHECK_THAT(why("bm=128,bn=128,bk=64,tm=8,tn=8,vec=4,stage=1"), Catch::Contains("shared memory"));
  CHECK_THAT(why("bm=128,bn=128,bk=64,tm=8,tn=8,vec=4,stage=0"), Catch::Equals(""));
  CHECK_THAT(why("bm=16,bn=32,tm=8,tn=16,vec=4,bk=4"), Catch::Contains("128 accumulators"));
  Config bad = parse_config(op, p, "tn=2,vec=4", kTraits);
  CHECK_THROWS_WITH(op.source(Backend::cuda, p, bad), Catch::Contains("invalid gemm configuration"));
  CHECK_THROWS_WITH(op.source(Backend::cpu, p, op.default_config(p, kTraits)), Catch::Contains("no cpu kernel"));
  CHECK_THROWS_WITH(parse_config(op, p, "mc=64", kTraits), Catch::Contains("unknown knob 'mc'"));
  // The kernels have no epilogue: a workload with one is refused, naming it, not computed without it.
  for (const char* epilogue : {"bias=1", "residual=1", "act=1", "act=5", "act=8"}) {
    Params with = parse_params(op, std::string("M=64,N=64,K=64,") + epilogue);
    INFO(epilogue);
    CHECK_THAT(op.check(with, op.default_config(with, kTraits), kTraits),
               Catch::Contains("no epilogue") && Catch::Contains(epilogue));
    CHECK_THROWS_WITH(op.source(Backend::cuda, with, op.default_config(with, kTraits)), Catch::Contains("no epilogue"));
  }
}

TEST_CASE("GPU gemm: the default is valid and features are stable for any workload", "[ops][gpu]") {
  Registry registry = builtin_ops();
  const Op& op = registry.get("gemm", Backend::opencl);
  std::vector<std::string> names;
  for (std::string shape : {"1x1x1", "3x5x7", "48x40x32", "512x512x512", "1000x17x3000"}) {
    Params p = parse_params(op, shape);
    Config c = op.default_config(p, kTraits);
    INFO(shape << ": " << format_config(c));
    CHECK(op.check(p, c, kTraits).empty());
    auto features = op.features(p, c);
    std::vector<std::string> these;
    for (const auto& [name, value] : features) {
      these.push_back(name);
      CHECK(std::isfinite(value));
      CHECK(value >= 0);
    }
    if (names.empty()) names = these;
    CHECK(these == names);
  }
}

TEST_CASE("GPU conv2d: launch geometry, staged weights and constraints", "[ops][gpu]") {
  Registry registry = builtin_ops();
  const Op& op = registry.get("conv2d", Backend::cuda);
  const Op& cpu = registry.get("conv2d");
  CHECK(&op != &cpu);
  Params p = parse_params(op, "N=2,C=8,H=14,W=14,K=24,R=3,S=3,pad=1,stride=2");  // P = Q = 7
  CHECK(op.flops(p) == cpu.flops(p));
  CHECK(op.reference(p).text == cpu.reference(p).text);
  Config c = parse_config(op, p, "bq=8,bk=8,tq=2,tk=4,cc=4,stage=1,unroll=2", kTraits);
  REQUIRE(op.check(p, c, kTraits).empty());
  KernelSource s = op.source(Backend::opencl, p, c);
  CHECK(s.file_name == "conv2d.cl");
  CHECK(s.launch.entry == "conv2d");
  CHECK(s.launch.grid == std::array<std::int64_t, 3>{1 * 2 * 7, 3, 1});  // column blocks x N x P, K / bk
  CHECK(s.launch.block == std::array<std::int64_t, 3>{4, 2, 1});
  CHECK(s.launch.shared_bytes == 8 * 4 * 9 * 4);
  CHECK(define(s, "CONV_STRIDE") == "2");
  CHECK(define(s, "CONV_CC") == "4");
  CHECK_THAT(op.check(p, parse_config(op, p, "bq=8,tq=4,bk=8,tk=8", kTraits), kTraits), Catch::Equals(""));
  CHECK_THAT(op.check(p, parse_config(op, p, "bk=4,tk=8", kTraits), kTraits), Catch::Contains("not a multiple of tk"));
  // 7x7 filters with 64 staged channels overflow shared memory; the default never does.
  Params big = parse_params(op, "C=64,H=56,W=56,K=64,R=7,S=7,pad=3");
  CHECK_THAT(op.check(big, parse_config(op, big, "bk=64,cc=16,stage=1", kTraits), kTraits), Catch::Contains("shared memory"));
  for (std::string shape : {"C=3,H=224,W=224,K=64,R=7,S=7,stride=2,pad=3", "C=1,H=1,W=1,K=1,R=1,S=1",
                            "C=512,H=7,W=7,K=512,R=3,S=3,pad=1"}) {
    Params q = parse_params(op, shape);
    INFO(shape << ": " << format_config(op.default_config(q, kTraits)));
    CHECK(op.check(q, op.default_config(q, kTraits), kTraits).empty());
  }
}

TEST_CASE("GPU batch_matmul: launch geometry, defines and constraints", "[ops][gpu][batch_matmul]") {
  Registry registry = builtin_ops();
  const Op& cpu = registry.get("batch_matmul");
  const Op& op = registry.get("batch_matmul", Backend::opencl);
  CHECK(&op == &registry.get("batch_matmul", Backend::cuda));
  CHECK(&op != &cpu);
  Params p = parse_params(op, "batch=12,M=100,N=70,K=64,trans_b=1");
  CHECK(op.flops(p) == cpu.flops(p));
  CHECK(op.reference(p).text == cpu.reference(p).text);
  Config c = parse_config(op, p, "bm=32,bn=16,bk=8,tm=4,tn=2,unroll=4", kTraits);
  REQUIRE(op.check(p, c, kTraits).empty());
  for (Backend backend : {Backend::opencl, Backend::cuda}) {
    KernelSource s = op.source(backend, p, c);
    CHECK(s.file_name == (backend == Backend::cuda ? "batch_matmul.cu" : "batch_matmul.cl"));
    CHECK(s.launch.entry == "batch_matmul");
    CHECK(s.launch.grid == std::array<std::int64_t, 3>{5, 4, 12});  // ceil(70/16), ceil(100/32), batch
    CHECK(s.launch.block == std::array<std::int64_t, 3>{8, 8, 1});  // bn/tn, bm/tm
    CHECK(s.launch.shared_bytes == (32 + 16) * 8 * 4);
    CHECK(define(s, "BMM_TRANS_B") == "1");
    CHECK(define(s, "BMM_TRANS_A") == "<missing>");
    CHECK(define(s, "BMM_BATCH") == "12");
  }
  auto why = [&](const std::string& text) { return op.check(p, parse_config(op, p, text, kTraits), kTraits); };
  CHECK_THAT(why("bm=16,tm=8,bn=16,tn=8"), Catch::Equals(""));
  CHECK_THAT(why("bm=128,bn=128,tm=1,tn=1"), Catch::Contains("16384 threads"));
  CHECK_THAT(why("bm=32,tm=8,bn=16,tn=4,bk=32"), Catch::Equals(""));
  CHECK_THROWS_AS(parse_config(op, p, "tn=16", kTraits), OpError);
  CHECK_THROWS_WITH(op.source(Backend::cpu, p, op.default_config(p, kTraits)), Catch::Contains("no cpu kernel"));
  for (std::string shape : {"batch=1,M=1,N=1,K=1", "batch=12,M=384,N=384,K=64,trans_b=1", "batch=3,M=5,N=1000,K=7"}) {
    Params q = parse_params(op, shape);
    INFO(shape << ": " << format_config(op.default_config(q, kTraits)));
    CHECK(op.check(q, op.default_config(q, kTraits), kTraits).empty());
  }
}
