// A dataset view of records: what a cost model learns from. Each usable record of one op
// (any workloads, any targets) becomes a row of feature_vector(op, workload, config), its
// cost and whether it ran correctly.
#pragma once

#include <cstddef>
#include <limits>
#include <vector>

#include "kestrel/ops/op.h"
#include "kestrel/tuner/records.h"

namespace kestrel::tuner {

struct Sample {
  std::vector<float> features;  // feature_vector(op, record.workload, record.config)
  double cost = std::numeric_limits<double>::infinity();  // seconds; +inf unless ok
  bool ok = false;
};

struct Dataset {
  std::vector<Sample> rows;  // in the order of the records
  std::size_t skipped = 0;   // records of another op, or whose workload or config the op cannot describe

  std::vector<std::vector<float>> features() const;  // the rows' features, for CostModel::fit
  std::vector<double> costs() const;                 // the rows' costs, for CostModel::fit
};

// The rows of `records` for `op` (matched by name). Final re-measurements are rows like
// any other. Records the op cannot turn into features (another op's, a knob renamed since)
// are skipped and counted, never an error: a record must name exactly the knobs
// op.knobs(workload) has, so that every row has the same features.
Dataset make_dataset(const ops::Op& op, const std::vector<Record>& records);

}  // namespace kestrel::tuner
