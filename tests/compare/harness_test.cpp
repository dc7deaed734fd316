// The bench harness: which configuration it times, how it compares with a library, and
// whole runs on a small gemm (a good kernel is timed, a wrong one never is).
#include "support/traits.h"
#include "kestrel/compare/harness.h"

#include <catch2/catch.hpp>
#include <fstream>
#include <sstream>

#include "kestrel/ops/op.h"

using namespace kestrel;
using namespace kestrel::compare;

namespace {

struct Gemm {
  ops::Registry registry = ops::builtin_ops();
  const ops::Op& op = registry.get("gemm");
  ops::Params params = ops::parse_params(op, "24x20x16");
};

records::Best best_of(const Gemm& g, const std::string& target, const std::string& config, double gflops) {
  records::Best b;
  b.op = "gemm";
  b.workload = g.params;
  b.target = *ops::TargetId::parse(target);
  b.record.config = ops::parse_config(g.op, g.params, config, test::fixed_traits());
  b.record.gflops = gflops;
  b.trials = 12;
  return b;
}

Options quick(const Gemm& g) {
  Options options;
  options.workloads.push_back({"small", &g.op, g.params});
  options.threads = {1};
  options.timing.repeat = 3;
  options.timing.min_round_s = 0.002;
  options.timing.settle_s = 0.0;
  options.target = host::parse_target("native");
  return options;
}

}  // namespace

TEST_CASE("the bench times the given config, else the target's best record, else the default", "[compare]") {
  Gemm g;
  const std::string config = ops::format_config(g.op.default_config(g.params, test::fixed_traits()));
  TimedConfig given = config_to_time(g.op, g.params, *ops::TargetId::parse("x"), test::fixed_traits(), {}, nullptr, config);
  CHECK(given.source == "--config");
  CHECK(ops::format_config(given.config) == config);

  TimedConfig none = config_to_time(g.op, g.params, *ops::TargetId::parse("x"), test::fixed_traits(), {}, nullptr, "");
  CHECK(none.source == "default");
  CHECK(none.config == g.op.default_config(g.params, test::fixed_traits()));
  CHECK(none.detail == "no record for this workload and target");

  std::vector<records::Best> best = {best_of(g, "other-target", config, 1.0), best_of(g, "x", config, 95.14)};
  TimedConfig recorded = config_to_time(g.op, g.params, *ops::TargetId::parse("x"), test::fixed_traits(), best, nullptr, "");
  CHECK(recorded.source == "db");
  CHECK(recorded.detail == "best of 12 trials, 95.1 GFLOP/s when tuned");
  CHECK(config_to_time(g.op, g.params, *ops::TargetId::parse("y"), test::fixed_traits(), best, nullptr, "").source == "default");

  // A record whose knob no longer exists falls back to the default, saying why.
  best[1].record.config["no_such_knob"] = 1;
  TimedConfig stale = config_to_time(g.op, g.params, *ops::TargetId::parse("x"), test::fixed_traits(), best, nullptr, "");
  CHECK(stale.source == "default");
  CHECK_THAT(stale.detail, Catch::StartsWith("the recorded best of x (") && Catch::Contains("is no longer valid"));

  CHECK_THROWS_AS(config_to_time(g.op, g.params, *ops::TargetId::parse("x"), test::fixed_traits(), {}, nullptr, "no_such_knob=1"), ops::OpError);
}

TEST_CASE("the speed ratio is the median of the per-round ratios", "[compare]") {
  Timing kestrel, library;
  kestrel.rounds = {1.0, 2.0, 1.0};
  kestrel.median_s = 1.0;
  library.rounds = {2.0, 2.0, 3.0};  // ratios 2, 1, 3
  library.median_s = 2.0;
  REQUIRE(speed_ratio(kestrel, &library));
  CHECK(*speed_ratio(kestrel, &library) == Approx(2.0));
  library.rounds = {2.0, 2.0};  // different round counts: ratio of the medians
  CHECK(*speed_ratio(kestrel, &library) == Approx(2.0));
  library.status = "wrong answer: ...";
  CHECK_FALSE(speed_ratio(kestrel, &library));
  CHECK_FALSE(speed_ratio(kestrel, nullptr));
}

TEST_CASE("the bench checks Kestrel's kernel, then times it interleaved with the libraries", "[compare]") {
  Gemm g;
  Options options = quick(g);
  std::vector<std::string> seen;
  options.on_workload = [&](const ops::Workload& w, unsigned t) { seen.push_back(w.label + "/" + std::to_string(t)); };
  Report report = run(options);
  CHECK(seen == std::vector<std::string>{"small/1"});
  REQUIRE(report.workloads.size() == 1);
  CHECK(report.workloads[0].choice.source == "default");
  REQUIRE(report.workloads[0].problem);
  CHECK(report.workloads[0].problem->kind == Problem::Kind::gemm);
  REQUIRE(report.rows.size() == 1);
  const Row& row = report.rows[0];
  INFO(row.kestrel.status);
  CHECK(row.kestrel.status == "ok");
  CHECK(row.kestrel.rounds.size() == 3);
  CHECK(row.kestrel.calls_per_round >= 1);
  CHECK(row.kestrel.gflops > 0);
  // Checked against the first library, or the op's reference kernel without one.
  CHECK_FALSE(row.checked_against.empty());
  for (const auto& [name, t] : row.libraries) {
    INFO(name << ": " << t.status);
    CHECK(t.status == "ok");
    CHECK(t.rounds.size() == 3);
    CHECK(speed_ratio(row.kestrel, &t));
  }
}

TEST_CASE("the bench never times a kernel that computes the wrong answer", "[compare][bad-input]") {
  Gemm g;
  Options options = quick(g);
  std::ifstream in(KESTREL_E2E_FIXTURE_DIR "/wrong_gemm.c");
  REQUIRE(in);
  std::stringstream text;
  text << in.rdbuf();
  options.kernel_text = text.str();
  options.kernel_path = "wrong_gemm.c";
  Report report = run(options);
  REQUIRE(report.rows.size() == 1);
  CHECK(report.workloads[0].choice.source == "file");
  const Timing& kestrel = report.rows[0].kestrel;
  CHECK_THAT(kestrel.status, Catch::StartsWith("wrong answer: max error ") && Catch::Contains("exceeds tolerance") &&
                                 Catch::Contains("; first: element "));
  CHECK(kestrel.rounds.empty());
  CHECK_FALSE(speed_ratio(kestrel, nullptr));
}

TEST_CASE("the bench compares batch_matmul and gemm with an epilogue with the libraries", "[compare]") {
  // Transposed operands and a fused epilogue reach the libraries as the same computation:
  // every contender's output is checked against the first one's (and Kestrel's).
  ops::Registry registry = ops::builtin_ops();
  const ops::Op& bmm = registry.get("batch_matmul");
  const ops::Op& gemm = registry.get("gemm");
  Options options;
  options.workloads.push_back({"qk", &bmm, ops::parse_params(bmm, "batch=3,M=20,N=20,K=16,trans_b=1")});
  options.workloads.push_back({"ta", &bmm, ops::parse_params(bmm, "batch=2,M=12,N=9,K=7,trans_a=1")});
  options.workloads.push_back({"dense", &gemm, ops::parse_params(gemm, "M=24,N=20,K=16,bias=1,residual=1,act=3")});
  options.threads = {1};
  options.timing.repeat = 3;
  options.timing.min_round_s = 0.002;
  options.timing.settle_s = 0.0;
  options.target = host::parse_target("native");
  Report report = run(options);
  REQUIRE(report.rows.size() == 3);
  for (std::size_t i = 0; i < 3; ++i) {
    REQUIRE(report.workloads[i].problem);
    const Row& row = report.rows[i];
    INFO(report.workloads[i].workload.label << ": " << row.kestrel.status);
    CHECK(row.kestrel.status == "ok");
    CHECK_FALSE(row.checked_against.empty());
    for (const auto& [name, t] : row.libraries) {
      INFO(name << ": " << t.status);
      CHECK(t.status == "ok");
    }
  }
  CHECK(report.workloads[0].problem->kind == Problem::Kind::batch_matmul);
  CHECK(report.workloads[0].problem->trans_b);
  CHECK(report.workloads[1].problem->trans_a);
  CHECK(report.workloads[2].problem->kind == Problem::Kind::gemm);
  CHECK(report.workloads[2].problem->act == 3);
  // Parameters the libraries do not know are not compared.
  CHECK_FALSE(problem_for(bmm, {{"batch", 2}, {"M", 3}, {"N", 4}, {"K", 5}, {"groups", 2}}));
}
