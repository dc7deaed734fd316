// Random workload families (kestrel datagen): distinct, valid, under the FLOP limit,
// normalised, reproducible from the seed, with the NCHWc block asked for; clear errors
// for an op with no family and for a family too large to draw.
#include <catch2/catch.hpp>

#include <set>

#include "kestrel/ops/op.h"
#include "kestrel/tuner/shape_family.h"

using namespace kestrel;
using Catch::Matchers::Contains;

TEST_CASE("every op with a family gives distinct valid workloads under the limit", "[tuner][datagen]") {
  ops::Registry registry = ops::builtin_ops();
  for (const auto& name : tuner::family_ops()) {
    INFO(name);
    const ops::Op& op = registry.get(name);
    tuner::FamilyOptions options;
    options.count = 12;
    options.seed = 7;
    options.max_gflop = 0.8;
    auto family = tuner::shape_family(op, options);
    REQUIRE(family.size() == 12);
    std::set<std::string> seen;
    for (const auto& params : family) {
      CHECK_NOTHROW(op.validate(params));
      CHECK(op.flops(params) <= 0.8e9);
      CHECK(ops::normalize_params(op, params) == params);
      if (params.contains("block")) CHECK(params.at("block") == 8);
      seen.insert(ops::format_params(params));
    }
    CHECK(seen.size() == family.size());
    // The same seed, the same family; another seed, another one.
    CHECK(tuner::shape_family(op, options) == family);
    options.seed = 8;
    CHECK(tuner::shape_family(op, options) != family);
  }
}

TEST_CASE("the NCHWc families follow the block asked for", "[tuner][datagen]") {
  ops::Registry registry = ops::builtin_ops();
  tuner::FamilyOptions options;
  options.count = 6;
  options.block = 16;
  for (const auto& params : tuner::shape_family(registry.get("conv2d_nchwc"), options)) {
    CHECK(params.at("block") == 16);
    CHECK(params.at("C") % 16 == 0);
  }
}

TEST_CASE("families refuse an op without one and a count they cannot draw", "[tuner][datagen]") {
  ops::Registry registry = ops::builtin_ops();
  CHECK_THROWS_WITH(tuner::shape_family(registry.get("softmax"), {}),
                    Contains("no shape family for op softmax") && Contains("gemm"));
  tuner::FamilyOptions options;
  options.count = 10;
  options.max_gflop = 1e-9;  // nothing is that small
  CHECK_THROWS_WITH(tuner::shape_family(registry.get("gemm"), options), Contains("found only 0 distinct gemm"));
}
