// The built-in registry, workload and configuration parsing, and the constraint checks
// of both ops (property-style over random shapes and configurations).
#include <catch2/catch.hpp>
#include <cctype>
#include <cmath>
#include <fstream>
#include <random>
#include <sstream>

#include "kestrel/ops/op.h"

using namespace kestrel::ops;

namespace {

// Constraints and defaults are checked for one fixed register file (AVX2: 16 x 8 floats),
// whatever the machine running the tests.
const TargetTraits kAvx2 = TargetTraits::of(Isa::avx2);
const TargetTraits kAvx512 = TargetTraits::of(Isa::avx512);

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string define(const KernelSource& source, const std::string& name) {
  for (const auto& d : source.defines) {
    if (d.name == name) return d.value;
  }
  return "<missing>";
}

}  // namespace

TEST_CASE("builtin registry holds gemm, batch_matmul, the convolutions, layout_nchwc and the glue ops", "[ops]") {
  Registry registry = builtin_ops();
  REQUIRE(registry.all().size() == 11);
  CHECK(registry.find("batch_matmul") != nullptr);
  CHECK(registry.find("gemm") != nullptr);
  CHECK(registry.find("conv2d") != nullptr);
  CHECK(registry.find("conv2d_nchwc") != nullptr);
  CHECK(registry.find("conv2d_winograd") != nullptr);
  CHECK(registry.find("depthwise_conv2d") != nullptr);
  CHECK(registry.find("layout_nchwc") != nullptr);
  for (const char* glue : {"pool2d", "softmax", "layernorm", "elementwise"}) CHECK(registry.find(glue) != nullptr);
  CHECK(registry.find("attention") == nullptr);
  CHECK_THROWS_WITH(registry.get("attention"), Catch::Contains("gemm, conv2d"));
  for (const Op* op : registry.all()) {
    CHECK(!op->description().empty());
    CHECK(op->backends() == std::vector<Backend>{Backend::cpu});
    for (const auto& p : op->params()) {
      INFO(op->name() << " " << p.name << ": " << p.help);
      CHECK(!p.help.empty());
      // The default is ParamSpec::fallback, which `kestrel ops` and Python's ops() show;
      // the help restating it printed it twice.
      CHECK(p.help.find("(default") == std::string::npos);
    }
  }
}

TEST_CASE("gemm workload parsing and validation", "[ops][gemm]") {
  Registry registry = builtin_ops();
  const Op& gemm = registry.get("gemm");
  CHECK(parse_params(gemm, "512x256x128") == Params{{"M", 512}, {"N", 256}, {"K", 128}});
  CHECK(parse_params(gemm, "K=3, M=1,N=2") == Params{{"M", 1}, {"N", 2}, {"K", 3}});
  CHECK_THROWS_WITH(parse_params(gemm, "M=1,N=2"), Catch::Contains("missing parameter K"));
  CHECK_THROWS_WITH(parse_params(gemm, "M=0,N=2,K=3"), Catch::Contains("outside 1..65536"));
  CHECK_THROWS_WITH(parse_params(gemm, "M=70000,N=2,K=3"), Catch::Contains("outside"));
  CHECK_THROWS_WITH(parse_params(gemm, "M=1,N=2,K=3,L=4"), Catch::Contains("unknown parameter 'L'"));
  CHECK_THROWS_WITH(parse_params(gemm, "1x2x3x4"), Catch::Contains("at most 3"));
  CHECK_THROWS_WITH(parse_params(gemm, "M=a,N=2,K=3"), Catch::Contains("not an integer"));
  CHECK_THROWS_WITH(gemm.validate({{"M", 1}, {"N", 1}}), Catch::Contains("missing parameter K"));
  CHECK_THROWS_AS(parse_params(gemm, "65536x65536x1"), OpError);  // 2^32-element C

  Params p = parse_params(gemm, "100x70x33");
  CHECK(gemm.flops(p) == 2.0 * 100 * 70 * 33);
  auto t = gemm.tensors(p);
  REQUIRE(t.size() == 3);
  CHECK((t[0].name == "A" && t[0].shape == std::vector<std::int64_t>{100, 33} && t[0].role == Role::input));
  CHECK((t[1].name == "B" && t[1].shape == std::vector<std::int64_t>{33, 70} && t[1].role == Role::input));
  CHECK((t[2].name == "C" && t[2].shape == std::vector<std::int64_t>{100, 70} && t[2].role == Role::output));
  CHECK(gemm.tolerance(parse_params(gemm, "8x8x4096")) > gemm.tolerance(p));
}

TEST_CASE("conv2d workload parsing and validation", "[ops][conv2d]") {
  Registry registry = builtin_ops();
  const Op& conv = registry.get("conv2d");
  Params p = parse_params(conv, "C=3,H=8,W=9,K=4,R=3,S=3");
  CHECK(p == Params{{"N", 1}, {"C", 3}, {"H", 8}, {"W", 9}, {"K", 4}, {"R", 3}, {"S", 3},
                    {"stride", 1}, {"pad", 0}, {"dilation", 1}});
  auto t = conv.tensors(p);
  REQUIRE(t.size() == 3);
  CHECK(t[0].shape == std::vector<std::int64_t>{1, 3, 8, 9});
  CHECK(t[1].shape == std::vector<std::int64_t>{4, 3, 3, 3});
  CHECK(t[2].shape == std::vector<std::int64_t>{1, 4, 6, 7});
  CHECK(conv.flops(p) == 2.0 * 1 * 4 * 6 * 7 * 3 * 3 * 3);

  // Positional form in the order of params(): N, C, H, W, K, R, S, stride, pad, dilation.
  Params q = parse_params(conv, "2x64x56x56x128x3x3x2x1");
  CHECK(conv.tensors(q)[2].shape == std::vector<std::int64_t>{2, 128, 28, 28});
  Params d = parse_params(conv, "C=1,H=10,W=10,K=1,R=3,S=3,dilation=2,pad=2");
  CHECK(conv.tensors(d)[2].shape == std::vector<std::int64_t>{1, 1, 10, 10});

  CHECK_THROWS_WITH(parse_params(conv, "C=1,H=2,W=2,K=1,R=3,S=3"), Catch::Contains("empty output"));
  CHECK_THROWS_WITH(parse_params(conv, "C=1,H=5,W=5,K=1,R=3,S=3,dilation=3"), Catch::Contains("empty output"));
  CHECK_NOTHROW(parse_params(conv, "C=1,H=2,W=2,K=1,R=3,S=3,pad=1"));
  CHECK_THROWS_WITH(parse_params(conv, "C=1,H=8,W=8,R=3,S=3"), Catch::Contains("missing parameter K"));
  CHECK_THROWS_WITH(parse_params(conv, "C=1,H=8,W=8,K=1,R=3,S=3,stride=0"), Catch::Contains("outside 1..64"));
  CHECK_THROWS_WITH(parse_params(conv, "C=1,H=8,W=8,K=1,R=3,S=3,pad=-1"), Catch::Contains("outside 0..1024"));
}

TEST_CASE("configuration parsing uses the default and the knob domains", "[ops]") {
  Registry registry = builtin_ops();
  const Op& gemm = registry.get("gemm");
  Params p = parse_params(gemm, "512x512x512");
  Config config = parse_config(gemm, p, "mr=4,nr=32", kAvx2);
  CHECK(config.at("mr") == 4);
  CHECK(config.at("nr") == 32);
  CHECK(config.at("kc") == gemm.default_config(p, kAvx2).at("kc"));
  CHECK_THROWS_WITH(parse_config(gemm, p, "mq=4", kAvx2), Catch::Contains("unknown knob 'mq'"));
  CHECK_THROWS_WITH(parse_config(gemm, p, "vec=3", kAvx2), Catch::Contains("not in its domain"));
  // Tiles far larger than the dimension are outside the domain.
  Params small = parse_params(gemm, "4x4x4");
  CHECK_THROWS_WITH(parse_config(gemm, small, "mc=512", kAvx2), Catch::Contains("not in its domain"));
}

TEST_CASE("parse_pairs reads back what format_params and format_config write", "[ops]") {
  Params p{{"K", 128}, {"M", 512}, {"N", 256}};
  CHECK(parse_pairs(format_params(p)) == p);
  Config c{{"mc", 64}, {"pad", -1}};
  CHECK(parse_pairs(format_config(c)) == c);
  CHECK(parse_pairs("").empty());
  CHECK(parse_pairs(" a = 1 , b=2 ") == Config{{"a", 1}, {"b", 2}});
  CHECK_THROWS_WITH(parse_pairs("a=1,b"), Catch::Contains("malformed item 'b'"));
  CHECK_THROWS_WITH(parse_pairs("a=x"), Catch::Contains("not an integer"));
  CHECK_THROWS_WITH(parse_pairs("a=1,a=2"), Catch::Contains("'a' given twice"));
  CHECK_THROWS_WITH(parse_pairs("=3"), Catch::Contains("empty name"));
  CHECK_THROWS_AS(parse_pairs("a=1,,b=2"), OpError);
}

TEST_CASE("constraint checks give reasons", "[ops]") {
  Registry registry = builtin_ops();
  const Op& gemm = registry.get("gemm");
  Params p = parse_params(gemm, "512x512x512");
  Config good = gemm.default_config(p, kAvx2);
  REQUIRE(gemm.check(p, good, kAvx2).empty());
  auto with = [&](Config c, const std::string& k, std::int64_t v) {
    c[k] = v;
    return c;
  };
  CHECK_THAT(gemm.check(p, with(with(good, "nr", 8), "vec", 16), kAvx2), Catch::Contains("not a multiple of vec"));
  CHECK_THAT(gemm.check(p, with(with(with(with(good, "mr", 16), "mc", 24), "nr", 16), "vec", 16), kAvx512),
             Catch::Contains("mc=24 is not a multiple of mr=16"));
  CHECK_THAT(gemm.check(p, with(with(good, "nr", 64), "vec", 1), kAvx2), Catch::Contains("accumulators"));
  CHECK_THAT(gemm.check(p, with(good, "order", 7), kAvx2), Catch::Contains("not in its domain"));
  Config missing = good;
  missing.erase("kc");
  CHECK_THAT(gemm.check(p, missing, kAvx2), Catch::Contains("knob kc is missing"));
  CHECK_THAT(gemm.check(p, with(good, "bogus", 1), kAvx2), Catch::Contains("unknown knob 'bogus'"));
  CHECK_THROWS_AS(gemm.source(Backend::cpu, p, with(good, "vec", 3)), OpError);
  CHECK_THROWS_WITH(gemm.source(Backend::cuda, p, good), Catch::Contains("no cuda kernel"));

  const Op& conv = registry.get("conv2d");
  Params cp = parse_params(conv, "C=64,H=56,W=56,K=64,R=3,S=3,pad=1");
  Config cgood = conv.default_config(cp, kAvx2);
  REQUIRE(conv.check(cp, cgood, kAvx2).empty());
  CHECK_THAT(conv.check(cp, with(with(cgood, "tw", 14), "vec", 4), kAvx2), Catch::Contains("tw=14 is not a multiple of vec=4"));
  CHECK_THAT(conv.check(cp, with(with(with(cgood, "tw", 32), "vec", 1), "tk", 2), kAvx2), Catch::Contains("accumulators"));
  CHECK_THROWS_WITH(conv.source(Backend::opencl, cp, cgood), Catch::Contains("no opencl kernel"));
}

TEST_CASE("register budgets reject spilling micro-tiles and admit library-class ones", "[ops]") {
  Registry registry = builtin_ops();
  const Op& gemm = registry.get("gemm");
  Params p = parse_params(gemm, "1024x1024x1024");
  auto tile = [&](const std::string& text) { return gemm.check(p, parse_config(gemm, p, text, kAvx512), kAvx512); };
  auto avx2_tile = [&](const std::string& text) { return gemm.check(p, parse_config(gemm, p, text, kAvx2), kAvx2); };
  // AVX2: 16 registers of 8 floats; a 16-float vector takes two.
  CHECK(avx2_tile("mr=6,nr=16,vec=8,mc=48,nc=1024").empty());  // 12 + 2 + 1 = 15
  CHECK_THAT(avx2_tile("mr=7,nr=16,vec=8,mc=56,nc=1024"), Catch::Contains("needs 17 vector registers on avx2"));
  CHECK_THAT(avx2_tile("mr=6,nr=32,vec=16,mc=48,nc=1024"), Catch::Contains("needs 29 vector registers on avx2"));
  // AVX-512: accumulators + one row of B + one broadcast <= 32 vector registers.
  CHECK(tile("mr=6,nr=64,vec=16,mc=96,nc=1024").empty());    // 24 + 4 + 1 = 29
  CHECK(tile("mr=14,nr=32,vec=16,mc=112,nc=1024").empty());  // 28 + 2 + 1 = 31
  CHECK(tile("mr=4,nr=96,vec=16,mc=96,nc=960").empty());     // 24 + 6 + 1 = 31
  CHECK(tile("mr=8,nr=48,vec=16,mc=96,nc=960").empty());     // 24 + 3 + 1 = 28
  CHECK_THAT(tile("mr=7,nr=64,vec=16,mc=56,nc=1024"), Catch::Contains("needs 33 vector registers"));
  CHECK_THAT(tile("mr=16,nr=32,vec=16,mc=96,nc=1024"), Catch::Contains("needs 35 vector registers"));
  CHECK_THAT(tile("mr=5,nr=96,vec=16,mc=40,nc=960"), Catch::Contains("accumulators"));
  {
    Config c = gemm.default_config(p, kAvx2);
    c.erase("pack_a");
    CHECK_THAT(gemm.check(p, c, kAvx2), Catch::Contains("knob pack_a is missing"));
  }
  CHECK_THAT(tile("split=3,order=1"), Catch::Contains("needs order=0"));
  CHECK(tile("split=3,order=0").empty());
  // Defaults: column blocks that two threads share out evenly, A in place, B packed
  // unless M is skinny.
  CHECK(gemm.default_config(p, kAvx2).at("split") == 1);
  CHECK(gemm.default_config(p, kAvx2).at("nc") == 512);
  CHECK(gemm.default_config(p, kAvx2).at("pack_b") == 1);
  Params skinny = parse_params(gemm, "16x4096x4096");
  CHECK(gemm.default_config(skinny, kAvx2).at("nc") == 2048);
  CHECK(gemm.default_config(skinny, kAvx2).at("pack_b") == 0);
  CHECK(gemm.default_config(parse_params(gemm, "64x3136x576"), kAvx2).at("nc") == 768);  // 4+ blocks, even halves

  const Op& conv = registry.get("conv2d_nchwc");
  Params cp = parse_params(conv, "C=64,H=56,W=56,K=128,R=3,S=3,pad=1");
  auto ctile = [&](const std::string& text) { return conv.check(cp, parse_config(conv, cp, text, kAvx512), kAvx512); };
  // 16-float blocks on AVX2 take two registers each: (6 + 1) * 2 + 1 = 15.
  CHECK(conv.check(cp, parse_config(conv, cp, "ow=6,ok=1", kAvx2), kAvx2).empty());
  CHECK_THAT(conv.check(cp, parse_config(conv, cp, "ow=14,ok=2", kAvx2), kAvx2), Catch::Contains("61 vector registers on avx2"));
  CHECK(ctile("ow=14,ok=2").empty());  // 28 + 2 + 1 = 31
  CHECK(ctile("ow=28,ok=1").empty());  // 28 + 1 + 1 = 30
  CHECK_THAT(ctile("ow=7,ok=4"), Catch::Contains("33 vector registers"));
  CHECK_THAT(ctile("ow=16,ok=2"), Catch::Contains("35 vector registers"));
  // ok must divide K/block: 128/16 = 8 blocks.
  CHECK_THROWS_WITH(parse_config(conv, cp, "ok=3", kAvx2), Catch::Contains("not in its domain"));
  Params odd = parse_params(conv, "C=3,H=9,W=9,K=48,R=3,S=3");  // 3 blocks
  CHECK(conv.knobs(odd)[1].values == std::vector<std::int64_t>{1, 3});
  CHECK_THROWS_WITH(conv.source(Backend::cuda, cp, conv.default_config(cp, kAvx2)), Catch::Contains("no cuda kernel"));
  CHECK_THROWS_WITH(parse_params(conv, "C=3,H=9,W=9,K=8,R=3,S=3,block=5"), Catch::Contains("not 4, 8 or 16"));
  CHECK_THROWS_WITH(parse_params(conv, "C=3,H=2,W=2,K=8,R=3,S=3"), Catch::Contains("empty output"));
  CHECK(conv.tensors(parse_params(conv, "C=20,H=9,W=8,K=40,R=3,S=3,stride=2,pad=1"))[2].shape ==
        std::vector<std::int64_t>{1, 3, 5, 4, 16});

  const Op& layout = registry.get("layout_nchwc");
  Params lp = parse_params(layout, "C=35,H=5,W=19,block=8");
  CHECK(layout.tensors(lp)[1].shape == std::vector<std::int64_t>{1, 5, 5, 19, 8});
  CHECK(layout.flops(lp) == 0);
  CHECK(layout.check(lp, layout.default_config(lp, kAvx2), kAvx2).empty());
  CHECK_THROWS_WITH(parse_params(layout, "C=3,H=9,W=9,block=12"), Catch::Contains("not 4, 8 or 16"));
  CHECK_THROWS_WITH(parse_params(layout, "C=3,H=9,W=9,K=2"), Catch::Contains("unknown parameter"));
}

TEST_CASE("sources embed the kernel files and carry every define", "[ops]") {
  Registry registry = builtin_ops();
  const Op& gemm = registry.get("gemm");
  Params p = parse_params(gemm, "100x70x33");
  KernelSource s = gemm.source(Backend::cpu, p, gemm.default_config(p, kAvx2));
  CHECK(s.backend == Backend::cpu);
  CHECK(s.file_name == "gemm.c");
  CHECK(s.text == read_file(KESTREL_SOURCE_DIR "/ops/gemm/gemm.c"));
  CHECK(define(s, "GEMM_M") == "100");
  CHECK(define(s, "GEMM_K") == "33");
  for (const auto& knob : gemm.knobs(p)) {
    std::string upper;
    for (char ch : knob.name) upper += static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
    CHECK(define(s, "GEMM_" + upper) != "<missing>");
  }
  // The reference is ref_math.h (double exp, erf, tanh for its activations), then gemm_ref.c.
  CHECK(gemm.reference(p).text ==
        read_file(KESTREL_SOURCE_DIR "/ops/glue/ref_math.h") + read_file(KESTREL_SOURCE_DIR "/ops/gemm/gemm_ref.c"));

  const Op& conv = registry.get("conv2d");
  Params cp = parse_params(conv, "C=3,H=8,W=9,K=4,R=3,S=3");
  KernelSource cs = conv.source(Backend::cpu, cp, conv.default_config(cp, kAvx2));
  CHECK(cs.text == read_file(KESTREL_SOURCE_DIR "/ops/conv2d/conv2d.c"));
  CHECK(define(cs, "CONV_DILATION") == "1");
  CHECK(define(cs, "CONV_TK") != "<missing>");
  CHECK(conv.reference(cp).text == read_file(KESTREL_SOURCE_DIR "/ops/conv2d/conv2d_ref.c"));
}

TEST_CASE("random configurations either fail check with a reason or give a source", "[ops]") {
  Registry registry = builtin_ops();
  std::mt19937_64 rng(42);
  auto dim = [&](std::int64_t hi) { return std::uniform_int_distribution<std::int64_t>(1, hi)(rng); };
  int valid = 0, invalid = 0;
  for (int shape = 0; shape < 60; ++shape) {
    Params gp{{"M", dim(shape % 3 == 0 ? 8 : 3000)}, {"N", dim(shape % 4 == 0 ? 8 : 3000)}, {"K", dim(3000)}};
    Params cp{{"N", dim(3)}, {"C", dim(300)}, {"H", dim(60)}, {"W", dim(60)}, {"K", dim(300)}, {"R", dim(5)},
              {"S", dim(5)}, {"stride", dim(3)}, {"pad", dim(3) - 1}, {"dilation", dim(2)}};
    for (auto [op, params] : {std::pair{&registry.get("gemm"), gp}, std::pair{&registry.get("conv2d"), cp}}) {
      try {
        op->validate(params);
      } catch (const OpError&) {
        continue;  // e.g. a conv2d filter larger than the input
      }
      INFO(op->name() << " " << format_params(params));
      Config def = op->default_config(params, kAvx2);
      INFO("default " << format_config(def));
      REQUIRE(op->check(params, def, kAvx2).empty());
      auto knobs = op->knobs(params);
      for (const auto& knob : knobs) REQUIRE(!knob.values.empty());
      for (int i = 0; i < 50; ++i) {
        Config config;
        for (const auto& knob : knobs) {
          config[knob.name] = knob.values[std::uniform_int_distribution<std::size_t>(0, knob.values.size() - 1)(rng)];
        }
        // source() enforces the rules that hold on every target (the widest register file).
        std::string reason = op->check(params, config, kAvx512);
        if (reason.empty()) {
          ++valid;
          KernelSource s = op->source(Backend::cpu, params, config);
          CHECK(s.defines.size() == params.size() + config.size());
        } else {
          ++invalid;
          CHECK_THROWS_AS(op->source(Backend::cpu, params, config), OpError);
        }
      }
    }
  }
  CHECK(valid > 100);
  CHECK(invalid > 100);
}

TEST_CASE("op features: the same names for every workload, finite values", "[ops]") {
  Registry registry = builtin_ops();
  const Op& gemm = registry.get("gemm");
  const Op& conv = registry.get("conv2d");
  std::mt19937_64 rng(7);
  auto random_config = [&](const Op& op, const Params& params) {
    Config config;
    for (const auto& knob : op.knobs(params)) {
      config[knob.name] = knob.values[std::uniform_int_distribution<std::size_t>(0, knob.values.size() - 1)(rng)];
    }
    return config;
  };
  auto names = [](const std::vector<std::pair<std::string, double>>& features) {
    std::vector<std::string> out;
    for (const auto& f : features) out.push_back(f.first);
    return out;
  };
  for (const auto& [op, texts] : std::vector<std::pair<const Op*, std::vector<std::string>>>{
           {&gemm, {"256x256x256", "7x1000x33", "1x1x1", "M=7,N=9,K=5,bias=1,residual=1,act=3"}},
           {&registry.get("batch_matmul"), {"batch=12,M=128,N=128,K=64,trans_b=1", "batch=3,M=7,N=1,K=300,trans_a=1"}},
           {&conv, {"C=64,H=56,W=56,K=64,R=3,S=3,pad=1", "N=2,C=3,H=19,W=300,K=5,R=7,S=1,stride=2,dilation=2",
                    "C=256,H=28,W=28,K=256,R=3,S=3,pad=1,groups=32"}},
           {&registry.get("conv2d_nchwc"), {"C=64,H=56,W=56,K=64,R=3,S=3,pad=1", "C=3,H=224,W=224,K=64,R=7,S=7,stride=2,pad=3",
                                             "N=2,C=5,H=9,W=7,K=3,R=1,S=3,block=4,dilation=2",
                                             "C=32,H=9,W=9,K=32,R=3,S=3,groups=2,block=8,bias=1,residual=1,act=1"}},
           {&registry.get("depthwise_conv2d"), {"C=32,H=112,W=112,pad=1", "N=2,C=13,H=7,W=9,stride=2,block=8,bias=1,act=3",
                                                 "C=5,H=1,W=1,R=1,S=1,block=4"}},
           {&registry.get("layout_nchwc"), {"C=64,H=56,W=56", "N=3,C=5,H=1,W=1,block=4"}}}) {
    std::vector<std::string> expected;
    for (const auto& text : texts) {
      Params params = parse_params(*op, text);
      INFO(op->name() << " " << text);
      for (int i = 0; i < 30; ++i) {
        Config config = i == 0 ? op->default_config(params, kAvx2) : random_config(*op, params);
        auto features = op->features(params, config);
        CHECK(features.size() > params.size() + config.size());
        if (expected.empty()) expected = names(features);
        CHECK(names(features) == expected);
        for (const auto& [name, value] : features) {
          INFO(name);
          CHECK(std::isfinite(value));
          CHECK(value >= 0);
        }
      }
    }
  }
}

TEST_CASE("defaults are derived from the target's registers and fit them", "[ops][traits]") {
  Registry registry = builtin_ops();
  const Op& gemm = registry.get("gemm");
  const Op& nchwc = registry.get("conv2d_nchwc");
  const Op& conv = registry.get("conv2d");
  const Params g = parse_params(gemm, "1024x1024x1024");
  const Params skinny = parse_params(gemm, "M=1,N=1000,K=512");
  const Params c8 = parse_params(nchwc, "C=64,H=56,W=56,K=128,R=3,S=3,pad=1,block=8");
  const Params c16 = parse_params(nchwc, "C=64,H=56,W=56,K=128,R=3,S=3,pad=1,block=16");
  const Params plain = parse_params(conv, "C=64,H=56,W=56,K=128,R=3,S=3,pad=1");
  for (Isa isa : {Isa::scalar, Isa::sse, Isa::avx2, Isa::avx512, Isa::neon, Isa::neon32}) {
    const TargetTraits target = TargetTraits::of(isa);
    INFO(target.to_string());
    for (const auto& [op, params] : std::vector<std::pair<const Op*, Params>>{
             {&gemm, g}, {&gemm, skinny}, {&nchwc, c8}, {&nchwc, c16}, {&conv, plain}}) {
      INFO(op->name() << " " << format_params(params));
      CHECK(op->check(params, op->default_config(params, target), target).empty());
    }
    // gemm: vectors of the register width, a tile using most of the register file.
    const Config d = gemm.default_config(g, target);
    CHECK(d.at("vec") == std::min(target.vector_floats, 16));
    const std::int64_t registers = d.at("mr") * d.at("nr") / d.at("vec") + d.at("nr") / d.at("vec") + 1;
    CHECK(registers <= target.vector_registers);
    CHECK(registers >= std::min(15, target.vector_registers - 1));
  }
  // The shapes the defaults' comments promise.
  auto tile = [&](Isa isa) {
    const Config d = gemm.default_config(g, TargetTraits::of(isa));
    return std::to_string(d.at("mr")) + "x" + std::to_string(d.at("nr")) + "/" + std::to_string(d.at("vec"));
  };
  CHECK(tile(Isa::avx2) == "6x16/8");
  CHECK(tile(Isa::avx512) == "6x32/16");
  CHECK(tile(Isa::neon) == "6x16/4");
  CHECK(tile(Isa::neon32) == "6x8/4");
  const Config n8 = nchwc.default_config(c8, TargetTraits::of(Isa::avx2));
  CHECK(n8.at("ow") * n8.at("ok") >= 8);  // at least half the file as accumulators
  const Config n16 = nchwc.default_config(c16, TargetTraits::of(Isa::avx512));
  CHECK(n16.at("ow") == 14);
  CHECK(n16.at("ok") == 2);
}
