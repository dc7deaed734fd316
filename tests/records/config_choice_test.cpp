// Tests of records::choose_config: which configuration stands for a task, the one rule
// bench, export, run and Python follow.
#include "kestrel/records/config_choice.h"

#include <catch2/catch.hpp>

#include "support/traits.h"

namespace {

using kestrel::ops::Config;
using kestrel::records::Best;
using kestrel::records::ChoiceRules;
using kestrel::records::ConfigSource;
using kestrel::records::Record;
using kestrel::records::choose_config;
namespace ops = kestrel::ops;
namespace test = kestrel::test;

struct Gemm {
  ops::Registry registry = ops::builtin_ops();
  const ops::Op& op = registry.get("gemm");
  ops::Params params = ops::parse_params(op, "24x20x16");
  Config fallback = op.default_config(params, test::fixed_traits());
  // A valid configuration other than the default.
  Config other() const {
    for (const auto& knob : op.knobs(params)) {
      for (auto value : knob.values) {
        Config c = fallback;
        c[knob.name] = value;
        if (c != fallback && op.check(params, c, test::fixed_traits()).empty()) return c;
      }
    }
    FAIL("gemm 24x20x16 has a single valid configuration");
    return fallback;
  }
};

ops::TargetId id(const std::string& text) { return *ops::TargetId::parse(text); }

Best best_of(const Gemm& g, const std::string& target, const Config& config, double gflops, const std::string& key = "k") {
  Best b;
  b.op = "gemm";
  b.workload = g.params;
  b.target = id(target);
  b.device_class.key = key;
  b.record.config = config;
  b.record.gflops = gflops;
  b.record.target = id(target);
  b.trials = 12;
  return b;
}

}  // namespace

TEST_CASE("records: choose_config takes the exact target's own best, else the default", "[records][choice]") {
  Gemm g;
  const Config other = g.other();
  const std::vector<Best> bests = {best_of(g, "x86_64-linux-gnu (znver3)", other, 50),
                                   best_of(g, "x86_64-linux-gnu", g.fallback, 90)};
  auto c = choose_config(g.op, g.params, id("x86_64-linux-gnu (znver3)"), test::fixed_traits(), bests);
  CHECK(c.source == ConfigSource::recorded);
  CHECK(c.config == other);
  REQUIRE(c.best != nullptr);
  CHECK(c.best->target == id("x86_64-linux-gnu (znver3)"));
  // Another CPU of the triple does not count unless the rules say so.
  c = choose_config(g.op, g.params, id("x86_64-linux-gnu (znver4)"), test::fixed_traits(), bests);
  CHECK(c.source == ConfigSource::default_config);
  CHECK(c.config == g.fallback);
  CHECK(c.record == nullptr);
  CHECK(to_string(c.source) == "default");
}

TEST_CASE("records: choose_config over a triple prefers the exact target, then the fastest", "[records][choice]") {
  Gemm g;
  const Config other = g.other();
  std::vector<Best> bests = {best_of(g, "x86_64-linux-gnu (znver3)", other, 50),
                             best_of(g, "x86_64-linux-gnu (skylake)", g.fallback, 90),
                             best_of(g, "aarch64-linux-gnu", other, 500)};
  ChoiceRules rules;
  rules.same_triple = true;
  auto c = choose_config(g.op, g.params, id("x86_64-linux-gnu (znver4)"), test::fixed_traits(), bests,
                         rules);
  CHECK(c.source == ConfigSource::recorded);
  CHECK(c.best->target == id("x86_64-linux-gnu (skylake)"));  // the fastest of the triple; never aarch64's
  c = choose_config(g.op, g.params, id("x86_64-linux-gnu (znver3)"), test::fixed_traits(), bests, rules);
  CHECK(c.best->target == id("x86_64-linux-gnu (znver3)"));  // exact beats faster
  rules.device_key = "other-key";
  c = choose_config(g.op, g.params, id("x86_64-linux-gnu (znver3)"), test::fixed_traits(), bests, rules);
  CHECK(c.source == ConfigSource::default_config);
}

TEST_CASE("records: choose_config passes over vendor-only and stale records, saying why, and asks the fallback",
          "[records][choice]") {
  Gemm g;
  const Config other = g.other();
  Best vendor = best_of(g, "t", Config{}, 300);
  vendor.record.implementation = "openblas";  // no own record beside it
  Best stale = best_of(g, "t", other, 80);
  stale.record.config["no_such_knob"] = 1;
  const std::vector<Best> bests = {vendor, stale};
  auto c = choose_config(g.op, g.params, id("t"), test::fixed_traits(), bests);
  CHECK(c.source == ConfigSource::default_config);
  REQUIRE(c.notes.size() == 1);
  CHECK_THAT(c.notes[0], Catch::StartsWith("the recorded best of t (") && Catch::Contains("is no longer valid"));

  ChoiceRules rules;
  int asked = 0;
  rules.fallback = [&](std::vector<std::string>& notes) -> std::optional<Config> {
    ++asked;
    notes.push_back("picked by the test");
    return other;
  };
  c = choose_config(g.op, g.params, id("t"), test::fixed_traits(), bests, rules);
  CHECK(asked == 1);
  CHECK(c.source == ConfigSource::fallback);
  CHECK(c.config == other);
  CHECK(c.notes.size() == 2);

  // A vendor best with Kestrel's own beside it: the own one stands for the task.
  vendor.own_record = vendor.record;
  vendor.own_record->implementation = "kestrel";
  vendor.own_record->config = other;
  vendor.own_record->gflops = 100;
  c = choose_config(g.op, g.params, id("t"), test::fixed_traits(), {vendor}, rules);
  CHECK(c.source == ConfigSource::recorded);
  CHECK(c.config == other);
  CHECK(asked == 1);
}
