// The dataset view: records of one op -> (features, cost, ok) rows, skipping what the op
// cannot describe; and that a cost model fits on it.
#include "support/traits.h"
#include "kestrel/tuner/dataset.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <limits>

#include "kestrel/tuner/cost_model.h"
#include "kestrel/tuner/features.h"

using namespace kestrel;
using namespace kestrel::tuner;
using namespace kestrel::records;

namespace {

Record record_of(const ops::Op& op, const ops::Params& params, const ops::Config& config, double cost) {
  Record r;
  r.op = std::string(op.name());
  r.workload = params;
  r.target = *ops::TargetId::parse("x86_64-linux-gnu");
  r.config = config;
  r.status = std::isfinite(cost) ? kernel::Status::ok : kernel::Status::wrong_answer;
  r.cost = cost;
  return r;
}

}  // namespace

TEST_CASE("a dataset turns records of one op into feature rows with costs", "[tuner][dataset]") {
  auto registry = ops::builtin_ops();
  const ops::Op& gemm = registry.get("gemm");
  const ops::Op& conv = registry.get("conv2d");
  ops::Params small = ops::parse_params(gemm, "64x64x64"), large = ops::parse_params(gemm, "256x128x512");
  ops::Config a = gemm.default_config(small, test::fixed_traits());
  ops::Config b = ops::parse_config(gemm, large, "mr=4,nr=32", test::fixed_traits());
  ops::Params conv_params = ops::parse_params(conv, "C=8,H=8,W=8,K=8,R=3,S=3");

  std::vector<Record> records;
  records.push_back(record_of(gemm, small, a, 2e-3));
  records.push_back(record_of(gemm, large, b, std::numeric_limits<double>::infinity()));  // failed
  Record final_b = record_of(gemm, large, b, 5e-3);
  final_b.final_measurement = true;
  records.push_back(final_b);
  records.push_back(record_of(conv, conv_params, conv.default_config(conv_params, test::fixed_traits()), 1e-3));  // another op
  ops::Config renamed = a;
  renamed["old_knob"] = renamed.begin()->second;
  renamed.erase(renamed.begin());
  records.push_back(record_of(gemm, small, renamed, 1e-3));  // a knob renamed since
  Record ok_but_zero = record_of(gemm, small, a, 0.0);      // an ok record without a cost is not a success
  records.push_back(ok_but_zero);

  Dataset data = make_dataset(gemm, records);
  CHECK(data.skipped == 2);
  REQUIRE(data.rows.size() == 4);
  CHECK(data.rows[0].features == feature_vector(gemm, small, a));
  CHECK(data.rows[0].ok);
  CHECK(data.rows[0].cost == 2e-3);
  CHECK(data.rows[1].features == feature_vector(gemm, large, b));
  CHECK(!data.rows[1].ok);
  CHECK(std::isinf(data.rows[1].cost));
  CHECK(data.rows[2].ok);  // final re-measurements are rows too
  CHECK(!data.rows[3].ok);
  CHECK(std::isinf(data.rows[3].cost));
  for (const auto& row : data.rows) CHECK(row.features.size() == data.rows[0].features.size());

  auto features = data.features();
  auto costs = data.costs();
  REQUIRE(features.size() == 4);
  REQUIRE(costs.size() == 4);
  CHECK(features[2] == data.rows[2].features);
  CHECK(costs[2] == 5e-3);

  // What a cost model trains on.
  auto model = make_xgboost_model(1);
  model->fit(features, costs);
  CHECK(model->trained());
  auto scores = model->predict({data.rows[0].features, data.rows[1].features});
  CHECK(scores[0] > scores[1]);  // the success above the failure

  CHECK(make_dataset(conv, records).rows.size() == 1);
  CHECK(make_dataset(gemm, {}).rows.empty());
}
