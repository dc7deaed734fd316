// What `kestrel bench` measured: per workload the configuration it timed, per workload
// and thread count each contender's figures or why there are none.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "kestrel/compare/timed_config.h"
#include "kestrel/compare/libraries.h"
#include "kestrel/ops/workload_sets.h"

namespace kestrel::compare {

// One contender's figures on one workload and thread count.
struct Timing {
  std::string name, description;
  std::string status = "ok";  // "ok", or why there is no figure ("wrong answer: ...")
  double median_s = 0;
  double gflops = 0;
  std::vector<double> rounds;  // seconds per call, one per round
  std::uint64_t calls_per_round = 0;
};

struct Row {
  std::size_t workload = 0;  // index into Report::workloads
  unsigned threads = 1;
  Timing kestrel;
  std::map<std::string, Timing> libraries;  // by contender name
  std::string checked_against;              // empty: Kestrel's output was not checked
};

struct WorkloadReport {
  ops::Workload workload;
  std::string text;  // describe_workload
  std::optional<Problem> problem;
  TimedConfig choice;
};

struct Report {
  std::vector<WorkloadReport> workloads;
  std::vector<Row> rows;  // by thread count, then workload
  std::vector<std::string> notes;  // sorted, without duplicates
};

// The library contender columns, in the order they are shown.
const std::vector<std::string>& library_columns();

// Kestrel's speed over the library's: the median over rounds of the ratio within each
// round (the two ran next to each other, so a load change on a shared machine cancels
// out); the ratio of the medians if the round counts differ. Null without two figures.
std::optional<double> speed_ratio(const Timing& kestrel, const Timing* library);

}  // namespace kestrel::compare
