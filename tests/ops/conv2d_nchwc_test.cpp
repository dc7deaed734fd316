// conv2d_nchwc and layout_nchwc kernel correctness: the default and random valid
// configurations per shape against the op's blocked reference (serial and two-threaded),
// groups and the fused epilogue (every activation, bias, residual) included; the whole
// NCHW -> NCHWc -> convolution -> NCHW path against the NCHW conv2d reference (and an RGB
// input read plain, plain_in); and
// injected bugs that the comparison must catch.
#include <catch2/catch.hpp>
#include <cmath>

#include "kernel_harness.h"

using namespace kestrel::ops;

namespace {

void check_shape(const std::string& shape, std::uint64_t seed, int count = 12) {
  INFO(shape);
  Registry registry = builtin_ops();
  const Op& conv = registry.get("conv2d_nchwc");
  Params params = parse_params(conv, shape);
  test::WorkloadChecker checker(conv, params);
  CHECK(checker.check(conv.default_config(params, test::native_traits())));
  auto configs = test::random_configs(conv, params, count, seed);
  CHECK(configs.size() == static_cast<std::size_t>(count));
  for (const auto& config : configs) CHECK(checker.check(config));
}

KernelSource inject(KernelSource source, const std::string& from, const std::string& to) {
  auto at = source.text.find(from);
  REQUIRE(at != std::string::npos);
  source.text.replace(at, from.size(), to);
  return source;
}

// Runs a compiled kernel serially on `args`; requires success.
void run(const test::Kernel& kernel, std::vector<kestrel_arg> args) { REQUIRE(kernel.run(args, 2) == 0); }

}  // namespace

TEST_CASE("conv2d_nchwc matches its reference: 3x3 pad 1, two blocks", "[conv2d_nchwc][kernel]") {
  check_shape("C=32,H=9,W=11,K=32,R=3,S=3,pad=1", 1);
}
TEST_CASE("conv2d_nchwc matches its reference: RGB input, 7x7 stride 2, K not a multiple of the block",
          "[conv2d_nchwc][kernel]") {
  check_shape("C=3,H=15,W=13,K=20,R=7,S=7,stride=2,pad=3", 2);
}
TEST_CASE("conv2d_nchwc matches its reference: 1x1 stride 2 read in place", "[conv2d_nchwc][kernel]") {
  check_shape("C=32,H=12,W=12,K=48,R=1,S=1,stride=2", 3);
}
TEST_CASE("conv2d_nchwc matches its reference: C not a multiple of the block, dilation 2, batch 2",
          "[conv2d_nchwc][kernel]") {
  check_shape("N=2,C=20,H=10,W=9,K=16,R=3,S=3,pad=2,dilation=2", 4);
}
TEST_CASE("conv2d_nchwc matches its reference: blocks of 8 and 4", "[conv2d_nchwc][kernel]") {
  check_shape("C=12,H=8,W=8,K=24,R=3,S=3,pad=1,block=8", 5, 8);
  check_shape("C=6,H=7,W=10,K=10,R=3,S=2,stride=2,pad=1,block=4", 6, 8);
}
TEST_CASE("conv2d_nchwc matches its reference: 7x7 outputs of a deep layer", "[conv2d_nchwc][kernel]") {
  check_shape("C=64,H=7,W=7,K=64,R=3,S=3,pad=1", 7, 6);
}

TEST_CASE("layout_nchwc matches its reference", "[layout_nchwc][kernel]") {
  Registry registry = builtin_ops();
  const Op& layout = registry.get("layout_nchwc");
  for (const char* shape : {"C=35,H=5,W=19", "N=2,C=16,H=3,W=16", "C=3,H=4,W=1", "C=10,H=3,W=7,block=4"}) {
    Params params = parse_params(layout, shape);
    test::WorkloadChecker checker(layout, params);
    CHECK(checker.check(layout.default_config(params, test::native_traits())));
    const auto knobs = layout.knobs(params);
    REQUIRE(knobs[0].name == "tw");
    for (auto tw : knobs[0].values) {
      for (std::int64_t split : {0, 1}) CHECK(checker.check({{"tw", tw}, {"split", split}}));
    }
  }
}

TEST_CASE("NCHW input through layout_nchwc and conv2d_nchwc matches the NCHW conv2d reference",
          "[conv2d_nchwc][kernel]") {
  // The blocked path end to end: the input transformed by layout_nchwc's kernel, the
  // weights blocked here, the convolution by conv2d_nchwc's kernels, the output unblocked
  // here and compared with conv2d's NCHW reference kernel.
  Registry registry = builtin_ops();
  const Op& conv = registry.get("conv2d");
  const Op& blocked = registry.get("conv2d_nchwc");
  const Op& layout = registry.get("layout_nchwc");
  // The 1x1 layer reads its input in place with a partial last block (24 = 16 + 8 channels,
  // as EfficientNet's): only the lanes that hold channels may be read.
  for (const char* shape : {"C=19,H=10,W=12,K=21,R=3,S=3,stride=1,pad=1", "C=3,H=13,W=13,K=16,R=5,S=5,stride=2,pad=2",
                            "C=24,H=14,W=14,K=40,R=1,S=1,stride=1,pad=0"}) {
    INFO(shape);
    Params p = parse_params(conv, shape);
    const std::int64_t c = p["C"], h = p["H"], w = p["W"], k = p["K"], r = p["R"], s = p["S"], b = 16;
    const std::int64_t cb = (c + b - 1) / b, kb = (k + b - 1) / b;
    Params bp = p;
    bp["block"] = b;
    Params lp{{"N", 1}, {"C", c}, {"H", h}, {"W", w}, {"block", b}};
    const std::int64_t out_p = conv.tensors(p)[2].shape[2], out_q = conv.tensors(p)[2].shape[3];
    test::TempDir dir;
    test::Buffer input(c * h * w), weight(k * c * r * s), expected(k * out_p * out_q);
    input.fill_random(1);
    weight.fill_random(2);
    auto reference = test::Kernel::build(conv.reference(p), dir.path(), "ref");
    run(reference, {{input.data(), input.elements(), 0}, {weight.data(), weight.elements(), 0},
                    {expected.data(), expected.elements(), 0}});

    test::Buffer input_b(cb * h * w * b), weight_b(kb * cb * r * s * b * b), output_b(kb * out_p * out_q * b);
    input_b.fill_nan();
    auto transform = test::Kernel::build(layout.source(Backend::cpu, lp, layout.default_config(lp, test::native_traits())), dir.path(), "lay");
    run(transform, {{input.data(), input.elements(), 0}, {input_b.data(), input_b.elements(), 0}});
    if (c > b && c % b != 0) {
      // Lanes past C of the last block hold NaN: a kernel that reads one gives NaN.
      for (std::int64_t i = 0; i < h * w; ++i) {
        for (std::int64_t l = c % b; l < b; ++l) input_b.data()[((cb - 1) * h * w + i) * b + l] = NAN;
      }
    }
    weight_b.fill_random(3);  // lanes past C and K hold junk the kernel must ignore
    for (std::int64_t ko = 0; ko < k; ++ko) {
      for (std::int64_t ci = 0; ci < c; ++ci) {
        for (std::int64_t i = 0; i < r * s; ++i) {
          weight_b.data()[(((ko / b * cb + ci / b) * r * s + i) * b + ci % b) * b + ko % b] =
              weight.data()[(ko * c + ci) * r * s + i];
        }
      }
    }
    // Every output lane against the NCHW reference (lanes past K must be 0).
    auto check_output = [&] {
      const double tol = conv.tolerance(p);
      std::int64_t bad = 0;
      for (std::int64_t ko = 0; ko < kb * b; ++ko) {
        for (std::int64_t i = 0; i < out_p * out_q; ++i) {
          const double got = output_b.data()[(ko / b * out_p * out_q + i) * b + ko % b];
          const double want = ko < k ? expected.data()[ko * out_p * out_q + i] : 0.0;
          if (!(std::fabs(got - want) <= tol * (1 + std::fabs(want)))) ++bad;
        }
      }
      CHECK(bad == 0);
      CHECK(output_b.guard_intact());
    };
    std::vector<Config> configs = test::random_configs(blocked, bp, 4, 9);
    configs.push_back(blocked.default_config(bp, test::native_traits()));
    for (const auto& config : configs) {
      INFO(format_config(config));
      output_b.fill_nan();
      auto kernel = test::Kernel::build(blocked.source(Backend::cpu, bp, config), dir.path(),
                                        "conv" + std::to_string(&config - configs.data()));
      run(kernel, {{input_b.data(), input_b.elements(), 0}, {weight_b.data(), weight_b.elements(), 0},
                   {output_b.data(), output_b.elements(), 0}});
      check_output();
    }
    if (c < b) {
      // Fewer channels than a block: the kernel reads the plain input itself (plain_in),
      // with no layout_nchwc before it, and must give the same output.
      Params pp = bp;
      pp["plain_in"] = 1;
      REQUIRE(blocked.tensors(pp)[0].shape == std::vector<std::int64_t>{1, c, h, w});
      std::vector<Config> plain_configs = test::random_configs(blocked, pp, 4, 10);
      plain_configs.push_back(blocked.default_config(pp, test::native_traits()));
      for (const auto& config : plain_configs) {
        INFO("plain_in=1 " + format_config(config));
        output_b.fill_nan();
        auto kernel = test::Kernel::build(blocked.source(Backend::cpu, pp, config), dir.path(),
                                          "plain" + std::to_string(&config - plain_configs.data()));
        run(kernel, {{input.data(), input.elements(), 0}, {weight_b.data(), weight_b.elements(), 0},
                     {output_b.data(), output_b.elements(), 0}});
        check_output();
      }
      // Its reference agrees too, and a plain input with as many channels as a block is refused.
      check_shape("C=3,H=15,W=13,K=20,R=7,S=7,stride=2,pad=3,plain_in=1", 11, 4);
      CHECK_THROWS_WITH(blocked.validate(parse_params(blocked, "C=16,H=8,W=8,K=16,R=3,S=3,pad=1,plain_in=1")),
                        Catch::Contains("plain_in=1 needs C < block"));
    }
  }
}

TEST_CASE("conv2d_nchwc and layout_nchwc checks catch injected bugs", "[conv2d_nchwc][kernel]") {
  Registry registry = builtin_ops();
  const Op& conv = registry.get("conv2d_nchwc");
  Params params = parse_params(conv, "C=40,H=9,W=10,K=20,R=3,S=3,pad=1");  // partial C and K blocks
  test::WorkloadChecker checker(conv, params);
  Config config = parse_config(conv, params, "ow=4,ok=1,oh=2,tc=1,unroll=4,split=2", test::native_traits());
  KernelSource good = conv.source(Backend::cpu, params, config);
  CHECK(checker.matches(good));
  // Output lanes past K keep products of unused weights.
  CHECK_FALSE(checker.matches(inject(good, "keep[l] = l < CONV_K % B ? -1 : 0;", "keep[l] = -1;")));
  // The last lane of every input-channel block is skipped.
  CHECK_FALSE(checker.matches(inject(good, "for (int l = 0; l < (lanes); ++l)", "for (int l = 0; l + 1 < (lanes); ++l)")));
  // Later input-channel passes overwrite instead of accumulating.
  CHECK_FALSE(checker.matches(inject(good, "int accumulate = cb0 > 0;", "int accumulate = 0;")));
  // A 1x1 convolution reads its input in place (the checker's inputs hold junk in the
  // lanes past C): the last block's lanes past C are read.
  Params in_place = parse_params(conv, "C=40,H=9,W=10,K=20,R=1,S=1");
  test::WorkloadChecker in_place_checker(conv, in_place);
  KernelSource good_1x1 = conv.source(Backend::cpu, in_place, parse_config(conv, in_place, "ow=2,ok=1,oh=2,tc=1,unroll=4,split=2",
                                                                                test::native_traits()));
  CHECK(in_place_checker.matches(good_1x1));
  CHECK_FALSE(in_place_checker.matches(inject(good_1x1, "TAPS(LAST_LANES)", "TAPS(LANES)")));
  // The last, partial column tile is not stored.
  CHECK_FALSE(checker.matches(inject(good, "if (q0 + q < Q) {", "if (q0 + CONV_OW <= Q) {")));

  const Op& layout = registry.get("layout_nchwc");
  Params lp = parse_params(layout, "C=20,H=3,W=9");
  test::WorkloadChecker layout_checker(layout, lp);
  KernelSource transform = layout.source(Backend::cpu, lp, parse_config(layout, lp, "tw=4,split=1", test::native_traits()));
  CHECK(layout_checker.matches(transform));
  // Lanes past C copy whatever follows the last channel.
  CHECK_FALSE(layout_checker.matches(
      inject(transform, "l < lanes ? src[l * LAYOUT_H * LAYOUT_W + x0] : 0.0f", "src[(l % lanes) * LAYOUT_H * LAYOUT_W + x0]")));
  // The transposed tiles swap two columns.
  CHECK_FALSE(layout_checker.matches(inject(transform, "dst[(x0 + x) * B + l] = tile[x][l];",
                                            "dst[(x0 + x) * B + l] = tile[LAYOUT_TW - 1 - x][l];")));
}

TEST_CASE("conv2d_nchwc matches its reference: groups (ResNeXt-like), stride 2", "[conv2d_nchwc][kernel]") {
  check_shape("C=32,H=9,W=11,K=48,R=3,S=3,pad=1,groups=2,block=8", 11, 8);
  check_shape("N=2,C=32,H=10,W=9,K=32,R=3,S=3,stride=2,pad=1,groups=4,block=8", 12, 8);
  check_shape("C=16,H=7,W=7,K=32,R=1,S=1,groups=4,block=4", 13, 6);
}

TEST_CASE("conv2d_nchwc matches its reference: every activation with and without bias and residual",
          "[conv2d_nchwc][kernel]") {
  // K not a multiple of the block (junk lanes of bias and residual must not leak) and two
  // input-channel blocks (the epilogue belongs to the last pass only).
  Registry registry = builtin_ops();
  const Op& conv = registry.get("conv2d_nchwc");
  std::uint64_t seed = 30;
  for (int act = 0; act <= 9; ++act) {
    for (int bias = 0; bias <= 1; ++bias) {
      for (int residual = 0; residual <= 1; ++residual) {
        const std::string shape = "C=12,H=7,W=9,K=11,R=3,S=3,pad=" + std::to_string((act + residual) % 3) +
                                  ",block=8,bias=" + std::to_string(bias) + ",residual=" + std::to_string(residual) +
                                  ",act=" + std::to_string(act);
        INFO(shape);
        Params params = parse_params(conv, shape);
        CHECK(conv.tensors(params).size() == static_cast<std::size_t>(3 + bias + residual));
        test::WorkloadChecker checker(conv, params);
        CHECK(checker.check(parse_config(conv, params, "tc=1", test::native_traits())));  // one pass per input-channel block
        for (const auto& config : test::random_configs(conv, params, 2, seed++)) CHECK(checker.check(config));
      }
    }
  }
}

TEST_CASE("conv2d_nchwc: groups must split the channels into whole blocks", "[conv2d_nchwc]") {
  Registry registry = builtin_ops();
  const Op& conv = registry.get("conv2d_nchwc");
  Params p = parse_params(conv, "C=256,H=56,W=56,K=256,R=3,S=3,pad=1,groups=32,block=8");  // ResNeXt-50 conv2_x
  CHECK(conv.tensors(p)[1].shape == std::vector<std::int64_t>{32, 1, 3, 3, 8, 8});
  CHECK(conv.flops(p) == 2.0 * 256 * 56 * 56 * 8 * 9);
  // ok divides a group's output blocks; tc counts a group's input blocks.
  for (const auto& knob : conv.knobs(p)) {
    if (knob.name == "ok") CHECK(knob.values == std::vector<std::int64_t>{1});
  }
  CHECK_THROWS_WITH(parse_params(conv, "C=256,H=56,W=56,K=256,R=3,S=3,pad=1,groups=32"),
                    Catch::Contains("multiples of block=16"));
  CHECK_THROWS_WITH(parse_params(conv, "C=24,H=5,W=5,K=16,R=3,S=3,groups=2,block=8"),
                    Catch::Contains("C/groups=12"));
  Params with_bias = parse_params(conv, "C=16,H=5,W=5,K=20,R=3,S=3,block=8,bias=1,residual=1,act=3");
  auto tensors = conv.tensors(with_bias);
  REQUIRE(tensors.size() == 5);
  CHECK(tensors[2].shape == std::vector<std::int64_t>{24});
  CHECK(tensors[3].shape == tensors[4].shape);
}

TEST_CASE("conv2d_nchwc checks catch injected bugs in groups and the epilogue", "[conv2d_nchwc][kernel]") {
  Registry registry = builtin_ops();
  const Op& conv = registry.get("conv2d_nchwc");
  Params grouped = parse_params(conv, "C=32,H=6,W=7,K=16,R=3,S=3,pad=1,groups=2,block=8");
  test::WorkloadChecker group_checker(conv, grouped);
  KernelSource g = conv.source(Backend::cpu, grouped, parse_config(conv, grouped, "ow=4,ok=1,oh=2,tc=1,unroll=2,split=2", test::native_traits()));
  CHECK(group_checker.matches(g));
  // Every group reads the first group's input blocks.
  CHECK_FALSE(group_checker.matches(inject(g, "(group * CBG + cb0) * XCB", "(group * 0 + cb0) * XCB")));

  Params fused = parse_params(conv, "C=20,H=6,W=7,K=11,R=3,S=3,pad=1,block=8,bias=1,residual=1,act=2");
  test::WorkloadChecker checker(conv, fused);
  KernelSource good = conv.source(Backend::cpu, fused, parse_config(conv, fused, "ow=4,ok=1,oh=2,tc=1,unroll=2,split=2", test::native_traits()));
  CHECK(checker.matches(good));
  // The epilogue runs after every input-channel pass instead of the last one.
  CHECK_FALSE(checker.matches(inject(good, "int last = cb0 + cn >= CBG;", "int last = 1;")));
  // Bias, residual or activation left out.
  CHECK_FALSE(checker.matches(inject(good, "v += bias;", "")));
  CHECK_FALSE(checker.matches(inject(good, "v += res;", "")));
  CHECK_FALSE(checker.matches(inject(good, "v = kestrel_activate(v, CONV_ACT);", "")));
  // Lanes past K keep the epilogue's result of junk bias and residual lanes.
  CHECK_FALSE(checker.matches(inject(good, "v = (vf)((vi)v & keep);", "")));
}
