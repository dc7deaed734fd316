// The glue ops pool2d, softmax, layernorm and elementwise: workloads and their
// validation, defaults and register constraints on every target ISA, and kernel
// correctness against the references on ragged shapes (the default and random
// configurations, serial and two-threaded), with one injected bug per op that the
// comparison must catch.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "kernel_harness.h"
#include "kestrel/ops/target_traits.h"

using namespace kestrel::ops;

namespace {

const Isa kIsas[] = {Isa::scalar, Isa::sse, Isa::avx2, Isa::avx512, Isa::neon, Isa::neon32};

// The default of every ISA and `count` random valid configurations (checked against the
// AVX-512 traits, the widest) all match the reference.
void check_workload(const std::string& op_name, const std::string& shape, std::uint64_t seed, int count = 8) {
  Registry registry = builtin_ops();
  const Op& op = registry.get(op_name);
  Params params = parse_params(op, shape);
  INFO(op_name << " " << shape);
  test::WorkloadChecker checker(op, params);
  for (Isa isa : kIsas) {
    Config config = op.default_config(params, TargetTraits::of(isa));
    INFO(to_string(isa) << " default " << format_config(config));
    CHECK(checker.check(config));
  }
  for (const auto& config : test::random_configs(op, params, count, seed)) CHECK(checker.check(config));
}

// `source` with its first `from` replaced by `to` (an injected bug).
KernelSource with_bug(KernelSource source, const std::string& from, const std::string& to) {
  auto at = source.text.find(from);
  REQUIRE(at != std::string::npos);
  source.text.replace(at, from.size(), to);
  return source;
}

std::string define(const KernelSource& source, const std::string& name) {
  for (const auto& d : source.defines) {
    if (d.name == name) return d.value;
  }
  return "<missing>";
}

}  // namespace

// --- workloads, defaults, constraints ------------------------------------------------

TEST_CASE("glue ops: defaults are valid on every ISA and features are stable", "[ops][glue]") {
  Registry registry = builtin_ops();
  const std::vector<std::pair<std::string, std::vector<std::string>>> workloads = {
      {"pool2d", {"C=64,H=112,W=112,R=3,S=3,stride=2,pad=1,block=16", "C=1280,H=7,W=7,kind=1,global=1,block=8",
                  "C=3,H=5,W=4,R=2,S=2", "N=4,C=5,H=1,W=1"}},
      {"softmax", {"rows=128,cols=384", "rows=1,cols=1", "rows=1536,cols=128", "rows=3,cols=30522"}},
      {"layernorm", {"rows=128,cols=768", "rows=1,cols=1", "rows=7,cols=1024,eps=12,residual=1"}},
      {"elementwise", {"n=1", "n=1000,kind=5", "n=3145728,kind=2", "n=77,kind=7"}},
  };
  for (const auto& [name, shapes] : workloads) {
    for (const Op* op : registry.variants(name)) {
      std::vector<std::string> names;
      for (const auto& shape : shapes) {
        Params p = parse_params(*op, shape);
        for (Isa isa : kIsas) {
          const TargetTraits traits = TargetTraits::of(isa);
          Config c = op->default_config(p, traits);
          INFO(name << " " << shape << " on " << to_string(isa) << ": " << format_config(c));
          CHECK(op->check(p, c, traits).empty());
          for (Backend backend : op->backends()) CHECK_NOTHROW(op->source(backend, p, c));
        }
        std::vector<std::string> these;
        for (const auto& [feature, value] : op->features(p, op->default_config(p, TargetTraits::of(Isa::avx2)))) {
          these.push_back(feature);
          CHECK(std::isfinite(value));
          CHECK(value >= 0);
        }
        if (names.empty()) names = these;
        CHECK(these == names);
      }
    }
  }
}

TEST_CASE("glue ops: defaults follow the target's vector width and core count", "[ops][glue]") {
  Registry registry = builtin_ops();
  const Op& softmax = registry.get("softmax");
  Params p = parse_params(softmax, "rows=128,cols=384");
  CHECK(softmax.default_config(p, TargetTraits::of(Isa::avx512)).at("vec") == 16);
  CHECK(softmax.default_config(p, TargetTraits::of(Isa::avx2)).at("vec") == 8);
  CHECK(softmax.default_config(p, TargetTraits::of(Isa::neon)).at("vec") == 4);
  CHECK(softmax.default_config(p, TargetTraits::of(Isa::scalar)).at("vec") == 1);
  TargetTraits two = TargetTraits::of(Isa::avx2);
  two.cores = 2;
  CHECK(softmax.default_config(p, two).at("grain") == 16);  // 128 rows / (4 tasks x 2 cores)
  const Op& elementwise = registry.get("elementwise");
  Params big = parse_params(elementwise, "n=10000000,kind=0");
  CHECK(elementwise.default_config(big, two).at("grain") == 65536);
  CHECK(elementwise.default_config(big, two).at("vec") == 8);
  // NCHWc blocks of 16 take two AVX2 registers each: fewer columns at once than on AVX-512.
  const Op& pool = registry.get("pool2d");
  Params blocked = parse_params(pool, "C=64,H=56,W=56,R=3,S=3,pad=1,block=16");
  CHECK(pool.default_config(blocked, TargetTraits::of(Isa::avx512)).at("tw") == 4);
  CHECK(pool.default_config(blocked, TargetTraits::of(Isa::sse)).at("tw") == 2);
}

TEST_CASE("glue ops: configurations over the target's registers are rejected", "[ops][glue][bad-input]") {
  Registry registry = builtin_ops();
  const TargetTraits avx2 = TargetTraits::of(Isa::avx2), avx512 = TargetTraits::of(Isa::avx512);
  const Op& elementwise = registry.get("elementwise");
  Params gelu = parse_params(elementwise, "n=100000,kind=5");
  Config wide = parse_config(elementwise, gelu, "vec=16,unroll=8,grain=16384", avx512);
  CHECK(elementwise.check(gelu, wide, avx512).empty());  // 8 x 1 x 4 = 32 zmm
  CHECK_THAT(elementwise.check(gelu, wide, avx2), Catch::Contains("64 vector registers") && Catch::Contains("16"));
  const Op& softmax = registry.get("softmax");
  Params p = parse_params(softmax, "rows=64,cols=1000");
  Config online = parse_config(softmax, p, "vec=16,unroll=4,online=1", avx512);
  CHECK(softmax.check(p, online, avx512).empty());
  CHECK_THAT(softmax.check(p, online, avx2), Catch::Contains("online"));
  CHECK_THAT(softmax.check(p, parse_config(softmax, p, "vec=16,unroll=4,online=0", avx512), TargetTraits::of(Isa::neon32)),
             Catch::Contains("neon32"));
  const Op& pool = registry.get("pool2d");
  Params blocked = parse_params(pool, "C=64,H=56,W=56,R=3,S=3,pad=1,block=16");
  CHECK_THAT(pool.check(blocked, parse_config(pool, blocked, "tw=8", avx512), TargetTraits::of(Isa::sse)),
             Catch::Contains("tw=8"));
  CHECK(pool.check(blocked, parse_config(pool, blocked, "tw=8", avx512), avx512).empty());
  Config odd = parse_config(softmax, p, "vec=4", avx512);
  odd["unroll"] = 3;
  CHECK_THAT(softmax.check(p, odd, avx2), Catch::Contains("unroll=3 is not in its domain"));
}

TEST_CASE("pool2d workloads: windows, padding, global pooling, blocks", "[ops][glue][pool2d]") {
  Registry registry = builtin_ops();
  const Op& pool = registry.get("pool2d");
  Params p = parse_params(pool, "N=2,C=20,H=9,W=11,R=3,S=2,stride=2,pad=1,kind=1,block=8");
  auto tensors = pool.tensors(p);
  REQUIRE(tensors.size() == 2);
  CHECK(tensors[0].shape == std::vector<std::int64_t>{2, 3, 9, 11, 8});
  CHECK(tensors[1].shape == std::vector<std::int64_t>{2, 3, 5, 6, 8});  // (9+2-3)/2+1, (11+2-2)/2+1
  CHECK(pool.flops(p) == 2.0 * 20 * 5 * 6 * 6);
  // Optional parameters at their fallback are left out of the workload.
  Params global = parse_params(pool, "C=1280,H=7,W=7,kind=1,global=1");
  CHECK(format_params(global) == "C=1280,H=7,N=1,W=7,block=1,global=1,kind=1");
  CHECK(pool.tensors(global)[1].shape == std::vector<std::int64_t>{1, 1280, 1, 1, 1});
  CHECK(format_params(parse_params(pool, "C=8,H=8,W=8,R=2,S=2,stride=2")) == "C=8,H=8,N=1,R=2,S=2,W=8,block=1,kind=0,stride=2");
  CHECK_THROWS_WITH(parse_params(pool, "C=8,H=8,W=8,R=3,S=3,global=1"), Catch::Contains("leave out R, S"));
  CHECK_THROWS_WITH(parse_params(pool, "C=8,H=8,W=8,R=3,S=3,pad=3"), Catch::Contains("less than the window"));
  CHECK_THROWS_WITH(parse_params(pool, "C=8,H=2,W=8,R=5,S=3,pad=1"), Catch::Contains("larger than the padded input"));
  CHECK_THROWS_WITH(parse_params(pool, "C=8,H=8,W=8,block=2"), Catch::Contains("not 1, 4, 8 or 16"));
  CHECK_THROWS_WITH(parse_params(pool, "C=8,H=8,W=8,kind=2"), Catch::Contains("kind=2 is outside 0..1"));
  CHECK_THROWS_WITH(parse_params(pool, "C=8,H=8,W=8,K=3"), Catch::Contains("unknown parameter 'K'"));
  CHECK_THROWS_WITH(parse_params(pool, "H=8,W=8"), Catch::Contains("missing parameter C"));
  CHECK(pool.tolerance(p) > 0);
  CHECK(pool.tolerance(parse_params(pool, "C=8,H=8,W=8,R=2,S=2")) == 0.0);  // a maximum is exact
  KernelSource s = pool.source(Backend::cpu, global, pool.default_config(global, TargetTraits::of(Isa::avx2)));
  CHECK(define(s, "POOL_R") == "1");  // optional parameters reach the kernel at their fallback
  CHECK(define(s, "POOL_GLOBAL") == "1");
  CHECK_THROWS_WITH(pool.source(Backend::opencl, global, pool.default_config(global, TargetTraits::of(Isa::avx2))),
                    Catch::Contains("no opencl kernel"));
}

TEST_CASE("softmax, layernorm and elementwise workloads", "[ops][glue]") {
  Registry registry = builtin_ops();
  const Op& softmax = registry.get("softmax");
  Params s = parse_params(softmax, "rows=128,cols=384");
  CHECK(softmax.tensors(s)[0].shape == std::vector<std::int64_t>{128, 384});
  CHECK(format_params(parse_params(softmax, "128x384")) == "cols=384,rows=128");
  CHECK_THROWS_WITH(parse_params(softmax, "rows=128"), Catch::Contains("missing parameter cols"));
  const Op& layernorm = registry.get("layernorm");
  Params bert = parse_params(layernorm, "rows=128,cols=768,eps=12,residual=1");
  auto tensors = layernorm.tensors(bert);
  REQUIRE(tensors.size() == 5);
  CHECK(tensors[3].name == "residual");
  CHECK(tensors[3].shape == std::vector<std::int64_t>{128, 768});
  CHECK(tensors[4].role == Role::output);
  Params plain = parse_params(layernorm, "rows=4,cols=8,eps=5,residual=0");
  CHECK(format_params(plain) == "cols=8,rows=4");
  CHECK(layernorm.tensors(plain).size() == 4);
  KernelSource ln = layernorm.source(Backend::cpu, bert, layernorm.default_config(bert, TargetTraits::of(Isa::avx2)));
  CHECK(define(ln, "LAYERNORM_EPSILON") == "1e-12f");
  CHECK(define(ln, "LAYERNORM_RESIDUAL") == "1");
  CHECK(define(layernorm.reference(plain), "LAYERNORM_EPSILON") == "1e-5f");
  CHECK(define(layernorm.reference(plain), "LAYERNORM_RESIDUAL") == "0");
  CHECK_THROWS_WITH(parse_params(layernorm, "rows=4,cols=8,residual=2"), Catch::Contains("residual=2 is outside 0..1"));
  const Op& elementwise = registry.get("elementwise");
  CHECK(elementwise.tensors(parse_params(elementwise, "n=10,kind=1")).size() == 3);
  CHECK(elementwise.tensors(parse_params(elementwise, "n=10,kind=3")).size() == 2);
  CHECK(elementwise.tolerance(parse_params(elementwise, "n=10,kind=2")) == 0.0);
  CHECK(elementwise.tolerance(parse_params(elementwise, "n=10,kind=5")) > 0.0);
  CHECK_THROWS_WITH(parse_params(elementwise, "n=10,kind=8"), Catch::Contains("kind=8 is outside 0..7"));
  // The softmax tolerance is relative to its outputs' size, ~1/cols.
  CHECK(softmax.tolerance(s) < 1e-6);
  CHECK(softmax.tolerance(s) * 384 > 1e-5);
}

// --- kernels against their references --------------------------------------------------

TEST_CASE("pool2d matches its reference: max and average, padded, NCHW and NCHWc", "[pool2d][kernel]") {
  check_workload("pool2d", "N=2,C=13,H=9,W=11,R=3,S=3,stride=2,pad=1,kind=0,block=1", 1);
  check_workload("pool2d", "N=2,C=13,H=9,W=11,R=3,S=3,stride=2,pad=1,kind=1,block=1", 2);
  check_workload("pool2d", "C=20,H=10,W=13,R=3,S=2,pad=1,kind=0,block=8", 3);
  check_workload("pool2d", "C=20,H=10,W=13,R=3,S=2,pad=1,kind=1,block=8", 4);
  check_workload("pool2d", "C=6,H=7,W=7,R=2,S=2,stride=2,kind=1,block=4", 5);
  check_workload("pool2d", "C=35,H=15,W=13,R=3,S=3,stride=2,kind=0,block=16", 6);
}

TEST_CASE("pool2d matches its reference: global pooling", "[pool2d][kernel]") {
  check_workload("pool2d", "N=2,C=21,H=7,W=9,kind=1,global=1,block=8", 7);
  check_workload("pool2d", "C=5,H=3,W=5,kind=0,global=1,block=1", 8);
  check_workload("pool2d", "C=40,H=1,W=1,kind=1,global=1,block=16", 9);
}

TEST_CASE("softmax matches its reference on ragged rows", "[softmax][kernel]") {
  check_workload("softmax", "rows=7,cols=33", 11);
  check_workload("softmax", "rows=1,cols=1", 12, 4);
  check_workload("softmax", "rows=19,cols=384", 13);
  check_workload("softmax", "rows=3,cols=1001", 14);
  // Both pass structures with every vector width, one row longer than every step.
  Registry registry = builtin_ops();
  const Op& softmax = registry.get("softmax");
  Params p = parse_params(softmax, "rows=5,cols=77");
  test::WorkloadChecker checker(softmax, p);
  for (const char* c : {"vec=1,unroll=1,grain=1,online=0", "vec=4,unroll=4,grain=2,online=1",
                        "vec=8,unroll=2,grain=4,online=0", "vec=16,unroll=4,grain=1,online=1",
                        "vec=16,unroll=1,grain=8,online=0"}) {
    CHECK(checker.check(parse_config(softmax, p, c, test::native_traits())));
  }
}

TEST_CASE("softmax with nan_zero writes 0 where a row masked whole or a NaN input gives NaN", "[softmax][kernel]") {
  // Row 0 is -infinity everywhere (an attention row masked whole), row 1 holds one NaN,
  // rows 2-3 are ordinary: with nan_zero rows 0-1 come out 0 and rows 2-3 as without it,
  // which leaves NaN in rows 0-1 (what ONNX's Where(IsNaN(y), 0, y) then replaces).
  Registry registry = builtin_ops();
  const Op& softmax = registry.get("softmax");
  test::TempDir dir;
  constexpr std::int64_t kRows = 4, kCols = 37;
  std::vector<float> rows_out[2];
  for (int nan_zero = 0; nan_zero <= 1; ++nan_zero) {
    Params p = parse_params(softmax, "rows=4,cols=37,nan_zero=" + std::to_string(nan_zero));
    int built = 0;
    for (const char* c : {"vec=1,unroll=1,grain=1,online=0", "vec=8,unroll=2,grain=1,online=1",
                          "vec=16,unroll=1,grain=2,online=0"}) {
      INFO("nan_zero=" << nan_zero << " " << c);
      const Config config = parse_config(softmax, p, c, test::native_traits());
      test::Kernel kernel = test::Kernel::build(softmax.source(Backend::cpu, p, config), dir.path(),
                                                "softmax_nan" + std::to_string(nan_zero) + "_" + std::to_string(built++));
      test::Buffer x(kRows * kCols), y(kRows * kCols);
      x.fill_random(77);
      for (std::int64_t j = 0; j < kCols; ++j) x.data()[j] = -INFINITY;
      x.data()[kCols + 5] = NAN;
      y.fill_nan();
      std::vector<kestrel_arg> args = {{x.data(), kRows * kCols, 0.0}, {y.data(), kRows * kCols, 0.0}};
      REQUIRE(kernel.run(args, 2) == 0);
      for (std::int64_t j = 0; j < 2 * kCols; ++j) {
        if (nan_zero) CHECK(y.data()[j] == 0.0f);
        else CHECK(std::isnan(y.data()[j]));
      }
      rows_out[nan_zero].assign(y.data() + 2 * kCols, y.data() + kRows * kCols);
      CHECK(y.guard_intact());
    }
  }
  CHECK(rows_out[0] == rows_out[1]);
  // The GPU variants leave it to the CPU op.
  const Op& gpu = registry.get("softmax", Backend::opencl);
  Params p = parse_params(gpu, "rows=4,cols=37,nan_zero=1");
  CHECK_THAT(gpu.check(p, gpu.default_config(p, test::native_traits()), test::native_traits()),
             Catch::Contains("no nan_zero"));
}

TEST_CASE("layernorm matches its reference, with and without a residual", "[layernorm][kernel]") {
  check_workload("layernorm", "rows=5,cols=37", 21);
  check_workload("layernorm", "rows=1,cols=1", 22, 4);
  check_workload("layernorm", "rows=9,cols=768,eps=12,residual=1", 23);
  check_workload("layernorm", "rows=17,cols=100,residual=1", 24);
  check_workload("layernorm", "rows=3,cols=1030,eps=6", 25);
}

TEST_CASE("elementwise matches its reference for every kind on ragged lengths", "[elementwise][kernel]") {
  for (int kind = 0; kind < 8; ++kind) {
    check_workload("elementwise", "n=1037,kind=" + std::to_string(kind), 30 + kind, 6);
  }
  check_workload("elementwise", "n=1,kind=5", 40, 4);
  check_workload("elementwise", "n=70001,kind=0", 41, 6);
  check_workload("elementwise", "n=9000,kind=6", 42, 6);
}

// --- injected bugs ---------------------------------------------------------------------

TEST_CASE("glue ops: the comparison catches injected bugs", "[glue][kernel]") {
  Registry registry = builtin_ops();
  const TargetTraits avx2 = TargetTraits::of(Isa::avx2);
  SECTION("pool2d: an average that counts the padding (count_include_pad=1)") {
    const Op& op = registry.get("pool2d");
    Params p = parse_params(op, "C=13,H=9,W=11,R=3,S=3,stride=2,pad=1,kind=1,block=4");
    test::WorkloadChecker checker(op, p);
    KernelSource good = op.source(Backend::cpu, p, op.default_config(p, avx2));
    REQUIRE(checker.matches(good));
    CHECK_FALSE(checker.matches(with_bug(good, "(float)((he - hs) * (xe[t] - xs[t]))", "(float)(R * S)")));
  }
  SECTION("softmax: the last column left out of the sum") {
    const Op& op = registry.get("softmax");
    Params p = parse_params(op, "rows=6,cols=385");
    test::WorkloadChecker checker(op, p);
    KernelSource good = op.source(Backend::cpu, p, parse_config(op, p, "vec=8,unroll=2,online=0", avx2));
    REQUIRE(checker.matches(good));
    CHECK_FALSE(checker.matches(with_bug(good, "    sum += y[c];", "    sum += c + 1 < COLS ? y[c] : 0.0f;")));
  }
  SECTION("layernorm: the unbiased variance (over cols - 1)") {
    const Op& op = registry.get("layernorm");
    Params p = parse_params(op, "rows=4,cols=384,residual=1");
    test::WorkloadChecker checker(op, p);
    KernelSource good = op.source(Backend::cpu, p, op.default_config(p, avx2));
    REQUIRE(checker.matches(good));
    CHECK_FALSE(checker.matches(with_bug(good, "squares / (float)COLS", "squares / (float)(COLS - 1)")));
  }
  SECTION("elementwise: gelu by x * sigmoid(1.702 x); the last element of a task skipped") {
    const Op& op = registry.get("elementwise");
    Params gelu = parse_params(op, "n=1000,kind=5");
    test::WorkloadChecker checker(op, gelu);
    KernelSource good = op.source(Backend::cpu, gelu, op.default_config(gelu, avx2));
    REQUIRE(checker.matches(good));
    CHECK_FALSE(checker.matches(with_bug(good, "kestrel_gelu(*x)", "*x / (1.0f + kestrel_exp(-1.702f * *x))")));
    Params add = parse_params(op, "n=1001,kind=0");
    test::WorkloadChecker add_checker(op, add);
    KernelSource plain = op.source(Backend::cpu, add, parse_config(op, add, "vec=8,unroll=2", avx2));
    REQUIRE(add_checker.matches(plain));
    CHECK_FALSE(add_checker.matches(with_bug(plain, "i + l < end; ++l) out", "i + l + 1 < end; ++l) out")));
  }
}
