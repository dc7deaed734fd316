// Tests of the front end's shared pieces without a process: the options read through an
// OptionSource (defaults, ranges, cross-checks, messages spelled as the user wrote them),
// the tuning options, and the table from error kind to exit status.
#include "kestrel/frontend/errors.h"
#include "kestrel/frontend/options.h"
#include "kestrel/frontend/tracker_query.h"
#include "kestrel/frontend/tune_setup.h"

#include <catch2/catch.hpp>

#include <map>
#include <string>

#include "kestrel/base/usage_error.h"
#include "kestrel/model/graph.h"
#include "kestrel/ops/op.h"
#include "kestrel/records/records.h"
#include "kestrel/rpc/errors.h"
#include "kestrel/tuner/cross_model.h"
#include "support/errors.h"

namespace {

using namespace kestrel;

using Opts = std::map<std::string, std::string>;

// Options given as text, spelled with a prefix ("--" like a command line, "" like Python).
class MapSource final : public frontend::OptionSource {
 public:
  MapSource(std::map<std::string, std::string> values, std::string prefix = "--")
      : values_(std::move(values)), prefix_(std::move(prefix)) {}
  bool has(const frontend::OptionSpec& spec) override { return values_.contains(std::string(spec.name)); }
  std::string text(const frontend::OptionSpec& spec) override { return values_.at(std::string(spec.name)); }
  std::int64_t integer(const frontend::OptionSpec& spec) override { return std::stoll(text(spec)); }
  bool flag(const frontend::OptionSpec& spec) override { return has(spec); }
  std::chrono::seconds duration(const frontend::OptionSpec& spec) override {
    return frontend::parse_duration(spell(spec), text(spec));
  }
  std::string spell(const frontend::OptionSpec& spec) const override { return prefix_ + std::string(spec.name); }

 private:
  std::map<std::string, std::string> values_;
  std::string prefix_;
};

const auto usage_error = &test::error_message<UsageError>;

}  // namespace

TEST_CASE("frontend: the shared options have their defaults when not given", "[frontend]") {
  MapSource none(Opts{});
  const host::PoolOptions pool = frontend::pool_options(none, std::nullopt, "test");
  CHECK_FALSE(pool.tracker);
  CHECK(pool.key == "local");
  CHECK(pool.wait == std::chrono::milliseconds(30'000));
  CHECK(pool.replacement_wait == std::chrono::seconds(300));
  const rpc::MeasureSettings m = frontend::measure_settings(none);
  CHECK(m.repeat == 5);
  CHECK(m.timeout_ms == 10'000);
  CHECK(m.min_repeat_ms == 100);
  const tuner::TuneOptions tune = frontend::tune_options(none);
  CHECK(tune.strategy == "sa");
  CHECK(tune.batch_size == 16);
  CHECK(tune.final_top == 3);
  CHECK(tune.final_max_passes == 12);
  CHECK(tune.vendors == "all");
  CHECK(tune.trials == 200);
  CHECK(tune.time_budget.count() == 0);
  CHECK(tune.transfer);
  CHECK(frontend::tune_options(none, true).final_top == 2);  // a model's tasks
  CHECK(frontend::tune_options(none, true).trials == 64);    // each
  MapSource five(Opts{{"final-top", "5"}});
  CHECK(frontend::tune_options(five, true).final_top == 5);
  MapSource budget(Opts{{"time-budget", "15m"}, {"no-transfer", ""}});
  CHECK(frontend::tune_options(budget).time_budget == std::chrono::minutes(15));
  CHECK(frontend::tune_options(budget).trials == 200);
  CHECK_FALSE(frontend::tune_options(budget).transfer);
  CHECK(frontend::tune_options(budget, true).trials == 100'000'000);  // a model's tasks: the budget decides
  const frontend::TargetPolicy target = frontend::target_policy(none);
  CHECK(target.spec == "auto");
  CHECK_FALSE(target.without_device());
}

TEST_CASE("frontend: ranges and cross-checks name the option as the user spelled it", "[frontend]") {
  MapSource cli(Opts{{"repeat", "0"}});
  CHECK(usage_error([&] { frontend::measure_settings(cli); }) == "--repeat must be between 1 and 10000, got 0");
  MapSource py(Opts{{"repeat", "0"}}, "");
  CHECK(usage_error([&] { frontend::measure_settings(py); }) == "repeat must be between 1 and 10000, got 0");
  MapSource key(Opts{{"key", "rpi4"}});
  CHECK_THAT(usage_error([&] { frontend::pool_options(key, std::nullopt, "t"); }),
             Catch::Contains("--key 'rpi4' needs --tracker HOST:PORT"));
  MapSource both(Opts{{"tracker", "127.0.0.1:9190"}, {"no-tls", "1"}, {"tls-ca", "ca.pem"}});
  CHECK_THAT(usage_error([&] { frontend::pool_options(both, std::nullopt, "t"); }),
             Catch::Contains("--tls-ca and --no-tls contradict each other"));
  MapSource tls_alone(Opts{{"no-tls", "1"}});
  CHECK_THAT(usage_error([&] { frontend::pool_options(tls_alone, std::nullopt, "t"); }),
             Catch::Contains("apply to a tracker"));
  MapSource strategy(Opts{{"strategy", "anneel"}});
  CHECK_THAT(usage_error([&] { frontend::tune_options(strategy); }),
             Catch::Contains("unknown strategy 'anneel'") && Catch::Contains("did you mean 'anneal'?"));
  MapSource vendors(Opts{{"vendors", "open blas"}}, "");
  CHECK_THAT(usage_error([&] { frontend::tune_options(vendors); }), Catch::StartsWith("vendors 'open blas' is not"));
  MapSource target(Opts{{"target", "sparc-sun-solaris"}});
  CHECK_FALSE(usage_error([&] { frontend::target_policy(target).without_device(); }) == "(no error)");
  CHECK(usage_error([&] { frontend::checked_block("--block", 3); }) == "--block must be 4, 8 or 16");
  // The budget: --trials is a workload's, --trials-per-task a model's tasks'.
  MapSource trials(Opts{{"trials", "5"}});
  CHECK(usage_error([&] { frontend::tune_options(trials, true); }) ==
        "with a model, give --trials-per-task or --time-budget (--trials is per workload)");
  MapSource per_task(Opts{{"trials-per-task", "5"}});
  CHECK(usage_error([&] { frontend::tune_options(per_task); }) == "--trials-per-task goes with a model");
  MapSource bad_budget(Opts{{"time-budget", "15x"}});
  CHECK_THAT(usage_error([&] { frontend::tune_options(bad_budget); }),
             Catch::StartsWith("--time-budget '15x' has an unknown unit 'x'"));
  // The cost-model options: each contradiction before any file is read.
  MapSource verify_alone(Opts{{"zero-shot-verify", "3"}});
  CHECK(usage_error([&] { frontend::cost_model_use(verify_alone); }) ==
        "--zero-shot-verify goes with --zero-shot");
  MapSource nothing(Opts{});
  CHECK_FALSE(frontend::cost_model_use(nothing).model);
  // --zero-shot alone takes the model Kestrel ships.
  MapSource zero_alone(Opts{{"zero-shot", ""}});
  const frontend::CostModelUse shipped = frontend::cost_model_use(zero_alone);
  CHECK(shipped.zero_shot);
  CHECK(shipped.model);
  CHECK(shipped.path == frontend::shipped_cost_model_path());
  CHECK_THAT(shipped.path, Catch::EndsWith("share/cost-model/kestrel.kcm"));
}

TEST_CASE("frontend: kestrel query and kestrel.query read one set of options", "[frontend]") {
  MapSource none(Opts{});
  const frontend::QueryOptions defaults = frontend::query_options(none, std::nullopt, "q");
  CHECK(defaults.tracker.to_string() == "127.0.0.1:9190");
  CHECK(defaults.timeout == std::chrono::milliseconds(5000));  // the query's, not a candidate's 10000
  CHECK(defaults.client.name == "q");
  CHECK_FALSE(defaults.client.tls.disabled);
  MapSource given(Opts{{"tracker", "10.0.0.2:9000"}, {"no-tls", ""}, {"timeout-ms", "250"}});
  const frontend::QueryOptions q = frontend::query_options(given, std::nullopt, "q");
  CHECK(q.tracker.to_string() == "10.0.0.2:9000");
  CHECK(q.client.tls.disabled);
  CHECK(q.timeout == std::chrono::milliseconds(250));
  MapSource both(Opts{{"no-tls", ""}, {"tls-ca", "ca.pem"}}, "");
  CHECK(usage_error([&] { frontend::query_options(both, std::nullopt, "q"); }) ==
        "tls-ca and no-tls contradict each other: drop one");
  MapSource zero(Opts{{"timeout-ms", "0"}});
  CHECK(usage_error([&] { frontend::query_options(zero, std::nullopt, "q"); }) ==
        "--timeout-ms must be between 1 and 3600000, got 0");
  MapSource bad(Opts{{"tracker", "nowhere"}});
  CHECK_THAT(usage_error([&] { frontend::query_options(bad, std::nullopt, "q"); }), Catch::StartsWith("--tracker: "));
}

TEST_CASE("frontend: one table gives each error kind its exit status", "[frontend]") {
  auto status_of = [](auto error) { return frontend::exit_status(frontend::classify(std::make_exception_ptr(error)).kind); };
  CHECK(status_of(UsageError("bad flag")) == 2);
  CHECK(status_of(ops::OpError("no such op")) == 2);
  CHECK(status_of(records::RecordsError("no records database at x.db")) == 2);
  CHECK(status_of(model::ModelError("not an ONNX model")) == 2);
  CHECK(status_of(tuner::ModelFileError("no model file")) == 2);
  CHECK(status_of(std::runtime_error("a kernel crashed")) == 1);
  CHECK(status_of(std::invalid_argument("bad triple")) == 2);
  CHECK(frontend::exit_status(frontend::ErrorKind::device) == 1);
  CHECK(frontend::exit_status(frontend::ErrorKind::terminated) == 143);
  const frontend::ClassifiedError e = frontend::classify(std::make_exception_ptr(records::RecordsError("x")));
  CHECK(e.kind == frontend::ErrorKind::records);
  CHECK(e.message == "x");
  CHECK(frontend::to_string(e.kind) == "records");
}
