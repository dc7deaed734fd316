// The configuration `kestrel bench` times (see timed_config.h).
#include "kestrel/compare/timed_config.h"

#include <algorithm>
#include <cstdio>

#include "kestrel/records/config_choice.h"

namespace kestrel::compare {
namespace {

std::string fixed1(double value) {
  char text[64];
  std::snprintf(text, sizeof text, "%.1f", value);
  return text;
}

}  // namespace

TimedConfig config_to_time(const ops::Op& op, const ops::Params& params, const ops::TargetId& target,
                           const ops::TargetTraits& traits,
                           const std::vector<records::Best>& best, const records::RecordStore* db,
                           const std::string& explicit_config) {
  TimedConfig timed;
  if (!explicit_config.empty()) {
    timed.config = ops::parse_config(op, params, explicit_config, traits);
    timed.source = "--config";
    return timed;
  }
  const records::ConfigChoice choice = records::choose_config(op, params, target, traits, best);
  timed.config = choice.config;
  if (choice.source != records::ConfigSource::recorded) {
    timed.source = "default";
    timed.detail = choice.notes.empty() ? "no record for this workload and target" : choice.notes.front();
    return timed;
  }
  timed.source = "db";
  std::size_t trials = choice.best->trials;
  if (db) {
    const records::Best& b = *choice.best;
    auto found = db->find(b.op, b.workload, b.target, &b.device_class);
    trials = static_cast<std::size_t>(std::count_if(found.begin(), found.end(), [](const records::Record& r) {
      return !r.final_measurement && r.implementation == records::kKestrelImplementation;
    }));
  }
  timed.detail = "best of " + std::to_string(trials) + " trials, " + fixed1(choice.record->gflops) + " GFLOP/s when tuned";
  return timed;
}

}  // namespace kestrel::compare
