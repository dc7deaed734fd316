// Which configuration of a workload `kestrel bench` times, and how the report names where
// it came from: the one given (--config), else what records::choose_config picks from the
// records (Kestrel's own best for the exact target), else the op's default.
#pragma once

#include <string>
#include <vector>

#include "kestrel/ops/op.h"
#include "kestrel/records/records.h"

namespace kestrel::compare {

struct TimedConfig {
  ops::Config config;
  std::string source;  // "db", "default", "--config", "file"
  std::string detail;  // e.g. "best of 200 trials, 95.1 GFLOP/s when tuned"
};

// The configuration to time: `explicit_config` when given, else the choice of
// records::choose_config among `best` for `target` (trials counted in `db` when given),
// else the default. Throws ops::OpError when `explicit_config` is not valid.
TimedConfig config_to_time(const ops::Op& op, const ops::Params& params, const ops::TargetId& target,
                           const ops::TargetTraits& traits,
                           const std::vector<records::Best>& best, const records::RecordStore* db,
                           const std::string& explicit_config);

}  // namespace kestrel::compare
