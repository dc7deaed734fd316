// The reports a real tuning session sends (TuneSession on the embedded pool: an
// in-process tracker and a kestrel-device child), caught by SessionOptions::report: each
// batch of each job, then one finished report per job; in turn and scheduled alike.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <map>

#include "kestrel/ops/op.h"
#include "kestrel/records/records.h"
#include "kestrel/tuner/session.h"
#include "support/async.h"
#include "support/kestrel_processes.h"

using namespace kestrel;
using namespace kestrel::test::e2e;

namespace {

std::vector<rpc::SessionReport> tune_and_collect(bool scheduled) {
  ::setenv("KESTREL_DEVICE_BIN", kDevice.c_str(), 1);
  TempDir dir;
  auto db = records::open_records(dir.file("t.db"));
  ops::Registry registry = ops::builtin_ops();
  const ops::Op& gemm = registry.get("gemm");
  std::vector<tuner::TuneJob> jobs = {{"first", &gemm, ops::parse_params(gemm, "48x40x32"), 1},
                                      {"second", &gemm, ops::parse_params(gemm, "32x32x32"), 1}};
  tuner::SessionOptions options;
  options.tune.strategy = "random";
  options.tune.trials = 12;
  options.tune.batch_size = 4;
  options.tune.measure.repeat = 2;
  options.tune.measure.min_repeat_ms = 2;
  options.tune.final_top = 0;
  options.tune.vendors = "none";
  options.registry = &registry;
  options.scheduled = scheduled;
  options.report_id = "test-host:1:1";
  std::vector<rpc::SessionReport> reports;
  options.report = [&](const rpc::SessionReport& r) { reports.push_back(r); };
  tuner::LeasedDevices devices(options.pool, options.compile_threads);
  tuner::TuneSession session(jobs, *db, options, devices);
  asio::io_context io;
  test::run_async(
      io, [&]() -> rpc::awaitable<void> { co_await session.run(); }, {}, std::chrono::seconds(120));
  return reports;
}

void check_reports(const std::vector<rpc::SessionReport>& reports) {
  REQUIRE_FALSE(reports.empty());
  std::map<std::uint32_t, std::vector<const rpc::SessionReport*>> by_job;
  for (const auto& r : reports) by_job[r.job].push_back(&r);
  REQUIRE(by_job.size() == 2);
  const std::map<std::uint32_t, std::pair<std::string, std::string>> expected = {
      {0, {"first", "K=32,M=48,N=40"}}, {1, {"second", "K=32,M=32,N=32"}}};
  for (const auto& [job, list] : by_job) {
    INFO("job " << job);
    REQUIRE(list.size() >= 4);  // the default's measurement, three batches, the end
    for (std::size_t i = 0; i < list.size(); ++i) {
      const rpc::SessionReport& r = *list[i];
      CHECK(r.session_id == "test-host:1:1");
      CHECK(r.label == expected.at(job).first);
      CHECK(r.op == "gemm");
      CHECK(r.workload == expected.at(job).second);
      CHECK(r.strategy == "random");
      CHECK(r.key == "local");
      CHECK_FALSE(r.target.empty());
      CHECK(r.budget == 12);
      if (i > 0) {
        CHECK(r.trials >= list[i - 1]->trials);
        CHECK(r.best_gflops >= list[i - 1]->best_gflops);
        CHECK(r.elapsed >= list[i - 1]->elapsed);
      }
      // Only the last report of a job is finished.
      CHECK(r.finished == (i + 1 == list.size()));
    }
    const rpc::SessionReport& last = *list.back();
    CHECK(last.phase == "done");
    CHECK(last.trials == 12);
    CHECK(last.this_session == 12);
    CHECK(last.best_gflops > 0);
    CHECK_FALSE(last.best_config.empty());
    CHECK(list.front()->trials < 12);
  }
}

}  // namespace

TEST_CASE("a tuning session reports each batch of each job and one finished report per job", "[e2e][report]") {
  auto reports = tune_and_collect(false);
  check_reports(reports);
  // In turn: every report of the first job comes before any of the second.
  std::size_t last_first = 0, first_second = reports.size();
  for (std::size_t i = 0; i < reports.size(); ++i) {
    if (reports[i].job == 0) last_first = i;
    if (reports[i].job == 1 && first_second == reports.size()) first_second = i;
  }
  CHECK(last_first < first_second);
}

TEST_CASE("a scheduled tuning session (kestrel tune --model) reports each of its jobs too", "[e2e][report]") {
  check_reports(tune_and_collect(true));
}
