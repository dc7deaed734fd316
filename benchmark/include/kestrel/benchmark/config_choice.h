// Which configuration of a workload `kestrel bench` times: the one given, the records
// database's best for the target, or the op's default.
#pragma once

#include <string>
#include <vector>

#include "kestrel/ops/op.h"
#include "kestrel/records/records.h"

namespace kestrel::benchmark {

// Where a workload's configuration came from.
struct ConfigChoice {
  ops::Config config;
  std::string source;  // "db", "default", "--config", "file"
  std::string detail;  // e.g. "best of 200 trials, 95.1 GFLOP/s when tuned"
};

// The configuration to time: `explicit_config` when given, else the best record of this
// workload and target in `best` (trials counted in `db` when given), else the default.
// Throws ops::OpError when `explicit_config` is not valid.
ConfigChoice choose_config(const ops::Op& op, const ops::Params& params, const std::string& target,
                           const ops::TargetTraits& traits,
                           const std::vector<records::Best>& best, const records::RecordStore* db,
                           const std::string& explicit_config);

}  // namespace kestrel::benchmark
