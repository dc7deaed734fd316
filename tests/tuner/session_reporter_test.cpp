// SessionReporter: a job's progress as the tracker's dashboard receives it.
#include "kestrel/tuner/session_reporter.h"

#include <catch2/catch.hpp>
#include <limits>
#include <regex>
#include <stdexcept>
#include <unistd.h>

using namespace kestrel;
using namespace std::chrono_literals;

namespace {

constexpr double kFlops = 1e9;  // a task of 1 GFLOP: GFLOP/s = 1 / seconds

// A progress whose best is `best` GFLOP/s (0: none yet) and whose default is 5 GFLOP/s.
tuner::TuneProgress progress_at(std::size_t trials, double best, const std::string& phase) {
  tuner::TuneProgress p;
  p.trials = trials;
  p.total = 32;
  p.this_session = trials - 4;
  p.flops = kFlops;
  if (best > 0) {
    p.best_seconds = 1 / best;
    p.best_config = ops::Config{{"tile_m", 8}};
  }
  p.default_seconds = 1 / 5.0;
  p.elapsed = std::chrono::milliseconds(100 * trials);
  p.phase = phase;
  p.failures = 1;
  p.statuses = {{"compile_error", 1}};
  return p;
}

}  // namespace

TEST_CASE("a session reports each batch of a job with growing trials and a last finished report",
          "[tuner][session-report]") {
  std::vector<rpc::SessionReport> sent;
  tuner::SessionReporter reporter("host:42:1", [&](const rpc::SessionReport& r) { sent.push_back(r); });
  reporter.describe(0, {"square", "gemm", "K=64,M=64,N=64", "sa", "x86_64-linux-gnu", "local"});
  reporter.progress(0, progress_at(8, 10, "tuning"));
  reporter.progress(0, progress_at(12, 20, "tuning"));
  reporter.progress(0, progress_at(12, 21, "final"));
  reporter.finish(0, progress_at(12, 22, "done"));
  reporter.finish(0, progress_at(12, 22, "done"));    // once finished, a job sends nothing more
  reporter.progress(0, progress_at(16, 30, "tuning"));

  REQUIRE(sent.size() == 4);
  for (const auto& r : sent) {
    CHECK(r.session_id == "host:42:1");
    CHECK(r.job == 0);
    CHECK(r.label == "square");
    CHECK(r.op == "gemm");
    CHECK(r.workload == "K=64,M=64,N=64");
    CHECK(r.strategy == "sa");
    CHECK(r.target == "x86_64-linux-gnu");
    CHECK(r.key == "local");
    CHECK(r.budget == 32);
    CHECK(r.default_gflops == Approx(5));
    CHECK(r.best_config == "tile_m=8");
    REQUIRE(r.failures.size() == 1);
    CHECK(r.failures[0] == std::pair<std::string, std::uint32_t>{"compile_error", 1});
  }
  CHECK(sent[0].trials == 8);
  CHECK(sent[0].this_session == 4);
  CHECK(sent[0].elapsed == 800ms);
  CHECK(sent[1].trials == 12);
  CHECK(sent[1].best_gflops == Approx(20));
  CHECK(sent[2].phase == "final");
  CHECK_FALSE(sent[2].finished);
  CHECK(sent[3].phase == "done");
  CHECK(sent[3].finished);
  CHECK(sent[3].best_gflops == Approx(22));
}

TEST_CASE("a report that cannot be sent never fails the session", "[tuner][session-report]") {
  int calls = 0;
  tuner::SessionReporter reporter("h:1:1", [&](const rpc::SessionReport&) {
    ++calls;
    throw std::runtime_error("connection gone");
  });
  CHECK_NOTHROW(reporter.progress(3, progress_at(8, 1, "tuning")));  // an undescribed job: empty names
  CHECK_NOTHROW(reporter.finish(3, progress_at(8, 1, "done")));
  CHECK(calls == 2);
  tuner::SessionReporter silent("h:1:2", {});
  CHECK_NOTHROW(silent.progress(0, progress_at(8, 1, "tuning")));
}

TEST_CASE("unknown and non-finite figures are reported as 0", "[tuner][session-report]") {
  std::vector<rpc::SessionReport> sent;
  tuner::SessionReporter reporter("h:1:1", [&](const rpc::SessionReport& r) { sent.push_back(r); });
  auto p = progress_at(8, 0, "tuning");  // nothing succeeded yet: +infinity seconds, no config
  p.default_seconds = std::numeric_limits<double>::quiet_NaN();
  reporter.progress(0, p);
  p.best_seconds = std::numeric_limits<double>::denorm_min();  // GFLOP/s overflow to +infinity
  p.default_seconds = 0;
  reporter.progress(0, p);
  REQUIRE(sent.size() == 2);
  for (const auto& r : sent) {
    CHECK(r.best_gflops == 0);
    CHECK(r.default_gflops == 0);
    CHECK(r.phase == "tuning");
  }
  CHECK(sent[0].best_config.empty());
}

TEST_CASE("report session ids name the host and process and count the sessions", "[tuner][session-report]") {
  const std::string a = tuner::new_report_session_id(), b = tuner::new_report_session_id();
  const std::regex form("[^:]+:" + std::to_string(::getpid()) + ":([0-9]+)");
  std::smatch ma, mb;
  REQUIRE(std::regex_match(a, ma, form));
  REQUIRE(std::regex_match(b, mb, form));
  CHECK(std::stoi(mb[1]) == std::stoi(ma[1]) + 1);
}

TEST_CASE("progress reports carry the ETA, and the last report the final round's recommendation and verdict",
          "[tuner][session-report]") {
  std::vector<rpc::SessionReport> sent;
  tuner::SessionReporter reporter("h:1:1", [&](const rpc::SessionReport& r) { sent.push_back(r); });
  reporter.describe(0, {"square", "gemm", "K=64,M=64,N=64", "sa", "x86_64-linux-gnu", "local"});
  auto p = progress_at(8, 10, "tuning");
  p.eta = std::chrono::milliseconds(4500);
  reporter.progress(0, p);
  reporter.progress(0, progress_at(12, 20, "tuning"));  // no ETA known

  tuner::TuneResult result;
  result.stop_reason = tuner::StopReason::trials;
  result.verdict = "faster";
  result.flops = kFlops;
  tuner::FinalEntry best;
  best.config = {{"tile_m", 16}};
  best.median_s = 1 / 18.5;  // re-measured: below the search's best-so-far 22 GFLOP/s
  best.speedup = 1.25;
  best.speedup_low = 1.2;
  best.speedup_high = 1.31;
  best.recommended = true;
  tuner::FinalEntry fallback;
  fallback.is_default = true;
  fallback.median_s = 1 / 14.8;
  result.final = {best, fallback};
  auto done = progress_at(12, 22, "done");
  done.eta = std::chrono::milliseconds(1);  // a finished job has nothing left
  reporter.finish(0, done, &result);

  REQUIRE(sent.size() == 3);
  CHECK(sent[0].eta == 4500ms);
  CHECK(sent[0].outcome.empty());
  CHECK(sent[0].final_gflops == 0);
  CHECK(sent[1].eta == 0ms);
  const auto& last = sent[2];
  CHECK(last.finished);
  CHECK(last.phase == "done");
  CHECK(last.outcome == "done");
  CHECK(last.eta == 0ms);
  CHECK(last.best_gflops == Approx(22));
  CHECK(last.final_gflops == Approx(18.5));
  CHECK(last.final_speedup == 1.25);
  CHECK(last.final_speedup_low == 1.2);
  CHECK(last.final_speedup_high == 1.31);
  CHECK(last.verdict == "faster");
  CHECK(last.message.empty());
}

TEST_CASE("an interrupted job's last report says so; without a result its figures stay 0",
          "[tuner][session-report]") {
  std::vector<rpc::SessionReport> sent;
  tuner::SessionReporter reporter("h:1:1", [&](const rpc::SessionReport& r) { sent.push_back(r); });
  tuner::TuneResult interrupted;
  interrupted.stop_reason = tuner::StopReason::interrupted;
  interrupted.flops = kFlops;
  tuner::FinalEntry recorded;  // no final round: the best recorded configuration
  recorded.median_s = 1 / 9.0;
  interrupted.best_recorded = recorded;
  reporter.finish(0, progress_at(8, 9, "done"), &interrupted);
  reporter.finish(1, progress_at(8, 9, "done"), nullptr);
  reporter.finish(2, progress_at(8, 9, "done"));
  tuner::TuneResult nothing;  // nothing measured successfully
  nothing.stop_reason = tuner::StopReason::trials;
  reporter.finish(3, progress_at(8, 0, "done"), &nothing);

  REQUIRE(sent.size() == 4);
  CHECK(sent[0].outcome == "interrupted");
  CHECK(sent[0].final_gflops == Approx(9));
  CHECK(sent[0].final_speedup == 0);
  CHECK(sent[0].verdict.empty());
  for (std::size_t i = 1; i < 4; ++i) {
    INFO(i);
    CHECK(sent[i].outcome == "done");
    CHECK(sent[i].final_gflops == 0);
    CHECK(sent[i].finished);
  }
}

TEST_CASE("a job that ended with an exception is reported failed with the message, once", "[tuner][session-report]") {
  std::vector<rpc::SessionReport> sent;
  tuner::SessionReporter reporter("h:1:1", [&](const rpc::SessionReport& r) { sent.push_back(r); });
  reporter.progress(0, progress_at(8, 10, "tuning"));
  reporter.fail(0, progress_at(8, 10, "tuning"), "device lost: no device of key rpi4 left");
  reporter.fail(0, progress_at(8, 10, "tuning"), "again");
  reporter.finish(0, progress_at(8, 10, "done"));
  REQUIRE(sent.size() == 2);
  CHECK(sent[1].finished);
  CHECK(sent[1].phase == "done");
  CHECK(sent[1].outcome == "failed");
  CHECK(sent[1].message == "device lost: no device of key rpi4 left");
  CHECK(sent[1].trials == 8);
}

TEST_CASE("a failed session reports its unfinished jobs failed with what they last reported",
          "[tuner][session-report]") {
  std::vector<rpc::SessionReport> sent;
  tuner::SessionReporter reporter("h:1:1", [&](const rpc::SessionReport& r) { sent.push_back(r); });
  for (std::size_t i = 0; i < 5; ++i) reporter.describe(i, {"job " + std::to_string(i), "gemm", "", "sa", "", "k"});
  reporter.progress(0, progress_at(8, 10, "tuning"));
  reporter.finish(0, progress_at(12, 11, "done"));
  reporter.progress(1, progress_at(16, 12, "tuning"));
  reporter.progress(2, progress_at(6, 13, "tuning"));
  // Job 3 was starting (no report yet) when the session failed; job 4 had not begun.
  sent.clear();
  reporter.fail_unfinished("records database: disk full");
  REQUIRE(sent.size() == 3);
  CHECK(sent[0].job == 1);
  CHECK(sent[0].trials == 16);
  CHECK(sent[0].best_gflops == Approx(12));
  CHECK(sent[1].job == 2);
  CHECK(sent[1].trials == 6);
  CHECK(sent[2].job == 3);
  CHECK(sent[2].label == "job 3");
  CHECK(sent[2].trials == 0);
  for (const auto& r : sent) {
    CHECK(r.finished);
    CHECK(r.outcome == "failed");
    CHECK(r.message == "records database: disk full");
  }
  sent.clear();
  reporter.fail_unfinished("again");  // the session is over: nothing more, job 4 included
  reporter.progress(4, progress_at(4, 1, "tuning"));
  CHECK(sent.empty());

  tuner::SessionReporter aborted("h:1:2", [&](const rpc::SessionReport& r) { sent.push_back(r); });
  aborted.progress(0, progress_at(8, 10, "tuning"));
  sent.clear();
  aborted.fail_unfinished("cancelled", true);
  REQUIRE(sent.size() == 1);
  CHECK(sent[0].outcome == "interrupted");
}
