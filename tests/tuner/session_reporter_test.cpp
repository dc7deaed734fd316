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

tuner::TuneProgress progress_at(std::size_t trials, double best, const std::string& phase) {
  tuner::TuneProgress p;
  p.trials = trials;
  p.total = 32;
  p.this_session = trials - 4;
  p.best_gflops = best;
  p.default_gflops = 5;
  p.best_config = "tile_m=8";
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
    CHECK(r.default_gflops == 5);
    CHECK(r.best_config == "tile_m=8");
    REQUIRE(r.failures.size() == 1);
    CHECK(r.failures[0] == std::pair<std::string, std::uint32_t>{"compile_error", 1});
  }
  CHECK(sent[0].trials == 8);
  CHECK(sent[0].this_session == 4);
  CHECK(sent[0].elapsed == 800ms);
  CHECK(sent[1].trials == 12);
  CHECK(sent[1].best_gflops == 20);
  CHECK(sent[2].phase == "final");
  CHECK_FALSE(sent[2].finished);
  CHECK(sent[3].phase == "done");
  CHECK(sent[3].finished);
  CHECK(sent[3].best_gflops == 22);
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

TEST_CASE("non-finite figures are reported as 0", "[tuner][session-report]") {
  std::vector<rpc::SessionReport> sent;
  tuner::SessionReporter reporter("h:1:1", [&](const rpc::SessionReport& r) { sent.push_back(r); });
  auto p = progress_at(8, std::numeric_limits<double>::infinity(), "tuning");
  p.default_gflops = std::numeric_limits<double>::quiet_NaN();
  reporter.progress(0, p);
  REQUIRE(sent.size() == 1);
  CHECK(sent[0].best_gflops == 0);
  CHECK(sent[0].default_gflops == 0);
  CHECK(sent[0].phase == "tuning");
}

TEST_CASE("report session ids name the host and process and count the sessions", "[tuner][session-report]") {
  const std::string a = tuner::new_report_session_id(), b = tuner::new_report_session_id();
  const std::regex form("[^:]+:" + std::to_string(::getpid()) + ":([0-9]+)");
  std::smatch ma, mb;
  REQUIRE(std::regex_match(a, ma, form));
  REQUIRE(std::regex_match(b, mb, form));
  CHECK(std::stoi(mb[1]) == std::stoi(ma[1]) + 1);
}
