// Records -> (features, cost, ok) rows for the cost model.
#include "kestrel/tuner/dataset.h"

#include <cmath>
#include <exception>

#include "kestrel/tuner/features.h"

namespace kestrel::tuner {
namespace {

bool same_knobs(const std::vector<ops::Knob>& knobs, const ops::Config& config) {
  if (knobs.size() != config.size()) return false;
  for (const auto& knob : knobs) {
    if (!config.contains(knob.name)) return false;
  }
  return true;
}

}  // namespace

Dataset make_dataset(const ops::Op& op, const std::vector<Record>& records) {
  Dataset out;
  out.rows.reserve(records.size());
  for (const Record& r : records) {
    // A vendor library's record has no configuration of the op's space: never a sample.
    if (r.op != op.name() || r.workload.empty() || r.config.empty() || r.implementation != kKestrelImplementation) {
      ++out.skipped;
      continue;
    }
    Sample row;
    try {
      // Rows of one op must have the same features: the record's knobs must be the op's.
      if (!same_knobs(op.knobs(r.workload), r.config)) {
        ++out.skipped;
        continue;
      }
      row.features = feature_vector(op, r.workload, r.config);
    } catch (const std::exception&) {
      ++out.skipped;  // a workload the op refuses
      continue;
    }
    row.ok = r.ok() && std::isfinite(r.cost) && r.cost > 0;
    row.cost = row.ok ? r.cost : std::numeric_limits<double>::infinity();
    out.rows.push_back(std::move(row));
  }
  return out;
}

std::vector<std::vector<float>> Dataset::features() const {
  std::vector<std::vector<float>> out;
  out.reserve(rows.size());
  for (const auto& row : rows) out.push_back(row.features);
  return out;
}

std::vector<double> Dataset::costs() const {
  std::vector<double> out;
  out.reserve(rows.size());
  for (const auto& row : rows) out.push_back(row.cost);
  return out;
}

}  // namespace kestrel::tuner
