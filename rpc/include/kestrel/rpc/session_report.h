// A tuning session's progress on one job, as a client reports it to the tracker after
// each batch (tracker.capnp `SessionReport`), so that the tracker's dashboard shows
// remote sessions live. Converted to and from the wire type in one place
// (session_report.cpp).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "kestrel/wire/tracker.capnp.h"

namespace kestrel::rpc {

struct SessionReport {
  std::string session_id;  // chosen by the client, unique among its sessions
  std::uint32_t job = 0;   // the job's index within the session
  std::string label;       // the job as shown
  std::string op;
  std::string workload;
  std::string strategy;
  std::string target;
  std::string key;
  std::string phase;             // "tuning", "final", "done"
  std::uint32_t trials = 0;      // measured so far, earlier sessions included
  std::uint32_t budget = 0;
  std::uint32_t this_session = 0;
  double best_gflops = 0;
  double default_gflops = 0;
  std::string best_config;
  std::chrono::milliseconds elapsed{0};
  std::vector<std::pair<std::string, std::uint32_t>> failures;  // status -> count, this session
  bool finished = false;
  // The final round, in the job's last report: the recommendation's re-measured GFLOP/s
  // and its speed-up over the default with the 95% interval (0: none), the verdict.
  double final_gflops = 0;
  double final_speedup = 0;
  double final_speedup_low = 0;
  double final_speedup_high = 0;
  std::string verdict;
  std::string outcome;  // last report: "done", "interrupted", "failed"
  std::chrono::milliseconds eta{0};  // estimated time left; 0: unknown
  std::string message;  // outcome "failed" (or "interrupted" by an abort): why

  // Longest text field accepted by the tracker; longer ones are cut on encoding.
  static constexpr std::size_t kMaxText = 512;
  static constexpr std::size_t kMaxFailureKinds = 32;
};

void to_wire(const SessionReport& report, wire::SessionReport::Builder out);
SessionReport from_wire(wire::SessionReport::Reader in);

}  // namespace kestrel::rpc
