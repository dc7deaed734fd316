// Statistics of repeated timings: medians, spreads and the paired ratio interval.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>

#include "kestrel/base/stats.h"

using namespace kestrel;

TEST_CASE("stats: median, quantile and spread", "[stats]") {
  CHECK(stats::median({3, 1, 2}) == 2);
  CHECK(stats::median({4, 1, 2, 3}) == 2.5);
  CHECK(std::isinf(stats::median({})));
  CHECK(stats::quantile({1, 2, 3, 4, 5}, 0.25) == 2);
  CHECK(stats::spread({1}) == 0);
  CHECK(stats::spread({1, 1, 1, 1}) == 0);
  CHECK(stats::spread({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}) == Approx((10.0 - 2.0) / 6.0));
}

TEST_CASE("stats: Student's t critical values", "[stats]") {
  CHECK(stats::t_critical_95(1) == Approx(12.706));
  CHECK(stats::t_critical_95(4) == Approx(2.776));
  CHECK(stats::t_critical_95(30) == Approx(2.042));
  CHECK(stats::t_critical_95(1000) == Approx(1.96).margin(0.01));
  CHECK(std::isinf(stats::t_critical_95(0)));
}

TEST_CASE("stats: the ratio interval of paired passes", "[stats]") {
  SECTION("identical ratios: a point") {
    auto r = stats::ratio_interval({2, 4, 6}, {1, 2, 3});
    CHECK(r.n == 3);
    CHECK(r.estimate == Approx(2));
    CHECK(r.low == Approx(2));
    CHECK(r.high == Approx(2));
    CHECK(r.above_one());
    CHECK_FALSE(r.below_one());
    CHECK(r.relative_half_width() == Approx(0).margin(1e-12));
  }
  SECTION("a drift that hits both kernels of a pass cancels") {
    // The machine slows down 3x over the passes; the ratio stays 1.25.
    std::vector<double> a, b;
    for (double load : {1.0, 1.5, 2.0, 3.0}) {
      a.push_back(1.25 * load);
      b.push_back(load);
    }
    auto r = stats::ratio_interval(a, b);
    CHECK(r.estimate == Approx(1.25));
    CHECK(r.above_one());
  }
  SECTION("known values: log ratios 0.1, -0.1, 0.2, 0") {
    std::vector<double> a, b;
    for (double x : {0.1, -0.1, 0.2, 0.0}) {
      a.push_back(std::exp(x));
      b.push_back(1);
    }
    auto r = stats::ratio_interval(a, b);
    const double mean = 0.05, sd = std::sqrt((0.0025 + 0.0225 + 0.0225 + 0.0025) / 3);
    const double half = 3.182 * sd / 2;
    CHECK(r.estimate == Approx(std::exp(mean)));
    CHECK(r.low == Approx(std::exp(mean - half)));
    CHECK(r.high == Approx(std::exp(mean + half)));
    CHECK_FALSE(r.above_one());  // straddles 1: not faster with confidence
    CHECK_FALSE(r.below_one());
  }
  SECTION("one pair or none: no interval") {
    auto one = stats::ratio_interval({2}, {1});
    CHECK(one.estimate == Approx(2));
    CHECK_FALSE(one.above_one());
    CHECK(std::isinf(one.relative_half_width()));
    auto none = stats::ratio_interval({}, {});
    CHECK(none.n == 0);
    CHECK_FALSE(none.above_one());
  }
  SECTION("failed passes (infinite or zero) are skipped") {
    auto r = stats::ratio_interval({2, INFINITY, 2, 0}, {1, 1, 1, 1});
    CHECK(r.n == 2);
  }
  SECTION("coverage: about 95% of intervals from noisy samples contain the true ratio") {
    std::mt19937 rng(5);
    std::lognormal_distribution<double> noise(0, 0.1);
    int covered = 0;
    const int trials = 2000;
    for (int t = 0; t < trials; ++t) {
      std::vector<double> a, b;
      for (int i = 0; i < 6; ++i) {
        a.push_back(1.1 * noise(rng));
        b.push_back(noise(rng));
      }
      auto r = stats::ratio_interval(a, b);
      covered += r.low <= 1.1 && 1.1 <= r.high ? 1 : 0;
    }
    CHECK(covered > trials * 0.92);
    CHECK(covered < trials * 0.98);
  }
}

TEST_CASE("stats: summarize gives min, median, mean, sample deviation and spread in one pass", "[stats]") {
  const stats::Summary none = stats::summarize({});
  CHECK(none.n == 0);
  CHECK(none.median == 0);
  const stats::Summary one = stats::summarize({3.0});
  CHECK(one.n == 1);
  CHECK(one.min == 3.0);
  CHECK(one.median == 3.0);
  CHECK(one.stddev == 0);
  const stats::Summary s = stats::summarize({4.0, 1.0, 3.0, 2.0});
  CHECK(s.n == 4);
  CHECK(s.min == 1.0);
  CHECK(s.median == Approx(2.5));
  CHECK(s.mean == Approx(2.5));
  CHECK(s.stddev == Approx(std::sqrt(5.0 / 3.0)));
  CHECK(s.median == stats::median({4.0, 1.0, 3.0, 2.0}));
  CHECK(s.spread == Approx(stats::spread({4.0, 1.0, 3.0, 2.0})));
}
