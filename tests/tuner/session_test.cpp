// Tests of whole tuning sessions (tuner::TuneSession) on synthetic devices: a synthetic
// evaluator behind a SessionDevices, records in memory. Jobs in turn and interleaved,
// jobs made from the device's target, a stop, and devices that cannot be leased.
#include "kestrel/tuner/session.h"

#include <catch2/catch.hpp>

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
