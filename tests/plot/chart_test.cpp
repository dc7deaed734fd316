// The chart's value axis (plot/src/chart.cpp): a range chosen from the data, with a
// margin and round 1-2-5 ticks, so that curves far from zero fill the panel.
#include <catch2/catch.hpp>

#include <cmath>

#include "kestrel/plot/chart.h"

using kestrel::plot::Axis;
using kestrel::plot::value_axis;

namespace {

// Ticks from lo to hi at one round step (1, 2 or 5 x 10^k).
void check_ticks(const Axis& axis) {
  REQUIRE(axis.ticks.size() >= 3);
  CHECK(axis.ticks.front() == Approx(axis.lo));
  CHECK(axis.ticks.back() == Approx(axis.hi));
  const double step = axis.ticks[1] - axis.ticks[0];
  for (std::size_t i = 1; i < axis.ticks.size(); ++i) CHECK(axis.ticks[i] - axis.ticks[i - 1] == Approx(step));
  const double mantissa = step / std::pow(10.0, std::floor(std::log10(step) + 1e-9));
  CHECK((mantissa == Approx(1) || mantissa == Approx(2) || mantissa == Approx(5)));
}

}  // namespace

TEST_CASE("value_axis fits curves far from zero, with a margin and 1-2-5 ticks", "[plot][axis]") {
  const Axis axis = value_axis(80, 95);
  check_ticks(axis);
  CHECK(axis.lo == Approx(75));
  CHECK(axis.hi == Approx(100));
  // The data fill most of the axis, with room above and below.
  CHECK(axis.lo < 80);
  CHECK(axis.hi > 95);
  CHECK((95 - 80) / (axis.hi - axis.lo) > 0.5);
}

TEST_CASE("value_axis starts at 0 when the data come near it", "[plot][axis]") {
  const Axis low = value_axis(3, 95);
  check_ticks(low);
  CHECK(low.lo == 0);
  CHECK(low.hi >= 95);
  CHECK(low.hi <= 120);
  // Small numbers keep fine steps.
  const Axis small = value_axis(0.12, 0.31);
  check_ticks(small);
  CHECK(small.lo <= 0.12);
  CHECK(small.lo >= 0);
  CHECK(small.hi >= 0.31);
  CHECK(small.hi < 0.4);
}

TEST_CASE("value_axis gives a flat curve and no data an axis of their own", "[plot][axis]") {
  const Axis flat = value_axis(42, 42);
  check_ticks(flat);
  CHECK(flat.lo < 42);
  CHECK(flat.hi > 42);
  CHECK(flat.lo > 30);
  const Axis none = value_axis(std::numeric_limits<double>::infinity(), 0);
  check_ticks(none);
  CHECK(none.lo == 0);
  CHECK(none.hi == 1);
}
