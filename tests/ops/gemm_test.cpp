// gemm kernel correctness: the default and ~15 random valid configurations (pack_a and
// pack_b both ways, every split) per shape, serial and two-threaded, against the
// reference; the library-class micro-tiles on edge shapes; the kernel's register check;
// and injected bugs that the comparison must catch.
#include <catch2/catch.hpp>

#include "kernel_harness.h"

using namespace kestrel::ops;

namespace {

void check_shape(const std::string& shape, std::uint64_t seed) {
  Registry registry = builtin_ops();
  const Op& gemm = registry.get("gemm");
  Params params = parse_params(gemm, shape);
  test::WorkloadChecker checker(gemm, params);
  CHECK(checker.check(gemm.default_config(params, test::native_traits())));
  auto configs = test::random_configs(gemm, params, 15, seed);
  CHECK(configs.size() == 15);
  for (const auto& config : configs) CHECK(checker.check(config));
}

}  // namespace

TEST_CASE("gemm matches the reference: remainders 100x70x33", "[gemm][kernel]") { check_shape("100x70x33", 1); }
TEST_CASE("gemm matches the reference: skinny M=1", "[gemm][kernel]") { check_shape("1x300x77", 2); }
TEST_CASE("gemm matches the reference: N=1", "[gemm][kernel]") { check_shape("37x1x19", 3); }
TEST_CASE("gemm matches the reference: exact 64x64x64", "[gemm][kernel]") { check_shape("64x64x64", 4); }
TEST_CASE("gemm matches the reference: several blocks 129x200x300", "[gemm][kernel]") { check_shape("129x200x300", 5); }
TEST_CASE("gemm matches the reference: K=1", "[gemm][kernel]") { check_shape("7x5x1", 6); }

TEST_CASE("gemm multi-block configurations match the reference", "[gemm][kernel]") {
  // Small cache tiles so every loop order packs several blocks in each dimension.
  Registry registry = builtin_ops();
  const Op& gemm = registry.get("gemm");
  Params params = parse_params(gemm, "77x90x100");
  test::WorkloadChecker checker(gemm, params);
  for (int order : {0, 1, 2}) {
    for (int pack_a : {0, 1}) {
      for (int pack_b : {0, 1}) {
        for (int split : {0, 1, 2, 3}) {
          if (split == 3 && order != 0) continue;  // shared B runs jc,pc,ic only
          Config c = parse_config(gemm, params, "mc=24,nc=32,kc=32,mr=6,nr=16,vec=8,unroll=2", test::native_traits());
          c["order"] = order;
          c["pack_a"] = pack_a;
          c["pack_b"] = pack_b;
          c["split"] = split;
          REQUIRE(gemm.check(params, c, test::native_traits()).empty());
          CHECK(checker.check(c));
        }
      }
    }
  }
}

TEST_CASE("gemm library-class micro-tiles match the reference on edge shapes", "[gemm][kernel]") {
  const TargetTraits kAvx512 = TargetTraits::of(Isa::avx512);
  // AVX-512-class tiles (up to 31 of 32 registers), with M, N, K not multiples of any
  // tile or block, A and B packed or read in place.
  Registry registry = builtin_ops();
  const Op& gemm = registry.get("gemm");
  for (const char* shape : {"61x203x77", "29x97x300"}) {
    Params params = parse_params(gemm, shape);
    test::WorkloadChecker checker(gemm, params);
    for (const char* tile : {"mr=6,nr=64,vec=16", "mr=14,nr=32,vec=16", "mr=4,nr=96,vec=16", "mr=8,nr=48,vec=16",
                             "mr=12,nr=32,vec=16", "mr=7,nr=16,vec=16", "mr=5,nr=80,vec=16", "mr=10,nr=16,vec=8"}) {
      for (int pack_a : {0, 1}) {
        for (int pack_b : {0, 1}) {
          Config c = parse_config(gemm, params, std::string(tile) + ",kc=64,unroll=4", kAvx512);
          // The smallest cache blocks of at least two micro-tiles.
          auto block = [&](const char* knob, std::int64_t tile_size) {
            for (const auto& k : gemm.knobs(params)) {
              if (k.name != knob) continue;
              for (auto v : k.values) {
                if (v % tile_size == 0 && v >= 2 * tile_size) return v;
              }
            }
            return std::int64_t{0};
          };
          c["mc"] = block("mc", c["mr"]);
          c["nc"] = block("nc", c["nr"]);
          c["pack_a"] = pack_a;
          c["pack_b"] = pack_b;
          c["split"] = pack_a * 2 + pack_b;
          INFO(format_config(c));
          REQUIRE(gemm.check(params, c, kAvx512).empty());
          // gemm.c refuses a tile over this machine's registers when VEC is their width
          // (10x16 of 8 floats on AVX2); wider vectors are split and still run.
          const TargetTraits& here = test::native_traits();
          if (c["vec"] == here.vector_floats && !gemm.check(params, c, here).empty()) continue;
          CHECK(checker.check(c));
        }
      }
    }
  }
}

TEST_CASE("gemm with B in panels matches the reference: loop orders, splits, edge panels, random configs", "[gemm][kernel]") {
  // B as P-wide column panels (a model's packed weights): N not a multiple of P, so the
  // last panel's padding columns hold the checker's random values, which must not reach C.
  Registry registry = builtin_ops();
  const Op& gemm = registry.get("gemm");
  Params params = parse_params(gemm, "M=77,N=90,K=100,panels=16,bias=1,act=1");
  REQUIRE(gemm.tensors(params)[1].shape == std::vector<std::int64_t>{6, 100, 16});
  test::WorkloadChecker checker(gemm, params);
  for (int order : {0, 1, 2}) {
    for (int pack_a : {0, 1}) {
      for (int split : {0, 1, 2, 3}) {
        if (split == 3 && order != 0) continue;
        Config c = parse_config(gemm, params, "mc=24,nc=32,kc=32,mr=6,nr=16,vec=8,unroll=2,pack_b=1", test::native_traits());
        c["order"] = order;
        c["pack_a"] = pack_a;
        c["split"] = split;
        REQUIRE(gemm.check(params, c, test::native_traits()).empty());
        CHECK(checker.check(c));
      }
    }
  }
  const Config fallback = gemm.default_config(params, test::native_traits());
  CHECK(fallback.at("nr") == 16);
  CHECK(fallback.at("pack_b") == 1);
  CHECK(checker.check(fallback));
  for (const auto& config : test::random_configs(gemm, params, 10, 11)) {
    CHECK(config.at("nr") == 16);
    CHECK(checker.check(config));
  }
  // Skinny M reads the panels too.
  Params skinny = parse_params(gemm, "M=1,N=70,K=33,panels=32");
  test::WorkloadChecker skinny_checker(gemm, skinny);
  CHECK(skinny_checker.check(gemm.default_config(skinny, test::native_traits())));
  // What the panels fix, and what they refuse.
  Config other = fallback;
  other["nr"] = 32;
  CHECK_THAT(gemm.check(params, other, test::native_traits()), Catch::Contains("nr"));
  other = fallback;
  other["pack_b"] = 0;
  CHECK_THAT(gemm.check(params, other, test::native_traits()), Catch::Contains("pack_b"));
  CHECK_THROWS_WITH(gemm.validate(parse_params(gemm, "M=4,N=8,K=8,panels=3")), Catch::Contains("panels=3 is not a micro-tile width"));
  CHECK(gemm.vendor_kernels(params).empty());
  // The cost model's features do not see the parameter (B in panels reads as pack_b=1).
  for (const auto& [name, value] : gemm.features(params, fallback)) CHECK(name != "param.panels");
}

TEST_CASE("gemm skinny shapes: in-place A and B", "[gemm][kernel]") {
  Registry registry = builtin_ops();
  const Op& gemm = registry.get("gemm");
  for (const char* shape : {"1x515x260", "16x300x513", "50x17x700"}) {
    Params params = parse_params(gemm, shape);
    test::WorkloadChecker checker(gemm, params);
    CHECK(checker.check(gemm.default_config(params, test::native_traits())));
    for (const auto& config : test::random_configs(gemm, params, 8, 11)) CHECK(checker.check(config));
  }
}

TEST_CASE("gemm's register check refuses micro-tiles that do not fit the target", "[gemm][kernel]") {
  // The op's check refuses tiles over the target's register file (its traits); gemm.c
  // refuses them again at compile time when VEC is the register width, for sources made
  // for another target. AVX2 (haswell): 16 ymm registers of 8 floats.
  Registry registry = builtin_ops();
  const Op& gemm = registry.get("gemm");
  Params params = parse_params(gemm, "64x64x64");
  const TargetTraits avx2 = TargetTraits::of(Isa::avx2), avx512 = TargetTraits::of(Isa::avx512);
  test::TempDir dir;
  std::string output;
  auto source = [&](const char* tile) {
    Config c = parse_config(gemm, params, std::string(tile) + ",nc=64", avx512);
    REQUIRE(gemm.check(params, c, avx512).empty());
    return gemm.source(Backend::cpu, params, c);
  };
  auto check_on = [&](const char* tile, const TargetTraits& target) {
    return gemm.check(params, parse_config(gemm, params, std::string(tile) + ",nc=64", target), target);
  };
  CHECK(check_on("mr=6,nr=16,vec=8,mc=48", avx2).empty());
  CHECK_THAT(check_on("mr=6,nr=32,vec=8,mc=48", avx2), Catch::Contains("needs 29 vector registers on avx2"));
  // A 16-float vector takes two ymm registers: 14x32 needs (28 + 2) * 2 + 1.
  CHECK_THAT(check_on("mr=14,nr=32,vec=16,mc=56", avx2), Catch::Contains("needs 61 vector registers"));
  CHECK(check_on("mr=2,nr=32,vec=16,mc=48", avx2).empty());  // (4 + 2) * 2 + 1 = 13
  CHECK(check_on("mr=14,nr=32,vec=16,mc=56", avx512).empty());
  CHECK_THAT(check_on("mr=8,nr=16,vec=4,mc=48", TargetTraits::of(Isa::neon32)), Catch::Contains("neon32"));

  // 6x16 of 8 floats: 12 accumulators + 2 + 1 = 15 ymm.
  CHECK(test::compiles_for(source("mr=6,nr=16,vec=8,mc=48"), "haswell", dir.path(), output));
  // 6x32 of 8 floats: 24 + 4 + 1 = 29 ymm, fine for AVX-512's 32 but not AVX2's 16.
  CHECK_FALSE(test::compiles_for(source("mr=6,nr=32,vec=8,mc=48"), "haswell", dir.path(), output));
  CHECK_THAT(output, Catch::Contains(test::kRegisterRefusal));
  CHECK(test::compiles_for(source("mr=6,nr=32,vec=8,mc=48"), "skylake-avx512", dir.path(), output));
  // 14x32 of 16 floats: 28 + 2 + 1 = 31 zmm fits AVX-512; vectors wider than AVX2's
  // registers are split by the compiler and not checked.
  CHECK(test::compiles_for(source("mr=14,nr=32,vec=16,mc=56"), "skylake-avx512", dir.path(), output));
  CHECK(test::compiles_for(source("mr=14,nr=32,vec=16,mc=56"), "haswell", dir.path(), output));
}

namespace {

// `source` with its first occurrence of `from` replaced by `to` (which must exist).
KernelSource inject(KernelSource source, const std::string& from, const std::string& to) {
  auto at = source.text.find(from);
  REQUIRE(at != std::string::npos);
  source.text.replace(at, from.size(), to);
  return source;
}

}  // namespace

TEST_CASE("gemm checks catch injected bugs", "[gemm][kernel]") {
  // Each mutation breaks one path that the configurations below exercise; the comparison
  // with the reference must notice every one, and accept the unmodified kernel.
  Registry registry = builtin_ops();
  const Op& gemm = registry.get("gemm");
  Params params = parse_params(gemm, "37x70x100");  // 37 % 6 != 0, 70 % 32 != 0, K > kc
  test::WorkloadChecker checker(gemm, params);
  Config in_place = parse_config(gemm, params, "mc=24,nc=64,kc=32,mr=6,nr=32,vec=16,pack_a=0,pack_b=0", test::native_traits());
  Config packed = parse_config(gemm, params, "mc=24,nc=64,kc=32,mr=6,nr=32,vec=16,pack_a=1,pack_b=1", test::native_traits());
  KernelSource a = gemm.source(Backend::cpu, params, in_place), b = gemm.source(Backend::cpu, params, packed);
  Config shared = packed;
  shared["split"] = 3;
  shared["mc"] = 24;  // two row blocks sharing each packed B block
  KernelSource sh = gemm.source(Backend::cpu, params, shared);
  CHECK(checker.matches(a));
  CHECK(checker.matches(b));
  CHECK(checker.matches(sh));
  // Shared B: only the first panel of each B block is packed.
  CHECK_FALSE(checker.matches(inject(sh, "parallel_for(ctx->svc, (s.nc + GEMM_NR - 1) / GEMM_NR, pack_b_task",
                                     "parallel_for(ctx->svc, 1, pack_b_task")));
  // Later k blocks overwrite C instead of accumulating.
  CHECK_FALSE(checker.matches(inject(b, "nr, pc > 0);\n  }\n#else", "nr, pc > GEMM_KC);\n  }\n#else")));
  // The short edge panel of in-place A is skipped.
  CHECK_FALSE(checker.matches(inject(a, "if (full < mc) micro_kernel", "if (0) micro_kernel")));
  // The broadcast of A reads every other k twice.
  CHECK_FALSE(checker.matches(inject(b, "av = a[i * ars + k * aks]", "av = a[i * ars + (k & ~1) * aks]")));
  // Edge tiles narrower than NR store one column too few.
  CHECK_FALSE(checker.matches(inject(b, "for (int64_t j = 0; j < nr; ++j) p[j] = tile[j];",
                                     "for (int64_t j = 0; j + 1 < nr; ++j) p[j] = tile[j];")));
  // Not a bug: padding rows of packed A left unset only change rows that are computed and
  // never stored, so this mutation must pass (a check that rejects correct kernels is as
  // wrong as one that accepts broken ones).
  CHECK(checker.matches(inject(b, "for (int64_t k = 0; k < kc; ++k) panel[k * GEMM_MR + i] = 0.0f;", "")));
}

TEST_CASE("gemm epilogues match the reference: every activation, with and without bias and residual",
          "[gemm][kernel][epilogue]") {
  // K = 100 in k blocks of 32 (the epilogue must apply once, after the full reduction),
  // ragged M and N, A and B packed or in place, every split.
  Registry registry = builtin_ops();
  const Op& gemm = registry.get("gemm");
  // The epilogue's parameters are optional: at 0 they are left out of the workload.
  CHECK(parse_params(gemm, "M=5,N=6,K=7,bias=0,residual=0,act=0") == parse_params(gemm, "5x6x7"));
  CHECK(parse_params(gemm, "M=5,N=6,K=7,act=2").at("act") == 2);
  CHECK(parse_params(gemm, "M=5,N=6,K=7,act=8").at("act") == 8);
  CHECK_THROWS_WITH(parse_params(gemm, "M=5,N=6,K=7,act=10"), Catch::Contains("act=10 is outside 0..9"));
  CHECK_THROWS_WITH(parse_params(gemm, "5x6x7x1"), Catch::Contains("at most 3"));
  for (int act = 0; act <= 9; ++act) {
    for (int bias = 0; bias <= 1; ++bias) {
      for (int residual = 0; residual <= 1; ++residual) {
        Params params = parse_params(gemm, "M=37,N=70,K=100,bias=" + std::to_string(bias) +
                                               ",residual=" + std::to_string(residual) + ",act=" + std::to_string(act));
        INFO(format_params(params));
        auto tensors = gemm.tensors(params);
        REQUIRE(tensors.size() == static_cast<std::size_t>(3 + bias + residual));
        if (bias) CHECK(tensors[2].shape == std::vector<std::int64_t>{70});
        if (residual) CHECK(tensors[2 + bias].shape == std::vector<std::int64_t>{37, 70});
        CHECK(tensors.back().name == "C");
        test::WorkloadChecker checker(gemm, params);
        const char* configs[] = {"mc=24,nc=64,kc=32,mr=6,nr=16,vec=8,pack_a=0,pack_b=0,split=1,unroll=2",
                                 "mc=24,nc=32,kc=32,mr=6,nr=32,vec=16,pack_a=1,pack_b=1,split=3,order=0",
                                 "mc=16,nc=48,kc=64,mr=4,nr=24,vec=8,pack_a=1,pack_b=0,split=2,order=2"};
        for (const char* text : configs) {
          Config c = parse_config(gemm, params, text, test::native_traits());
          INFO(format_config(c));
          CHECK(checker.check(c));
        }
      }
    }
  }
}

TEST_CASE("gemm epilogue checks catch injected bugs", "[gemm][kernel][epilogue]") {
  Registry registry = builtin_ops();
  const Op& gemm = registry.get("gemm");
  Params params = parse_params(gemm, "M=37,N=70,K=100,bias=1,residual=1,act=1");
  test::WorkloadChecker checker(gemm, params);
  KernelSource s = gemm.source(Backend::cpu, params,
                               parse_config(gemm, params, "mc=24,nc=64,kc=32,mr=6,nr=16,vec=8,pack_a=1,pack_b=1", test::native_traits()));
  CHECK(checker.matches(s));
  // The epilogue runs on every k block (bias added four times, ReLU on partial sums).
  CHECK_FALSE(checker.matches(inject(s, "const int last = pc + kc >= GEMM_K;", "const int last = 1;")));
  // The epilogue never runs.
  CHECK_FALSE(checker.matches(inject(s, "const int last = pc + kc >= GEMM_K;", "const int last = 0;")));
  // Full tiles read the residual of the tile's first row for every row.
  CHECK_FALSE(checker.matches(inject(s, "VLOAD(rv, res + i * GEMM_N + j * GEMM_VEC);", "VLOAD(rv, res + j * GEMM_VEC);")));
  // Edge tiles add the first column's bias everywhere.
  CHECK_FALSE(checker.matches(inject(s, "v += bias[j];", "v += bias[0];")));
  // The activation is skipped on full tiles.
  CHECK_FALSE(checker.matches(inject(s, "acc[i][j] = kestrel_activate(acc[i][j], GEMM_ACT);", "")));
}
