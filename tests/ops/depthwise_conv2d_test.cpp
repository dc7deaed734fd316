// depthwise_conv2d kernel correctness: the default and random valid configurations per
// shape against the op's blocked reference (serial and two-threaded) on ragged shapes
// (channels not a multiple of the block, odd sizes, every stride/padding/dilation the
// layers use), every activation with and without bias and residual; the knob constraints
// and defaults per target; and injected bugs that the comparison must catch.
#include <catch2/catch.hpp>

#include "kernel_harness.h"
#include "kestrel/ops/target_traits.h"

using namespace kestrel::ops;

namespace {

void check_shape(const std::string& shape, std::uint64_t seed, int count = 8) {
  Registry registry = builtin_ops();
  const Op& op = registry.get("depthwise_conv2d");
  Params params = parse_params(op, shape);
  INFO(shape);
  test::WorkloadChecker checker(op, params);
  CHECK(checker.check(op.default_config(params, test::native_traits())));
  auto configs = test::random_configs(op, params, count, seed);
  CHECK(configs.size() == static_cast<std::size_t>(count));
  for (const auto& config : configs) CHECK(checker.check(config));
}

KernelSource inject(KernelSource source, const std::string& from, const std::string& to) {
  auto at = source.text.find(from);
  REQUIRE(at != std::string::npos);
  source.text.replace(at, from.size(), to);
  return source;
}

}  // namespace

TEST_CASE("depthwise_conv2d matches its reference: 3x3 pad 1, channels past the last full block",
          "[depthwise_conv2d][kernel]") {
  check_shape("C=20,H=9,W=11,pad=1", 1);
  check_shape("C=13,H=10,W=7,pad=1,block=8", 2);
}
TEST_CASE("depthwise_conv2d matches its reference: stride 2, pad 0/1/2, odd sizes", "[depthwise_conv2d][kernel]") {
  check_shape("C=13,H=11,W=13,stride=2,pad=1,block=8", 3);
  check_shape("C=9,H=17,W=15,stride=2,pad=2,block=8", 4);
  check_shape("C=24,H=7,W=9,stride=2,block=8", 5);
}
TEST_CASE("depthwise_conv2d matches its reference: pad 0, a 7x7 output", "[depthwise_conv2d][kernel]") {
  check_shape("C=24,H=9,W=9,block=8", 6);
  check_shape("C=40,H=7,W=7,pad=1,block=8", 7);
}
TEST_CASE("depthwise_conv2d matches its reference: 5x3 filter, dilation 2, batch 2, blocks of 4",
          "[depthwise_conv2d][kernel]") {
  check_shape("N=2,C=6,H=12,W=13,R=5,S=3,pad=2,dilation=2,block=4", 8);
  check_shape("C=7,H=5,W=6,R=1,S=1,stride=2,block=4", 9, 4);
}
TEST_CASE("depthwise_conv2d matches its reference: a MobileNetV2 layer at 16 floats per block",
          "[depthwise_conv2d][kernel]") {
  check_shape("C=32,H=14,W=14,pad=1,block=16", 10, 6);
}

TEST_CASE("depthwise_conv2d matches its reference: every activation with and without bias and residual",
          "[depthwise_conv2d][kernel]") {
  Registry registry = builtin_ops();
  const Op& op = registry.get("depthwise_conv2d");
  std::uint64_t seed = 20;
  for (int act = 0; act <= 9; ++act) {
    for (int bias = 0; bias <= 1; ++bias) {
      for (int residual = 0; residual <= 1; ++residual) {
        const std::string shape = "C=11,H=7,W=10,stride=" + std::to_string(1 + (act + bias) % 2) +
                                  ",pad=1,block=8,bias=" + std::to_string(bias) +
                                  ",residual=" + std::to_string(residual) + ",act=" + std::to_string(act);
        INFO(shape);
        Params params = parse_params(op, shape);
        CHECK(op.tensors(params).size() == static_cast<std::size_t>(3 + bias + residual));
        test::WorkloadChecker checker(op, params);
        CHECK(checker.check(op.default_config(params, test::native_traits())));
        for (const auto& config : test::random_configs(op, params, 2, seed++)) CHECK(checker.check(config));
      }
    }
  }
}

TEST_CASE("depthwise_conv2d: tensors, FLOPs, validation", "[depthwise_conv2d]") {
  Registry registry = builtin_ops();
  const Op& op = registry.get("depthwise_conv2d");
  Params p = parse_params(op, "C=20,H=9,W=11,stride=2,pad=1,block=8,bias=1,residual=1,act=2");
  auto tensors = op.tensors(p);
  REQUIRE(tensors.size() == 5);
  CHECK(tensors[0].shape == std::vector<std::int64_t>{1, 3, 9, 11, 8});
  CHECK(tensors[1].shape == std::vector<std::int64_t>{3, 3, 3, 8});
  CHECK(tensors[2].name == "bias");
  CHECK(tensors[2].shape == std::vector<std::int64_t>{24});
  CHECK(tensors[3].name == "residual");
  CHECK(tensors[3].shape == std::vector<std::int64_t>{1, 3, 5, 6, 8});
  CHECK(tensors[4].role == Role::output);
  CHECK(tensors[4].shape == tensors[3].shape);
  CHECK(op.flops(p) == 2.0 * 20 * 5 * 6 * 9);
  // The epilogue's parameters are optional: a plain workload's canonical form leaves them out.
  CHECK(format_params(parse_params(op, "C=8,H=5,W=5")).find("act") == std::string::npos);
  CHECK_THROWS_WITH(parse_params(op, "C=8,H=5,W=5,block=12"), Catch::Contains("not 4, 8 or 16"));
  CHECK_THROWS_WITH(parse_params(op, "C=8,H=5,W=5,act=10"), Catch::Contains("act=10 is outside 0..9"));
  CHECK_THROWS_WITH(parse_params(op, "C=8,H=5,W=5,K=8"), Catch::Contains("unknown parameter"));
  CHECK_THROWS_WITH(parse_params(op, "C=8,H=1,W=5"), Catch::Contains("empty output"));
}

TEST_CASE("depthwise_conv2d: the register budget and the default follow the target", "[depthwise_conv2d]") {
  Registry registry = builtin_ops();
  const Op& op = registry.get("depthwise_conv2d");
  Params p8 = parse_params(op, "C=32,H=112,W=112,pad=1,block=8");
  Config wide = parse_config(op, p8, "ow=8,oh=3,unroll=1,split=2", TargetTraits::of(Isa::avx512));  // 24 + 3 + 1 = 28 vectors
  CHECK(op.check(p8, wide, TargetTraits::of(Isa::avx512)).empty());
  CHECK_THAT(op.check(p8, wide, TargetTraits::of(Isa::avx2)), Catch::Contains("vector registers"));
  // 16-float blocks take two ymm registers per vector on AVX2.
  Params p16 = parse_params(op, "C=32,H=112,W=112,pad=1,block=16");
  Config eight = parse_config(op, p16, "ow=8,oh=1,unroll=1,split=2", TargetTraits::of(Isa::avx512));  // (8 + 1 + 1) x 2 = 20
  CHECK(op.check(p16, eight, TargetTraits::of(Isa::avx512)).empty());
  CHECK_FALSE(op.check(p16, eight, TargetTraits::of(Isa::avx2)).empty());
  // Every ISA's default fits its registers, for every MobileNetV2 depthwise shape.
  for (Isa isa : {Isa::avx512, Isa::avx2, Isa::sse, Isa::neon, Isa::neon32, Isa::scalar}) {
    const TargetTraits traits = TargetTraits::of(isa);
    for (const char* shape : {"C=32,H=112,W=112,pad=1", "C=96,H=112,W=112,stride=2,pad=1", "C=144,H=56,W=56,pad=1",
                              "C=576,H=14,W=14,stride=2,pad=1", "C=960,H=7,W=7,pad=1"}) {
      Params p = parse_params(op, std::string(shape) + ",block=" + std::to_string(std::max(4, traits.vector_floats)));
      INFO(to_string(isa) << " " << shape);
      Config c = op.default_config(p, traits);
      CHECK(op.check(p, c, traits).empty());
    }
  }
  // Widths that waste no column: 7 for 7/14/28 columns, 8 for 56/112 on AVX2.
  const TargetTraits avx2 = TargetTraits::of(Isa::avx2);
  CHECK(op.default_config(parse_params(op, "C=960,H=7,W=7,pad=1,block=8"), avx2).at("ow") == 7);
  CHECK(op.default_config(parse_params(op, "C=192,H=28,W=28,pad=1,block=8"), avx2).at("ow") == 7);
  CHECK(op.default_config(parse_params(op, "C=32,H=112,W=112,pad=1,block=8"), avx2).at("ow") == 8);
  // 16-float blocks take two registers per vector on AVX2: at most 4 columns, 2 tiles for 7.
  CHECK(op.default_config(parse_params(op, "C=960,H=7,W=7,pad=1,block=16"), avx2).at("ow") == 4);
  CHECK(op.default_config(parse_params(op, "C=960,H=7,W=7,pad=1,block=16"), TargetTraits::of(Isa::avx512)).at("ow") == 7);
}

TEST_CASE("depthwise_conv2d checks catch injected bugs", "[depthwise_conv2d][kernel]") {
  Registry registry = builtin_ops();
  const Op& op = registry.get("depthwise_conv2d");
  // Partial last block, borders two columns wide on every side (the right one wider than
  // a tile), ragged row and column tiles, full epilogue.
  Params params = parse_params(op, "C=13,H=9,W=11,pad=2,block=8,bias=1,residual=1,act=1");
  test::WorkloadChecker checker(op, params);
  KernelSource good =
      op.source(Backend::cpu, params, parse_config(op, params, "ow=2,oh=2,unroll=1,split=2", test::native_traits()));
  CHECK(checker.matches(good));
  // Output lanes past C keep what the epilogue made of junk lanes.
  CHECK_FALSE(checker.matches(inject(good, "keep[l] = l < CONV_C % B ? -1 : 0;", "keep[l] = -1;")));
  // The last filter column is skipped.
  CHECK_FALSE(checker.matches(inject(good, "for (int s = 0; s < CONV_S; ++s) {", "for (int s = 0; s + 1 < CONV_S; ++s) {")));
  // The left border columns are not computed.
  CHECK_FALSE(checker.matches(inject(good, "for (; q0 < Q_LO; ++q0)", "for (q0 = Q_LO; q0 < Q_LO; ++q0)")));
  // Only one checked tile on the right, however wide the border.
  CHECK_FALSE(checker.matches(inject(good, "for (; q0 < Q; q0 += OW) tile(", "if (q0 < Q) tile(")));
  // The checked tail tile stores past the row's last column into the next row.
  CHECK_FALSE(checker.matches(inject(good, "if (checked && q0 + q >= Q) break;", "")));
  // An input row shared by two output rows is used for only the first.
  CHECK_FALSE(checker.matches(inject(good, "if (filter_row(i, j) >= 0) acc[j][q] += xv * wj[j];",
                                     "if (filter_row(i, j) >= 0 && j == 0) acc[j][q] += xv * wj[j];")));
  // The bias or the residual is left out, or the activation is not applied.
  CHECK_FALSE(checker.matches(inject(good, "v += bias;", "")));
  CHECK_FALSE(checker.matches(inject(good, "v += res;", "")));
  CHECK_FALSE(checker.matches(inject(good, "v = kestrel_activate(v, CONV_ACT);", "")));
}
