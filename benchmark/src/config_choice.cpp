// Choosing the configuration `kestrel bench` times (see config_choice.h).
#include "kestrel/benchmark/config_choice.h"

#include <algorithm>
#include <cstdio>

namespace kestrel::benchmark {
namespace {

std::string fixed1(double value) {
  char text[64];
  std::snprintf(text, sizeof text, "%.1f", value);
  return text;
}

}  // namespace

ConfigChoice choose_config(const ops::Op& op, const ops::Params& params, const std::string& target,
                           const ops::TargetTraits& traits,
                           const std::vector<records::Best>& best, const records::RecordStore* db,
                           const std::string& explicit_config) {
  ConfigChoice choice;
  if (!explicit_config.empty()) {
    choice.config = ops::parse_config(op, params, explicit_config, traits);
    choice.source = "--config";
    return choice;
  }
  for (const auto& b : best) {
    if (b.op != op.name() || b.workload != params || b.target != target) continue;
    // Kestrel's own best, also when a vendor library measured faster.
    const records::Record* own = b.own();
    if (own == nullptr) break;
    const std::string recorded = ops::format_config(own->config);
    try {
      choice.config = ops::parse_config(op, params, recorded, traits);
    } catch (const ops::OpError& e) {
      // The op changed since it was tuned (a knob renamed or its domain narrowed).
      choice.detail = "the recorded best (" + recorded + ") is no longer valid: " + e.what();
      break;
    }
    if (std::string why = op.check(params, choice.config, traits); !why.empty()) {
      choice.detail = "the recorded best (" + recorded + ") is no longer valid: " + why;
      break;
    }
    choice.source = "db";
    std::size_t trials = b.trials;
    if (db) {
      auto records = db->find(b.op, b.workload, b.target, &b.device_class);
      trials = static_cast<std::size_t>(
          std::count_if(records.begin(), records.end(), [](const records::Record& r) {
            return !r.final_measurement && r.implementation == records::kKestrelImplementation;
          }));
    }
    choice.detail = "best of " + std::to_string(trials) + " trials, " + fixed1(own->gflops) + " GFLOP/s when tuned";
    return choice;
  }
  choice.config = op.default_config(params, traits);
  choice.source = "default";
  if (choice.detail.empty()) choice.detail = "no record for this workload and target";
  return choice;
}

}  // namespace kestrel::benchmark
