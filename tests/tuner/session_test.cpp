// Tests of whole tuning sessions (tuner::TuneSession) on synthetic devices: a synthetic
// evaluator behind a SessionDevices, records in memory. Jobs in turn and interleaved,
// jobs made from the device's target, a stop, and devices that cannot be leased.
#include "kestrel/tuner/session.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "kestrel/records/records.h"
#include "kestrel/tuner/evaluator.h"
#include "kestrel/tuner/session_devices.h"
#include "support/async.h"
#include "tuner/toy_op.h"

namespace {

using namespace kestrel;

// One described x86-64 device whose measurements come from a synthetic evaluator.
class SyntheticDevices final : public tuner::SessionDevices {
 public:
  explicit SyntheticDevices(tuner::Evaluator& evaluator) : evaluator_(evaluator) {
    device_.name = "synthetic-0";
    device_.triple = "x86_64-linux-gnu";
    device_.cpu_model = "synthetic cpu";
    device_.cores = 2;
  }
  rpc::awaitable<void> open() override {
    ++opened;
    if (!refuse.empty()) throw std::runtime_error(refuse);
    co_return;
  }
  const rpc::DeviceInfo& device() const override { return device_; }
  tuner::Evaluator& evaluator() override { return evaluator_; }
  // What the synthetic evaluator stamps on its measurements.
  records::DeviceClass device_class(const host::Target&) const override { return {"synthetic", "synthetic", "synthetic"}; }
  void interrupt() override { ++interrupts; }
  void abort() override { ++aborts; }
  void report(const rpc::SessionReport& report) override { reports.push_back(report); }
  rpc::awaitable<void> close() override {
    ++closed;
    co_return;
  }

  std::string refuse;  // open() throws this when not empty
  int opened = 0, closed = 0, interrupts = 0, aborts = 0;
  std::vector<rpc::SessionReport> reports;

 private:
  tuner::Evaluator& evaluator_;
  rpc::DeviceInfo device_;
};

// 8 x 8 configurations, the fastest a=5,b=3; the workload's "n" scales the cost.
test::ToyOp grid_op() {
  return test::ToyOp({{"a", {1, 2, 3, 4, 5, 6, 7, 8}, ""}, {"b", {1, 2, 3, 4, 5, 6, 7, 8}, ""}},
                     [](const ops::Config&) { return true; });
}

double bowl(const ops::Config& c) {
  const double a = static_cast<double>(c.at("a")), b = static_cast<double>(c.at("b"));
  return 1e-3 * (1 + (a - 5) * (a - 5) + (b - 3) * (b - 3));
}

tuner::SessionOptions options_of(std::size_t trials) {
  tuner::SessionOptions o;
  o.pool.key = "synthetic";
  o.tune.strategy = "random";
  o.tune.trials = trials;
  o.tune.batch_size = 4;
  o.tune.final_top = 2;
  o.tune.final_repeat = 3;
  o.tune.final_max_passes = 2;
  o.tune.transfer = false;
  o.tune.vendors = "none";
  o.tune.measure.repeat = 3;
  return o;
}

std::size_t records_of(const records::RecordStore& db, const std::string& label_workload) {
  std::size_t n = 0;
  for (const auto& r : db.all()) n += ops::format_params(r.workload) == label_workload && !r.final_measurement ? 1 : 0;
  return n;
}

}  // namespace

TEST_CASE("session: jobs in turn each get their trials, their records and a last report", "[session]") {
  test::ToyOp op = grid_op();
  auto evaluator = tuner::SyntheticEvaluator::constant(bowl);
  SyntheticDevices devices(evaluator);
  auto db = records::open_records(":memory:");
  std::vector<tuner::TuneJob> jobs = {{"first", &op, {{"n", 1}}}, {"second", &op, {{"n", 2}}}};
  std::vector<std::size_t> progress_jobs;
  tuner::TuneSession session(jobs, *db, options_of(12), devices);
  tuner::SessionResult result = test::sync(session.run([&](std::size_t job, const tuner::TuneProgress&) {
    progress_jobs.push_back(job);
  }));

  REQUIRE(result.results.size() == 2);
  CHECK_FALSE(result.interrupted);
  for (const tuner::TuneResult& r : result.results) {
    CHECK(r.trials == 12);
    CHECK(r.this_session == 12);
    REQUIRE(r.recommendation() != nullptr);
    CHECK(r.recommendation()->ok());
  }
  CHECK(records_of(*db, "n=1") == 12);
  CHECK(records_of(*db, "n=2") == 12);
  // Job 0's progress all comes before job 1's.
  REQUIRE(!progress_jobs.empty());
  CHECK(std::is_sorted(progress_jobs.begin(), progress_jobs.end()));
  CHECK(progress_jobs.back() == 1);
  CHECK(devices.opened == 1);
  CHECK(devices.closed == 1);
  // The reports went to the devices' tracker; each job's last one is finished, "done".
  std::vector<bool> finished(2, false);
  for (const rpc::SessionReport& r : devices.reports) {
    if (r.finished) {
      finished[r.job] = true;
      CHECK(r.outcome == "done");
      CHECK(r.key == "synthetic");
    }
  }
  CHECK(finished == std::vector<bool>{true, true});
}

TEST_CASE("session: a scheduled session interleaves its jobs until each has its trials", "[session]") {
  test::ToyOp op = grid_op();
  auto evaluator = tuner::SyntheticEvaluator::constant(bowl);
  SyntheticDevices devices(evaluator);
  auto db = records::open_records(":memory:");
  tuner::SessionOptions options = options_of(9);
  options.scheduled = true;
  std::vector<tuner::TuneJob> jobs = {{"heavy", &op, {{"n", 1}}, 8.0}, {"light", &op, {{"n", 2}}, 1.0}};
  std::vector<std::size_t> order;
  tuner::TuneSession session(jobs, *db, options, devices);
  tuner::SessionResult result = test::sync(session.run([&](std::size_t job, const tuner::TuneProgress& p) {
    if (p.phase == "tuning" && p.trials > 1) order.push_back(job);
  }));
  REQUIRE(result.results.size() == 2);
  CHECK(result.stop_reason == tuner::StopReason::trials);
  CHECK(result.results[0].trials == 9);
  CHECK(result.results[1].trials == 9);
  // Interleaved: the steps switch between the jobs more than once (in turn: once).
  std::size_t switches = 0;
  for (std::size_t i = 1; i < order.size(); ++i) switches += order[i] != order[i - 1] ? 1 : 0;
  CHECK(switches >= 2);
}

TEST_CASE("session: the jobs can be made from the device's target once it is leased", "[session]") {
  test::ToyOp op = grid_op();
  auto evaluator = tuner::SyntheticEvaluator::constant(bowl);
  SyntheticDevices devices(evaluator);
  auto db = records::open_records(":memory:");
  tuner::SessionOptions options = options_of(5);
  std::string seen_triple;
  options.make_jobs = [&](const host::Target& target) {
    seen_triple = target.triple;
    return std::vector<tuner::TuneJob>{{"made", &op, {{"n", 3}}}};
  };
  tuner::TuneSession session({}, *db, options, devices);
  tuner::SessionResult result = test::sync(session.run());
  CHECK(seen_triple == "x86_64-linux-gnu");
  REQUIRE(result.results.size() == 1);
  CHECK(result.results[0].trials == 5);
  CHECK(session.jobs().size() == 1);
}

TEST_CASE("session: a stop ends the job in flight, tunes no further job and keeps what was measured",
          "[session]") {
  test::ToyOp op = grid_op();
  auto evaluator = tuner::SyntheticEvaluator::constant(bowl);
  SyntheticDevices devices(evaluator);
  auto db = records::open_records(":memory:");
  std::vector<tuner::TuneJob> jobs = {{"first", &op, {{"n", 1}}}, {"second", &op, {{"n", 2}}}};
  tuner::TuneSession idle(jobs, *db, options_of(40), devices);
  CHECK_FALSE(idle.request_stop());  // before run(): no job to stop gracefully yet
  tuner::TuneSession running(jobs, *db, options_of(40), devices);
  tuner::SessionResult result = test::sync(running.run([&](std::size_t, const tuner::TuneProgress& p) {
    if (p.phase == "tuning" && p.trials >= 9) running.request_stop();
  }));
  CHECK(result.interrupted);
  REQUIRE(result.results.size() == 1);
  CHECK(result.results[0].stop_reason == tuner::StopReason::interrupted);
  CHECK(result.results[0].trials >= 9);
  CHECK(result.results[0].trials < 40);
  CHECK(devices.interrupts >= 1);  // a wait for a result ends at once
  CHECK(records_of(*db, "n=1") == result.results[0].trials);
  CHECK(records_of(*db, "n=2") == 0);
}

TEST_CASE("session: devices that cannot be leased end the session with their error, closed and reported",
          "[session]") {
  test::ToyOp op = grid_op();
  auto evaluator = tuner::SyntheticEvaluator::constant(bowl);
  SyntheticDevices devices(evaluator);
  devices.refuse = "no device of key 'synthetic' within 30000 ms";
  auto db = records::open_records(":memory:");
  std::vector<rpc::SessionReport> sent;
  tuner::SessionOptions options = options_of(5);
  options.report = [&](const rpc::SessionReport& r) { sent.push_back(r); };
  tuner::TuneSession session({{"first", &op, {{"n", 1}}}}, *db, options, devices);
  CHECK_THROWS_WITH(test::sync(session.run()), Catch::Contains("no device of key 'synthetic'"));
  CHECK(devices.closed == 1);
  CHECK(db->count() == 0);
  CHECK_FALSE(session.abort());  // nothing open to abort
  CHECK(evaluator.evaluations() == 0);
}

namespace {

// Simulated time: a clock that moves only when the evaluator "measures". Each
// configuration takes `overhead` (compiling, loading) plus its timed rounds.
struct SimulatedTime {
  std::chrono::steady_clock::time_point now{};
  std::chrono::steady_clock::duration overhead = std::chrono::milliseconds(100);
  std::function<std::chrono::steady_clock::time_point()> clock() {
    return [this] { return now; };
  }
  double seconds() const { return std::chrono::duration<double>(now.time_since_epoch()).count(); }
};

class TimedEvaluator final : public tuner::Evaluator {
 public:
  TimedEvaluator(tuner::Evaluator& inner, SimulatedTime& time) : inner_(inner), time_(time) {}
  rpc::awaitable<std::vector<tuner::Evaluation>> evaluate(const tuner::Task& task,
                                                          const std::vector<ops::Config>& configs,
                                                          const rpc::MeasureSettings& settings,
                                                          tuner::ResultCallback on_result) override {
    std::vector<tuner::Evaluation> out = co_await inner_.evaluate(task, configs, settings, on_result);
    for (const tuner::Evaluation& e : out) {
      double rounds = 0;
      for (double s : e.round_seconds) rounds += s * std::max<std::uint32_t>(1, e.number);
      time_.now += time_.overhead + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                        std::chrono::duration<double>(rounds));
    }
    co_return out;
  }

 private:
  tuner::Evaluator& inner_;
  SimulatedTime& time_;
};

// A scheduled session of six jobs (weights 1..6) with a time budget, on simulated time.
tuner::SessionOptions budgeted_options(SimulatedTime& time, int budget_s) {
  tuner::SessionOptions options = options_of(100000);  // only the budget stops the search
  options.scheduled = true;
  options.time_budget = std::chrono::seconds(budget_s);
  options.tune.final_top = 2;
  options.tune.final_repeat = 3;
  options.tune.final_passes = 3;
  options.tune.final_max_passes = 6;
  options.tune.measure.repeat = 3;
  options.tune.clock = time.clock();
  return options;
}

std::vector<tuner::TuneJob> six_jobs(const ops::Op& op) {
  std::vector<tuner::TuneJob> jobs;
  for (int n = 1; n <= 6; ++n) jobs.push_back({"job" + std::to_string(n), &op, {{"n", n}}, static_cast<double>(n)});
  return jobs;
}

}  // namespace

TEST_CASE("session: a scheduled session's time budget covers its final round, every job re-measured",
          "[session][budget]") {
  test::ToyOp op = grid_op();
  SimulatedTime time;
  auto synthetic = tuner::SyntheticEvaluator::constant(bowl);
  TimedEvaluator evaluator(synthetic, time);
  SyntheticDevices devices(evaluator);
  auto db = records::open_records(":memory:");
  tuner::SessionOptions options = budgeted_options(time, 30);
  tuner::TuneSession session(six_jobs(op), *db, options, devices);
  std::vector<std::size_t> final_done;  // the final round's "done" reports, by job
  std::vector<double> shares;           // their weight x best time (the job's share of the latency)
  double search_ended = -1;
  tuner::SessionResult result = test::sync(session.run([&](std::size_t job, const tuner::TuneProgress& p) {
    if (p.final_tasks > 0 && search_ended < 0) search_ended = time.seconds();
    if (p.final_tasks > 0 && p.phase == "done") {
      final_done.push_back(job);
      shares.push_back(static_cast<double>(job + 1) * p.best_seconds);
      CHECK(p.final_tasks == 6);
      CHECK(p.final_task == final_done.size());
      CHECK(p.eta.has_value());
    }
  }));
  REQUIRE(result.results.size() == 6);
  CHECK(result.stop_reason == tuner::StopReason::time_budget);
  // Every job was re-measured in full, and the whole session, final round included, ended
  // within the budget (a final pass here is 3 x 0.1 s).
  CHECK(result.final_full == 6);
  CHECK(result.final_fewer == 0);
  CHECK(result.final_skipped == 0);
  INFO("search ended at " << search_ended << " s, session at " << time.seconds() << " s");
  CHECK(time.seconds() <= 30.0);
  CHECK(search_ended < 30.0 - 1.0);  // the search stopped early to leave the final round its time
  CHECK(result.final_reserved > std::chrono::seconds(1));
  for (const tuner::TuneResult& r : result.results) {
    CHECK(r.final_cut == tuner::FinalCut::none);
    CHECK(r.passes >= 3);
    CHECK(r.verdict == "faster");
  }
  // The jobs that weigh most in the latency (weight x best time) first.
  REQUIRE(final_done.size() == 6);
  CHECK(std::is_sorted(shares.rbegin(), shares.rend()));
}

TEST_CASE("session: when the budget is short, the final round re-measures the jobs that matter most and "
          "says which it skipped", "[session][budget]") {
  test::ToyOp op = grid_op();
  SimulatedTime time;
  auto synthetic = tuner::SyntheticEvaluator::constant(bowl);
  TimedEvaluator evaluator(synthetic, time);
  SyntheticDevices devices(evaluator);
  auto db = records::open_records(":memory:");
  tuner::SessionOptions options = budgeted_options(time, 30);
  // The search keeps all but 5% of the budget (1.5 s): room for the minimum passes of
  // about one job (3 entries x 3 passes x 0.1 s).
  options.final_share = 0.05;
  tuner::TuneSession session(six_jobs(op), *db, options, devices);
  std::vector<std::string> final_reports;
  std::vector<double> shares;  // weight x best time, in the final round's order
  tuner::SessionResult result = test::sync(session.run([&](std::size_t job, const tuner::TuneProgress& p) {
    if (p.final_tasks > 0 && p.phase == "done") {
      final_reports.push_back("job" + std::to_string(job + 1) + ":" + std::string(tuner::to_string(p.final_cut)));
      shares.push_back(static_cast<double>(job + 1) * p.best_seconds);
    }
  }));
  REQUIRE(result.results.size() == 6);
  INFO("session ended at " << time.seconds() << " s");
  // Within the budget, or over it by at most one final pass (0.3 s).
  CHECK(time.seconds() <= 30.0 + 0.3);
  CHECK(result.final_skipped >= 1);
  CHECK(result.final_full + result.final_fewer >= 1);
  CHECK(result.final_full + result.final_fewer + result.final_skipped == 6);
  // The job that weighs most was re-measured first; a skipped job keeps its best recorded
  // configuration.
  REQUIRE(final_reports.size() == 6);
  CHECK(std::is_sorted(shares.rbegin(), shares.rend()));
  CHECK_FALSE(final_reports.front().ends_with(":skipped"));
  for (const tuner::TuneResult& r : result.results) {
    if (r.final_cut != tuner::FinalCut::skipped) continue;
    CHECK(r.passes == 0);
    CHECK(r.final.empty());
    REQUIRE(r.best_recorded.has_value());
    CHECK(r.recommendation() == &*r.best_recorded);
  }
  // The skipped ones are the lightest: once one is skipped, every later one is too.
  bool skipping = false;
  for (const std::string& report : final_reports) {
    if (report.ends_with(":skipped")) skipping = true;
    else CHECK_FALSE(skipping);
  }
}

TEST_CASE("session: one job's time budget covers its final round too", "[session][budget]") {
  test::ToyOp op = grid_op();
  SimulatedTime time;
  auto synthetic = tuner::SyntheticEvaluator::constant(bowl);
  TimedEvaluator evaluator(synthetic, time);
  SyntheticDevices devices(evaluator);
  auto db = records::open_records(":memory:");
  tuner::SessionOptions options = budgeted_options(time, 10);
  options.scheduled = false;
  options.time_budget = std::chrono::seconds(0);
  options.tune.time_budget = std::chrono::seconds(10);
  tuner::TuneSession session({{"one", &op, {{"n", 1}}}}, *db, options, devices);
  tuner::SessionResult result = test::sync(session.run());
  REQUIRE(result.results.size() == 1);
  const tuner::TuneResult& r = result.results.front();
  INFO("ended at " << time.seconds() << " s");
  CHECK(r.stop_reason == tuner::StopReason::time_budget);
  CHECK(r.final_cut == tuner::FinalCut::none);
  CHECK(r.passes >= 3);
  CHECK(time.seconds() <= 10.0);
  CHECK(r.trials > 20);  // the search still had most of the budget
}
