// The tuning loop: propose a batch -> compile in parallel -> measure on every leased
// device -> record -> learn, until the trial budget, the time budget or early stopping
// ends it; then the best configurations are measured again with more repeats (the best
// of a noisy search is biased upward).
//
// Every measurement is committed to the records database as it arrives. Trials count
// per (op, workload, target) across sessions: running the same command again resumes,
// skipping what is recorded and warm-starting the search from it.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "kestrel/host/compiler.h"
#include "kestrel/host/measure_client.h"
#include "kestrel/ops/op.h"
#include "kestrel/tuner/records.h"

namespace kestrel::tuner {

struct TuneOptions {
  std::string strategy = "sa";
  std::uint64_t seed = 1;
  std::size_t trials = 200;                  // total for this (op, workload, target)
  std::chrono::seconds time_budget{0};       // 0: none
  std::size_t early_stopping = 0;            // stop after this many trials without improvement; 0: off
  std::size_t batch_size = 16;
  rpc::MeasureSettings measure;
  std::size_t final_top = 3;                 // configurations re-measured at the end
  std::uint32_t final_repeat = 15;           // their repeats
  bool transfer = true;                      // seed the model with other workloads' records
  std::string device_key;                    // recorded with every measurement
};

struct TuneProgress {
  std::size_t trials = 0;        // measured so far, earlier sessions included
  std::size_t total = 0;         // the trial budget
  std::size_t this_session = 0;  // measured by this session
  std::size_t failures = 0;      // of this session
  double best_gflops = 0;
  double default_gflops = 0;     // the op's default configuration (0 until measured)
  std::string best_config;
  std::chrono::steady_clock::duration elapsed{};
  std::optional<std::chrono::steady_clock::duration> eta;
  std::string phase;             // "tuning", "final"
};

struct FinalEntry {
  std::string config;
  double median_s = 0;
  double gflops = 0;
  std::string status;
};

struct TuneResult {
  std::string session;
  std::string op, workload, target;
  std::size_t trials = 0;
  std::size_t this_session = 0;
  std::size_t resumed = 0;                    // records found from earlier sessions
  std::size_t transfer_records = 0;
  std::map<std::string, std::size_t> statuses;  // this session's measurements by status
  std::vector<FinalEntry> final;              // best first
  double default_gflops = 0;
  std::string stop_reason;                    // "trials", "time budget", "early stopping", "interrupted", "space exhausted"
};

class TuningLoop {
 public:
  // All references must outlive run(). `measurer` must be open (devices leased).
  TuningLoop(const ops::Op& op, ops::Params params, host::Target target, RecordStore& db, host::Compiler& compiler,
             host::MeasureClient& measurer, TuneOptions options);

  // Throws ops::OpError for a workload the op cannot handle, std::invalid_argument for
  // an unknown strategy.
  rpc::awaitable<TuneResult> run(std::function<void(const TuneProgress&)> on_progress = {});

  // Asks run() to stop after the batch in flight; safe from a signal handler's
  // completion (same thread) at any time.
  void request_stop() { stop_.store(true); }

 private:
  const ops::Op& op_;
  ops::Params params_;
  host::Target target_;
  RecordStore& db_;
  host::Compiler& compiler_;
  host::MeasureClient& measurer_;
  TuneOptions options_;
  std::atomic<bool> stop_{false};
};

// A fresh session id (16 hex digits).
std::string new_session_id();

}  // namespace kestrel::tuner
