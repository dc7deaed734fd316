// The comparison harness behind `kestrel bench`: for each workload it picks a
// configuration (the records database's best for the target, or the op's default),
// compiles it for this machine, loads it into this process with the device runtime's
// kernel runner, checks its output against a library's (or the op's reference kernel's),
// and times it interleaved with the libraries (libraries.h) on the same inputs, for each
// thread count.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "kestrel/compare/report.h"
#include "kestrel/host/target.h"
#include "kestrel/ops/workload_sets.h"
#include "kestrel/records/records.h"

namespace kestrel::compare {

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
  std::vector<records::Best> best;           // the records database's best configurations
  const records::RecordStore* db = nullptr;  // for trial counts; may be null
  // Called before each workload is timed on a thread count.
  std::function<void(const ops::Workload&, unsigned threads)> on_workload;
};

// Prepares every workload, then times them on each thread count. Throws ops::OpError for
// an invalid --config; a workload that does not compile or load gets the reason as its
// Kestrel status instead of figures.
Report run(const Options& options);

}  // namespace kestrel::compare
