// Search spaces, property-style: index <-> configuration round trips on the real gemm
// and conv2d spaces, digits, uniform rejection sampling on a toy op with a known valid
// subset, neighbours, spaces of 10^10 points and more, and the errors.
#include <catch2/catch.hpp>
#include <chrono>
#include <functional>
#include <map>
#include <set>

#include "support/traits.h"
#include "kestrel/ops/op.h"
#include "tuner/toy_op.h"
#include "kestrel/tuner/space.h"

using namespace kestrel;
using kestrel::test::ToyOp;
using kestrel::tuner::Rng;
using kestrel::tuner::Space;

namespace {


std::vector<ops::Knob> uniform_knobs(int count, int values) {
  std::vector<ops::Knob> out;
  for (int k = 0; k < count; ++k) {
    ops::Knob knob{"k" + std::to_string(k), {}, ""};
    for (int v = 0; v < values; ++v) knob.values.push_back(v * 3 + 1);
    out.push_back(knob);
  }
  return out;
}

bool always(const ops::Config&) { return true; }

std::size_t knobs_differing(const Space& space, std::uint64_t a, std::uint64_t b) {
  auto da = space.digits(a), db = space.digits(b);
  std::size_t out = 0;
  for (std::size_t k = 0; k < da.size(); ++k) out += da[k] != db[k];
  return out;
}

void check_round_trips(const Space& space, int samples, std::uint64_t seed) {
  Rng rng(seed);
  std::uniform_int_distribution<std::uint64_t> pick(0, space.size() - 1);
  for (int i = 0; i < samples; ++i) {
    std::uint64_t index = i == 0 ? 0 : i == 1 ? space.size() - 1 : pick(rng);
    ops::Config config = space.config(index);
    REQUIRE(config.size() == space.knobs().size());
    REQUIRE(space.index(config) == index);
    auto digits = space.digits(index);
    REQUIRE(digits.size() == space.knobs().size());
    for (std::size_t k = 0; k < digits.size(); ++k) {
      const auto& knob = space.knobs()[k];
      REQUIRE(digits[k] < knob.values.size());
      REQUIRE(config.at(knob.name) == knob.values[digits[k]]);
    }
    REQUIRE(space.from_digits(digits) == index);
    REQUIRE(space.valid(index) == space.op().check(space.params(), config, test::fixed_traits()).empty());
  }
}

}  // namespace

TEST_CASE("space: index <-> configuration round trips on gemm and conv2d", "[tuner][space]") {
  ops::Registry registry = ops::builtin_ops();
  const ops::Op& gemm = registry.get("gemm");
  Space gemm_space(gemm, ops::parse_params(gemm, "M=512,N=512,K=512"), test::fixed_traits());
  CHECK(gemm_space.size() > 10'000'000);
  check_round_trips(gemm_space, 5000, 1);
  check_round_trips(Space(gemm, ops::parse_params(gemm, "M=7,N=33,K=1000"), test::fixed_traits()), 2000, 2);

  const ops::Op& conv = registry.get("conv2d");
  Space conv_space(conv, ops::parse_params(conv, "C=64,H=56,W=56,K=64,R=3,S=3,pad=1"), test::fixed_traits());
  CHECK(conv_space.size() > 1000);
  check_round_trips(conv_space, 5000, 3);

  // The default configuration is a valid point of its space.
  auto params = ops::parse_params(gemm, "M=512,N=512,K=512");
  CHECK(gemm_space.valid(gemm_space.index(gemm.default_config(params, test::fixed_traits()))));
}

TEST_CASE("space: mixed radix with the last knob fastest", "[tuner][space]") {
  ToyOp op({{"a", {10, 20}, ""}, {"b", {1, 2, 3}, ""}, {"c", {5, 6, 7, 8}, ""}}, always);
  Space space(op, {}, test::fixed_traits());
  REQUIRE(space.size() == 24);
  CHECK(space.config(0) == ops::Config{{"a", 10}, {"b", 1}, {"c", 5}});
  CHECK(space.config(1) == ops::Config{{"a", 10}, {"b", 1}, {"c", 6}});
  CHECK(space.config(4) == ops::Config{{"a", 10}, {"b", 2}, {"c", 5}});
  CHECK(space.config(12) == ops::Config{{"a", 20}, {"b", 1}, {"c", 5}});
  CHECK(space.config(23) == ops::Config{{"a", 20}, {"b", 3}, {"c", 8}});
  CHECK(space.digits(23) == std::vector<std::uint32_t>{1, 2, 3});
  CHECK(space.from_digits({1, 0, 2}) == 14);
  CHECK(space.index({{"a", 20}, {"b", 1}, {"c", 7}}) == 14);
  CHECK_THROWS_AS(space.config(24), std::out_of_range);
  CHECK_THROWS(space.from_digits({0, 3, 0}));
  CHECK_THROWS(space.from_digits({0, 0}));
}

TEST_CASE("space: index() rejects configurations outside the space", "[tuner][space]") {
  ops::Registry registry = ops::builtin_ops();
  const ops::Op& gemm = registry.get("gemm");
  auto params = ops::parse_params(gemm, "M=512,N=512,K=512");
  Space space(gemm, params, test::fixed_traits());
  ops::Config config = gemm.default_config(params, test::fixed_traits());

  auto missing = config;
  missing.erase("mc");
  CHECK_THROWS_AS(space.index(missing), ops::OpError);
  CHECK_THROWS_WITH(space.index(missing), Catch::Contains("mc"));

  auto outside = config;
  outside["mc"] = 7;
  CHECK_THROWS_AS(space.index(outside), ops::OpError);
  CHECK_THROWS_WITH(space.index(outside), Catch::Contains("mc=7"));

  auto unknown = config;
  unknown["warp"] = 32;
  CHECK_THROWS_AS(space.index(unknown), ops::OpError);
  CHECK_THROWS_WITH(space.index(unknown), Catch::Contains("warp"));
}

TEST_CASE("space: sample_valid returns only valid points, uniformly", "[tuner][space]") {
  // a + b + c <= 4 over {0..3}^3: a known valid subset of 32 of the 64 points.
  ToyOp op({{"a", {0, 1, 2, 3}, ""}, {"b", {0, 1, 2, 3}, ""}, {"c", {0, 1, 2, 3}, ""}},
           [](const ops::Config& c) { return c.at("a") + c.at("b") + c.at("c") <= 4; });
  Space space(op, {}, test::fixed_traits());
  std::set<std::uint64_t> valid;
  for (std::uint64_t i = 0; i < space.size(); ++i) {
    if (space.valid(i)) valid.insert(i);
  }
  REQUIRE(valid.size() == 32);

  Rng rng(42);
  constexpr int kPerPoint = 400;
  std::map<std::uint64_t, int> counts;
  for (std::size_t i = 0; i < valid.size() * kPerPoint; ++i) {
    auto index = space.sample_valid(rng);
    REQUIRE(index);
    REQUIRE(valid.count(*index) == 1);
    ++counts[*index];
  }
  CHECK(counts.size() == valid.size());
  double chi2 = 0;
  for (const auto& [index, count] : counts) chi2 += (count - kPerPoint) * (count - kPerPoint) / double(kPerPoint);
  // 31 degrees of freedom: the 99.9% quantile is 61.1.
  CHECK(chi2 < 61.1);

  // With no valid point, rejection gives up.
  ToyOp none({{"a", {0, 1}, ""}}, [](const ops::Config&) { return false; });
  Space empty(none, {}, test::fixed_traits());
  CHECK_FALSE(empty.sample_valid(rng, 100));
  CHECK_FALSE(empty.random_neighbour(0, rng));

  // And on gemm every sample passes the op's own check.
  ops::Registry registry = ops::builtin_ops();
  const ops::Op& gemm = registry.get("gemm");
  Space gemm_space(gemm, ops::parse_params(gemm, "M=512,N=512,K=512"), test::fixed_traits());
  for (int i = 0; i < 200; ++i) {
    auto index = gemm_space.sample_valid(rng);
    REQUIRE(index);
    REQUIRE(gemm.check(gemm_space.params(), gemm_space.config(*index), test::fixed_traits()).empty());
  }
}

TEST_CASE("space: neighbours differ in exactly one knob", "[tuner][space]") {
  ops::Registry registry = ops::builtin_ops();
  for (auto [name, shape] : {std::pair{"gemm", "M=512,N=512,K=512"},
                             std::pair{"conv2d", "C=64,H=56,W=56,K=64,R=3,S=3,pad=1"}}) {
    const ops::Op& op = registry.get(name);
    Space space(op, ops::parse_params(op, shape), test::fixed_traits());
    std::size_t expected = 0;
    for (const auto& knob : space.knobs()) expected += knob.values.size() - 1;
    Rng rng(7);
    std::uniform_int_distribution<std::uint64_t> pick(0, space.size() - 1);
    for (int i = 0; i < 300; ++i) {
      std::uint64_t index = pick(rng);
      auto near = space.neighbours(index);
      REQUIRE(near.size() == expected);
      REQUIRE(std::set<std::uint64_t>(near.begin(), near.end()).size() == expected);
      for (auto n : near) {
        REQUIRE(n < space.size());
        REQUIRE(knobs_differing(space, index, n) == 1);
      }
      auto start = space.sample_valid(rng);
      REQUIRE(start);
      auto step = space.random_neighbour(*start, rng, 1000);
      REQUIRE(step);
      REQUIRE(space.valid(*step));
      REQUIRE(knobs_differing(space, *start, *step) == 1);
    }
  }
}

TEST_CASE("space: 10^10 points work without materialising", "[tuner][space]") {
  auto begin = std::chrono::steady_clock::now();
  // Valid when the knobs' values sum to an even number: half the space.
  ToyOp op(uniform_knobs(10, 10), [](const ops::Config& c) {
    std::int64_t sum = 0;
    for (const auto& entry : c) sum += entry.second;
    return sum % 2 == 0;
  });
  Space space(op, {}, test::fixed_traits());
  REQUIRE(space.size() == 10'000'000'000ULL);
  check_round_trips(space, 2000, 11);
  Rng rng(5);
  for (int i = 0; i < 1000; ++i) {
    auto index = space.sample_valid(rng);
    REQUIRE(index);
    REQUIRE(space.valid(*index));
    REQUIRE(space.neighbours(*index).size() == 90);
    auto step = space.random_neighbour(*index, rng);
    REQUIRE(step);
    REQUIRE(knobs_differing(space, *index, *step) == 1);
  }
  auto seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
  CHECK(seconds < 2.0);
}

TEST_CASE("space: the size limit is 2^62 points and empty domains are refused", "[tuner][space]") {
  ToyOp at_limit(uniform_knobs(31, 4), always);  // 4^31 = 2^62
  Space space(at_limit, {}, test::fixed_traits());
  CHECK(space.size() == (std::uint64_t{1} << 62));
  check_round_trips(space, 500, 13);

  ToyOp over(uniform_knobs(32, 4), always);  // 2^64: would wrap around
  CHECK_THROWS_AS(Space(over, {}, test::fixed_traits()), ops::OpError);
  CHECK_THROWS_WITH(Space(over, {}, test::fixed_traits()), Catch::Contains("2^62"));
  ToyOp way_over(uniform_knobs(21, 10), always);  // 10^21
  CHECK_THROWS_AS(Space(way_over, {}, test::fixed_traits()), ops::OpError);

  ToyOp empty({{"a", {1, 2}, ""}, {"b", {}, ""}}, always);
  CHECK_THROWS_AS(Space(empty, {}, test::fixed_traits()), ops::OpError);
  CHECK_THROWS_WITH(Space(empty, {}, test::fixed_traits()), Catch::Contains("b"));
}
