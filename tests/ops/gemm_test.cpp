// gemm kernel correctness: the default and ~15 random valid configurations (pack_b both
// ways, every split) per shape, serial and two-threaded, against the reference.
#include <catch2/catch.hpp>

#include "kernel_harness.h"

using namespace kestrel::ops;

namespace {

void check_shape(const std::string& shape, std::uint64_t seed) {
  Registry registry = builtin_ops();
  const Op& gemm = registry.get("gemm");
  Params params = parse_params(gemm, shape);
  test::WorkloadChecker checker(gemm, params);
  CHECK(checker.check(gemm.default_config(params)));
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
    for (int pack_b : {0, 1}) {
      for (int split : {0, 1, 2}) {
        Config c = parse_config(gemm, params, "mc=24,nc=32,kc=32,mr=6,nr=16,vec=8,unroll=2");
        c["order"] = order;
        c["pack_b"] = pack_b;
        c["split"] = split;
        REQUIRE(gemm.check(params, c).empty());
        CHECK(checker.check(c));
      }
    }
  }
}
