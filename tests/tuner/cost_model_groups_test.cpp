// The cost model's ranking groups and base margin (CostModel::fit with groups and a
// margin): a grouped fit orders the rows within each group, a margin given in training and
// prediction is added to the trees' output (in place of the global bias), and sizes that do not add up are refused.
#include <catch2/catch.hpp>

#include <cmath>
#include <stdexcept>
#include <vector>

#include "kestrel/tuner/cost_model.h"

using namespace kestrel::tuner;

namespace {

// Two groups over one feature x in [0, 20): in the first the cost grows with x, in the
// second it falls with x, and the second's costs are 1000 times larger. A second feature
// says which group a row is in.
struct TwoGroups {
  std::vector<std::vector<float>> rows;
  std::vector<double> costs;
  std::vector<unsigned> groups{20, 20};
  TwoGroups() {
    for (int g = 0; g < 2; ++g) {
      for (int x = 0; x < 20; ++x) {
        rows.push_back({static_cast<float>(x), static_cast<float>(g)});
        costs.push_back(g == 0 ? 1e-3 * (1 + x) : 1.0 * (21 - x));
      }
    }
  }
};

}  // namespace

TEST_CASE("a grouped fit orders the rows within each group", "[tuner][cost_model]") {
  TwoGroups data;
  auto model = make_xgboost_model(3);
  model->fit(data.rows, data.costs, data.groups, {});
  REQUIRE(model->trained());
  auto scores = model->predict(data.rows);
  // Higher score = faster: falling with x in group 0, rising with x in group 1.
  int right0 = 0, right1 = 0;
  for (int x = 0; x + 5 < 20; ++x) {
    right0 += scores[static_cast<std::size_t>(x)] > scores[static_cast<std::size_t>(x + 5)];
    right1 += scores[static_cast<std::size_t>(20 + x)] < scores[static_cast<std::size_t>(20 + x + 5)];
  }
  CHECK(right0 >= 14);
  CHECK(right1 >= 14);
}

TEST_CASE("groups with one outcome each leave the model untrained", "[tuner][cost_model]") {
  auto model = make_xgboost_model(1);
  // Every group has one distinct cost: nothing is comparable within a group.
  model->fit({{1.f}, {2.f}, {3.f}, {4.f}}, {1.0, 1.0, 2.0, 2.0}, {2, 2}, {});
  CHECK_FALSE(model->trained());
}

TEST_CASE("a base margin is added to the model's output", "[tuner][cost_model]") {
  TwoGroups data;
  std::vector<float> margin;
  for (std::size_t i = 0; i < data.rows.size(); ++i) margin.push_back(0.25f * static_cast<float>(i % 7));
  auto model = make_xgboost_model(2);
  model->fit(data.rows, data.costs, data.groups, margin);
  REQUIRE(model->trained());
  auto plain = model->predict(data.rows);
  auto with = model->predict(data.rows, margin);
  REQUIRE(with.size() == plain.size());
  // The margin takes the place of the model's global bias: outputs move by the margin,
  // up to one constant.
  const float bias = with[0] - plain[0] - margin[0];
  for (std::size_t i = 0; i < plain.size(); ++i) CHECK(with[i] - plain[i] - bias == Approx(margin[i]).margin(1e-4));
  // Untrained, the margin is the prediction.
  auto empty = make_xgboost_model(2);
  CHECK(empty->predict({{1.f, 0.f}, {2.f, 0.f}}, {0.5f, -1.f}) == std::vector<float>{0.5f, -1.f});
}

TEST_CASE("groups and margins of the wrong size are refused", "[tuner][cost_model]") {
  TwoGroups data;
  auto model = make_xgboost_model(1);
  CHECK_THROWS_AS(model->fit(data.rows, data.costs, {20, 19}, {}), std::invalid_argument);
  CHECK_THROWS_AS(model->fit(data.rows, data.costs, {}, {1.f, 2.f}), std::invalid_argument);
  model->fit(data.rows, data.costs, data.groups, {});
  CHECK_THROWS_AS(model->predict(data.rows, {1.f}), std::invalid_argument);
}
