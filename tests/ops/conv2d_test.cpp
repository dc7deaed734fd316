// conv2d kernel correctness: the default and ~15 random valid configurations (every
// split) per shape, covering padding, stride, dilation and remainders, serial and
// two-threaded, against the reference.
#include <catch2/catch.hpp>

#include "kernel_harness.h"

using namespace kestrel::ops;

namespace {

void check_shape(const std::string& shape, std::uint64_t seed) {
  Registry registry = builtin_ops();
  const Op& conv = registry.get("conv2d");
  Params params = parse_params(conv, shape);
  test::WorkloadChecker checker(conv, params);
  CHECK(checker.check(conv.default_config(params, test::native_traits())));
  auto configs = test::random_configs(conv, params, 15, seed);
  CHECK(configs.size() == 15);
  for (const auto& config : configs) CHECK(checker.check(config));
}

}  // namespace

TEST_CASE("conv2d matches the reference: 3x3 pad 1 with remainders", "[conv2d][kernel]") {
  check_shape("C=3,H=13,W=11,K=5,R=3,S=3,pad=1", 1);
}
TEST_CASE("conv2d matches the reference: stride 2, batch 2", "[conv2d][kernel]") {
  check_shape("N=2,C=8,H=15,W=17,K=10,R=3,S=3,stride=2,pad=1", 2);
}
TEST_CASE("conv2d matches the reference: dilation 2", "[conv2d][kernel]") {
  check_shape("C=5,H=12,W=14,K=7,R=3,S=3,dilation=2,pad=2", 3);
}
TEST_CASE("conv2d matches the reference: 1x1", "[conv2d][kernel]") { check_shape("C=16,H=9,W=9,K=12,R=1,S=1", 4); }
TEST_CASE("conv2d matches the reference: stride 3, dilation 2, 5x4 filter", "[conv2d][kernel]") {
  check_shape("C=4,H=20,W=23,K=6,R=5,S=4,stride=3,pad=2,dilation=2", 5);
}
TEST_CASE("conv2d matches the reference: padding wider than the filter", "[conv2d][kernel]") {
  check_shape("C=2,H=3,W=1,K=3,R=1,S=2,pad=2", 6);
}
TEST_CASE("conv2d matches the reference: wide rows", "[conv2d][kernel]") {
  check_shape("C=6,H=5,W=70,K=9,R=3,S=3,pad=1", 7);
}
