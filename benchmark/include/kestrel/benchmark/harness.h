// The comparison harness behind `kestrel bench`: for each workload it picks a
// configuration (the records database's best for the target, or the op's default),
// compiles it for this machine, loads it into this process with the device runtime's
// kernel runner, checks its output against a library's (or the op's reference kernel's),
// and times it interleaved with the libraries (libraries.h) on the same inputs, for each
// thread count.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "kestrel/benchmark/libraries.h"
#include "kestrel/host/target.h"
#include "kestrel/ops/workload_sets.h"
#include "kestrel/tuner/records.h"

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
                           const std::vector<tuner::Best>& best, const tuner::RecordStore* db,
                           const std::string& explicit_config);

// How contenders are timed.
struct TimingSettings {
  std::uint32_t repeat = 7;  // interleaved rounds per contender
  double min_round_s = 0.05;
  std::optional<double> settle_s;  // pause after each contender's share of a round; none: auto
  // OpenBLAS's idle threads spin (yielding) for about 2^28 cycles after a call, OpenMP's
  // for a while too: on more than one thread, pause long enough for them to go to sleep.
  double settle_for(unsigned threads) const { return settle_s ? *settle_s : threads > 1 ? 0.15 : 0.0; }
};

struct Options {
  std::vector<ops::Workload> workloads;
  std::vector<unsigned> threads = {1, 2};
  TimingSettings timing;
  std::uint64_t seed = 1;       // of the random inputs
  std::string config;           // time this configuration (one workload) instead of the best
  std::string kernel_text;      // time this C kernel instead of the op's own (same #defines)
  std::string kernel_path;      // where kernel_text came from, for messages
  host::Target target;  // what kernels are compiled for: this machine (host::parse_target("native"))
  std::vector<tuner::Best> best;           // the records database's best configurations
  const tuner::RecordStore* db = nullptr;  // for trial counts; may be null
  // Called before each workload is timed on a thread count.
  std::function<void(const ops::Workload&, unsigned threads)> on_workload;
};

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
  ConfigChoice choice;
};

struct Report {
  std::vector<WorkloadReport> workloads;
  std::vector<Row> rows;  // by thread count, then workload
  std::vector<std::string> notes;  // sorted, without duplicates
};

// The library contender columns, in the order they are shown.
const std::vector<std::string>& library_columns();

// Prepares every workload, then times them on each thread count. Throws ops::OpError for
// an invalid --config; a workload that does not compile or load gets the reason as its
// Kestrel status instead of figures.
Report run(const Options& options);

// Kestrel's speed over the library's: the median over rounds of the ratio within each
// round (the two ran next to each other, so a load change on a shared machine cancels
// out); the ratio of the medians if the round counts differ. Null without two figures.
std::optional<double> speed_ratio(const Timing& kestrel, const Timing* library);

}  // namespace kestrel::benchmark
