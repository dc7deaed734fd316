// conv2d kernel correctness: the default and ~15 random valid configurations (every
// split) per shape, covering padding, stride, dilation, groups and remainders, serial and
// two-threaded, against the reference; injected bugs in the grouped kernel.
#include <catch2/catch.hpp>

#include "kernel_harness.h"

using namespace kestrel::ops;

namespace {

void check_shape(const std::string& shape, std::uint64_t seed) {
  INFO(shape);
  Registry registry = builtin_ops();
  const Op& conv = registry.get("conv2d");
  Params params = parse_params(conv, shape);
  test::WorkloadChecker checker(conv, params);
  CHECK(checker.check(conv.default_config(params, test::native_traits())));
  auto configs = test::random_configs(conv, params, 15, seed);
  CHECK(configs.size() == 15);
  for (const auto& config : configs) CHECK(checker.check(config));
}

KernelSource inject(KernelSource source, const std::string& from, const std::string& to) {
  auto at = source.text.find(from);
  REQUIRE(at != std::string::npos);
  source.text.replace(at, from.size(), to);
  return source;
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

TEST_CASE("conv2d matches the reference: groups (ResNeXt-like, ragged channels per group)", "[conv2d][kernel]") {
  check_shape("C=8,H=9,W=10,K=12,R=3,S=3,pad=1,groups=4", 8);
  check_shape("N=2,C=15,H=11,W=7,K=10,R=3,S=3,stride=2,pad=2,groups=5", 9);
}
TEST_CASE("conv2d matches the reference: groups = C (depthwise in NCHW), dilation 2", "[conv2d][kernel]") {
  check_shape("C=6,H=12,W=13,K=6,R=3,S=3,pad=2,dilation=2,groups=6", 10);
  check_shape("C=4,H=9,W=9,K=8,R=3,S=3,stride=2,groups=4", 11);  // channel multiplier 2
}

TEST_CASE("conv2d: groups divide the channels, the weights and FLOPs shrink with them", "[conv2d]") {
  Registry registry = builtin_ops();
  const Op& conv = registry.get("conv2d");
  Params p = parse_params(conv, "C=256,H=56,W=56,K=256,R=3,S=3,pad=1,groups=32");  // ResNeXt-50 conv2_x
  CHECK(conv.tensors(p)[1].shape == std::vector<std::int64_t>{256, 8, 3, 3});
  CHECK(conv.flops(p) == conv.flops(parse_params(conv, "C=256,H=56,W=56,K=256,R=3,S=3,pad=1")) / 32);
  // groups=1 is the default and stays out of the canonical workload.
  CHECK(format_params(parse_params(conv, "C=8,H=9,W=9,K=8,R=3,S=3,groups=1")).find("groups") == std::string::npos);
  CHECK_THROWS_WITH(parse_params(conv, "C=8,H=9,W=9,K=12,R=3,S=3,groups=3"), Catch::Contains("groups=3 does not divide"));
}

TEST_CASE("conv2d checks catch injected bugs in the grouped kernel", "[conv2d][kernel]") {
  Registry registry = builtin_ops();
  const Op& conv = registry.get("conv2d");
  Params params = parse_params(conv, "C=8,H=9,W=10,K=12,R=3,S=3,pad=1,groups=4");
  test::WorkloadChecker checker(conv, params);
  KernelSource good = conv.source(Backend::cpu, params, parse_config(conv, params, "tk=2,th=2,tw=8,tc=1,unroll=1,vec=4,split=2", test::native_traits()));
  CHECK(checker.matches(good));
  // Every group reads the first group's input channels.
  CHECK_FALSE(checker.matches(inject(good, "(kb / KBG * CG + cb) * XCH", "cb * XCH")));
  // Output channels go to the wrong group.
  CHECK_FALSE(checker.matches(inject(good, "((kb / KBG * KG + kl) * P + p)", "((kl * CONV_GROUPS + kb / KBG) * P + p)")));
  // The last input channel of each group is skipped.
  CHECK_FALSE(checker.matches(inject(good, "int64_t cn = min64(CONV_TC, CG - cb);", "int64_t cn = min64(CONV_TC, CG - 1 - cb);")));
}
