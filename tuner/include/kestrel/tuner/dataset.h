// A dataset view of records: what a cost model learns from. Each usable record of one op
// (any workloads, any targets) becomes a row of feature_vector(op, workload, config), its
// cost and whether it ran correctly.
#pragma once

#include <cstddef>
#include <iosfwd>
#include <limits>
#include <string>
#include <vector>

#include "kestrel/ops/op.h"
#include "kestrel/records/records.h"

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
Dataset make_dataset(const ops::Op& op, const std::vector<records::Record>& records);

// The dataset of `kestrel dataset`: every usable Kestrel record of any op, workload,
// target and device as one row of text cells, for studying and training models outside
// Kestrel. Columns: op, workload, target, target_class, device_key, device_model, config,
// status, cost_s (empty unless ok), gflops, relative (the best ok cost of the record's
// group / its cost, 0 unless ok; group: op, workload, target and device class), final,
// then the cross_features (cross_model.h) under their names, the union over the ops in
// order of first appearance (empty where an op has no such feature), then the target's
// traits (trait.*). Usable: Kestrel's own kernel, a known op whose knobs the record
// names, a target Kestrel knows.
struct CrossTable {
  std::vector<std::string> columns;
  std::vector<std::vector<std::string>> rows;
  std::size_t skipped = 0;  // records not usable
};
CrossTable make_cross_table(const std::vector<records::Record>& records, const ops::Registry& registry,
                            const std::vector<std::string>& only_ops = {}, bool ok_only = false);
// RFC 4180 CSV: a header line, then one line per row; cells with a comma, quote or line
// break quoted.
void write_csv(const CrossTable& table, std::ostream& out);

}  // namespace kestrel::tuner
