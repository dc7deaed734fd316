// batch_matmul kernel correctness: every transpose combination on ragged shapes (the
// default and random valid configurations, serial and two-threaded) against the
// reference; the micro-tiles of each target's default with several k blocks, row blocks
// and both splits; the attention shapes in small; the register budget from target
// traits and the traits-derived defaults; and injected bugs the comparison must catch.
#include <catch2/catch.hpp>

#include "kernel_harness.h"

using namespace kestrel::ops;

namespace {

const TargetTraits kAvx2 = TargetTraits::of(Isa::avx2);
const TargetTraits kAvx512 = TargetTraits::of(Isa::avx512);

// Row blocks of M rows under configuration c (mb micro-panels of mr rows each).
std::int64_t row_blocks(std::int64_t m, const Config& c) {
  const std::int64_t rows = c.at("mb") * c.at("mr");
  return (m + rows - 1) / rows;
}

std::string transposes(int ta, int tb) {
  return ",trans_a=" + std::to_string(ta) + ",trans_b=" + std::to_string(tb);
}

// `source` with its first occurrence of `from` replaced by `to` (which must exist).
KernelSource inject(KernelSource source, const std::string& from, const std::string& to) {
  auto at = source.text.find(from);
  REQUIRE(at != std::string::npos);
  source.text.replace(at, from.size(), to);
  return source;
}

}  // namespace

TEST_CASE("batch_matmul workloads: tensors follow the transposes, which are optional", "[batch_matmul]") {
  Registry registry = builtin_ops();
  const Op& op = registry.get("batch_matmul");
  Params plain = parse_params(op, "batch=12,M=128,N=128,K=64");
  CHECK(plain.count("trans_a") == 0);
  CHECK(format_params(parse_params(op, "batch=12,M=128,N=128,K=64,trans_b=0")) == format_params(plain));
  Params qk = parse_params(op, "batch=12,M=128,N=128,K=64,trans_b=1");
  auto tensors = op.tensors(qk);
  REQUIRE(tensors.size() == 3);
  CHECK(tensors[0].shape == std::vector<std::int64_t>{12, 128, 64});
  CHECK(tensors[1].shape == std::vector<std::int64_t>{12, 128, 64});  // [batch][N][K]
  CHECK(tensors[2].shape == std::vector<std::int64_t>{12, 128, 128});
  Params ta = parse_params(op, "batch=2,M=5,N=7,K=3,trans_a=1");
  CHECK(op.tensors(ta)[0].shape == std::vector<std::int64_t>{2, 3, 5});  // [batch][K][M]
  CHECK(op.tensors(ta)[1].shape == std::vector<std::int64_t>{2, 3, 7});
  CHECK(op.flops(qk) == 2.0 * 12 * 128 * 128 * 64);
  CHECK_THROWS_WITH(parse_params(op, "batch=2,M=5,N=7,K=3,trans_a=2"), Catch::Contains("trans_a=2 is outside 0..1"));
  CHECK_THROWS_WITH(parse_params(op, "batch=2,M=5,N=7"), Catch::Contains("missing parameter K"));
}

TEST_CASE("batch_matmul matches the reference: every transpose combination on ragged shapes",
          "[batch_matmul][kernel]") {
  Registry registry = builtin_ops();
  const Op& op = registry.get("batch_matmul");
  std::uint64_t seed = 1;
  for (const char* shape : {"batch=3,M=37,N=45,K=70", "batch=2,M=1,N=29,K=5", "batch=1,M=19,N=3,K=130"}) {
    for (int ta : {0, 1}) {
      for (int tb : {0, 1}) {
        Params params = parse_params(op, shape + transposes(ta, tb));
        INFO(format_params(params));
        test::WorkloadChecker checker(op, params);
        CHECK(checker.check(op.default_config(params, test::native_traits())));
        auto configs = test::random_configs(op, params, 6, seed++);
        CHECK(configs.size() == 6);
        for (const auto& config : configs) CHECK(checker.check(config));
      }
    }
  }
}

TEST_CASE("batch_matmul: each target's micro-tile with several k blocks, row blocks and both splits",
          "[batch_matmul][kernel]") {
  // The defaults' tiles (AVX2 6x16, AVX-512 8x32, NEON 8x12, ARMv7 6x8) on a shape that is
  // a multiple of none of them, with K split into several k blocks.
  Registry registry = builtin_ops();
  const Op& op = registry.get("batch_matmul");
  for (int ta : {0, 1}) {
    for (int tb : {0, 1}) {
      Params params = parse_params(op, "batch=3,M=53,N=75,K=100" + transposes(ta, tb));
      test::WorkloadChecker checker(op, params);
      for (const char* tile : {"mr=6,nr=16,vec=8", "mr=8,nr=32,vec=16", "mr=8,nr=12,vec=4", "mr=6,nr=8,vec=4"}) {
        for (int split : {0, 1}) {
          for (int pack_b : {0, 1}) {
            if (tb == 1 && pack_b == 0) continue;  // a transposed B is always packed
            Config c = parse_config(op, params, std::string(tile) + ",kc=32,mb=2,unroll=2", kAvx512);
            c["split"] = split;
            c["pack_b"] = pack_b;
            INFO(format_params(params) << " [" << format_config(c) << "]");
            REQUIRE(op.check(params, c, kAvx512).empty());
            CHECK(checker.check(c));
          }
        }
      }
    }
  }
}

TEST_CASE("batch_matmul matches the reference on attention shapes (QK^T and PV)", "[batch_matmul][kernel]") {
  Registry registry = builtin_ops();
  const Op& op = registry.get("batch_matmul");
  for (const char* shape : {"batch=2,M=77,N=77,K=64,trans_b=1", "batch=2,M=77,N=64,K=77"}) {
    Params params = parse_params(op, shape);
    test::WorkloadChecker checker(op, params);
    for (Isa isa : {Isa::avx2, Isa::avx512, Isa::neon, Isa::neon32}) {
      Config c = op.default_config(params, TargetTraits::of(isa));
      INFO(shape << " " << to_string(isa) << " default [" << format_config(c) << "]");
      CHECK(checker.check(c));
    }
  }
}

TEST_CASE("batch_matmul: the register budget and the default come from the target's traits", "[batch_matmul]") {
  Registry registry = builtin_ops();
  const Op& op = registry.get("batch_matmul");
  Params p = parse_params(op, "batch=12,M=384,N=384,K=64,trans_b=1");
  auto why = [&](const std::string& text, Isa isa) {
    const TargetTraits traits = TargetTraits::of(isa);
    return op.check(p, parse_config(op, p, text, traits), traits);
  };
  // 6x16 of 8 floats: 12 accumulators + 2 + 1 = 15 ymm.
  CHECK(why("mr=6,nr=16,vec=8", Isa::avx2).empty());
  // 6x32 of 8 floats: 24 + 4 + 1 = 29: over AVX2's 16 registers, within AVX-512's 32.
  CHECK_THAT(why("mr=6,nr=32,vec=8", Isa::avx2), Catch::Contains("needs 29 vector registers"));
  CHECK(why("mr=6,nr=32,vec=8", Isa::avx512).empty());
  // 16-float vectors take two ymm registers each: 6x32 needs (12 + 2) * 2 + 1 = 29 on AVX2.
  CHECK_THAT(why("mr=6,nr=32,vec=16", Isa::avx2), Catch::Contains("needs 29 vector registers on avx2"));
  CHECK(why("mr=14,nr=32,vec=16,mb=16", Isa::avx512).empty());
  CHECK_THAT(why("mr=16,nr=32,vec=16", Isa::avx512), Catch::Contains("more than its 32"));
  // NEON: 8x12 of 4 floats is 24 + 3 + 1 = 28 of AArch64's 32 but not ARMv7's 16.
  CHECK(why("mr=8,nr=12,vec=4", Isa::neon).empty());
  CHECK_FALSE(why("mr=8,nr=12,vec=4", Isa::neon32).empty());
  CHECK_THROWS_WITH(why("pack_b=0", Isa::avx512), Catch::Contains("pack_b=0 is not in its domain {1}"));
  CHECK_THAT(why("mr=14,mb=64", Isa::avx512), Catch::Contains("already covers M=384"));
  CHECK_THAT(why("nr=12,vec=8", Isa::avx512), Catch::Contains("not a multiple of vec"));

  struct Expected {
    Isa isa;
    std::int64_t mr, nr, vec;
  };
  for (const Expected& e : {Expected{Isa::avx2, 6, 16, 8}, Expected{Isa::avx512, 8, 32, 16},
                            Expected{Isa::neon, 8, 12, 4}, Expected{Isa::neon32, 6, 8, 4}}) {
    TargetTraits traits = TargetTraits::of(e.isa);
    Config c = op.default_config(p, traits);
    INFO(traits.to_string() << ": " << format_config(c));
    CHECK(op.check(p, c, traits).empty());
    CHECK(c.at("mr") == e.mr);
    CHECK(c.at("nr") == e.nr);
    CHECK(c.at("vec") == e.vec);
    CHECK(c.at("pack_b") == 1);
  }
  // Threads share whole batch matrices when there are enough, else (batch, row block) pairs,
  // at least four per core.
  TargetTraits two_cores = TargetTraits::of(Isa::avx2);
  two_cores.cores = 2;
  CHECK(op.default_config(p, two_cores).at("split") == 0);  // 12 heads
  Params single = parse_params(op, "batch=1,M=128,N=64,K=64");
  Config one = op.default_config(single, two_cores);
  CHECK(one.at("split") == 1);
  CHECK(row_blocks(128, one) >= 8);
  // Any workload: the default is valid on every target, features are stable.
  std::vector<std::string> names;
  for (std::string shape : {"batch=1,M=1,N=1,K=1", "batch=5,M=3,N=2,K=9,trans_a=1", "batch=12,M=128,N=64,K=128",
                            "batch=64,M=1000,N=17,K=3000,trans_a=1,trans_b=1"}) {
    Params q = parse_params(op, shape);
    for (Isa isa : {Isa::scalar, Isa::sse, Isa::avx2, Isa::avx512, Isa::neon, Isa::neon32}) {
      TargetTraits traits = TargetTraits::of(isa);
      Config c = op.default_config(q, traits);
      INFO(shape << " " << traits.to_string() << ": " << format_config(c));
      CHECK(op.check(q, c, traits).empty());
    }
    std::vector<std::string> these;
    for (const auto& [name, value] : op.features(q, op.default_config(q, TargetTraits::of(Isa::avx2)))) {
      these.push_back(name);
      CHECK(std::isfinite(value));
      CHECK(value >= 0);
    }
    if (names.empty()) names = these;
    CHECK(these == names);
  }
}

TEST_CASE("batch_matmul checks catch injected bugs", "[batch_matmul][kernel]") {
  // Each mutation breaks one path that the configurations below exercise; the comparison
  // with the reference must notice every one, and accept the unmodified kernels.
  Registry registry = builtin_ops();
  const Op& op = registry.get("batch_matmul");
  Params tp = parse_params(op, "batch=3,M=37,N=45,K=70,trans_a=1,trans_b=1");
  Params np = parse_params(op, "batch=3,M=37,N=45,K=70");
  test::WorkloadChecker transposed(op, tp), plain(op, np);
  const char* tile = "mr=6,nr=16,vec=8,kc=32,mb=2,unroll=2";
  KernelSource t0 = op.source(Backend::cpu, tp, parse_config(op, tp, std::string(tile) + ",split=0,pack_b=1", kAvx2));
  KernelSource t1 = op.source(Backend::cpu, tp, parse_config(op, tp, std::string(tile) + ",split=1,pack_b=1", kAvx2));
  KernelSource n0 = op.source(Backend::cpu, np, parse_config(op, np, std::string(tile) + ",split=0,pack_b=0", kAvx2));
  CHECK(transposed.matches(t0));
  CHECK(transposed.matches(t1));
  CHECK(plain.matches(n0));
  // The transposed B is packed reading every other k twice.
  CHECK_FALSE(transposed.matches(inject(t0, "bp[k * NR + j] = src[k];", "bp[k * NR + j] = src[k & ~1];")));
  // A transposed A is read with the row stride of an untransposed one.
  CHECK_FALSE(transposed.matches(inject(t0, "#define A_KS M", "#define A_KS (M - 1)")));
  // Split 1: only the first batch matrix of B is packed.
  CHECK_FALSE(transposed.matches(inject(t1, "kestrel_parallel_for(svc, BMM_BATCH, pack_task",
                                        "kestrel_parallel_for(svc, 1, pack_task")));
  // Later k blocks overwrite C instead of accumulating.
  CHECK_FALSE(plain.matches(inject(n0, "MR, nr, pc > 0);", "MR, nr, 0);")));
  // The short edge panel of rows is skipped.
  CHECK_FALSE(plain.matches(inject(n0, "if (full < mc) micro_kernel", "if (0) micro_kernel")));
  // Edge tiles narrower than NR store one column too few.
  CHECK_FALSE(plain.matches(inject(n0, "for (int64_t j = 0; j < nr; ++j) p[j] = tile[j];",
                                   "for (int64_t j = 0; j + 1 < nr; ++j) p[j] = tile[j];")));
  // The in-place B's edge panel is packed from the wrong column.
  CHECK_FALSE(plain.matches(inject(n0, "pack_b_panel(bp, b, N / NR * NR, N % NR)", "pack_b_panel(bp, b, 0, N % NR)")));
}
