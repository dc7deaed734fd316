// Choosing the configuration that stands for a task (see config_choice.h).
#include "kestrel/records/config_choice.h"

namespace kestrel::records {

std::string_view to_string(ConfigSource source) {
  switch (source) {
    case ConfigSource::recorded: return "recorded";
    case ConfigSource::fallback: return "fallback";
    case ConfigSource::default_config: return "default";
  }
  return "default";
}

ConfigChoice choose_config(const ops::Op& op, const ops::Params& params, const ops::TargetId& target,
                           const ops::TargetTraits& traits, const std::vector<Best>& bests,
                           const ChoiceRules& rules) {
  ConfigChoice choice;
  const ops::Params workload = ops::normalize_params(op, params);
  bool chosen_exact = false;
  for (const Best& best : bests) {
    if (best.op != op.name()) continue;
    const bool exact = best.target == target;
    const bool same_triple = !target.is_gpu() && !best.target.is_gpu() && best.target.triple == target.triple;
    if (!exact && !(rules.same_triple && same_triple)) continue;
    if (!rules.device_key.empty() && best.device_class.key != rules.device_key) continue;
    if (ops::normalize_params(op, best.workload) != workload) continue;
    const Record* own = best.own();
    if (own == nullptr) continue;  // only vendor libraries measured it
    // The record must still describe a point of the op's space on this target: the op
    // may have changed since (a knob renamed, a domain narrowed), or the record may be of
    // another CPU of the triple.
    const std::string recorded = ops::format_config(own->config);
    std::string why;
    try {
      ops::parse_config(op, params, recorded, traits);
      why = op.check(params, own->config, traits);
    } catch (const ops::OpError& e) {
      why = e.what();
    }
    if (!why.empty()) {
      choice.notes.push_back("the recorded best of " + best.target.to_string() + " (" + recorded +
                             ") is no longer valid for " + target.to_string() + ": " + why);
      continue;
    }
    const bool better = choice.record == nullptr || (exact && !chosen_exact) ||
                        (exact == chosen_exact && own->gflops > choice.record->gflops);
    if (better) {
      choice.best = &best;
      choice.record = own;
      chosen_exact = exact;
    }
  }
  if (choice.record != nullptr) {
    choice.config = choice.record->config;
    choice.source = ConfigSource::recorded;
    return choice;
  }
  if (rules.fallback) {
    if (std::optional<ops::Config> proposed = rules.fallback(choice.notes)) {
      choice.config = std::move(*proposed);
      choice.source = ConfigSource::fallback;
      return choice;
    }
  }
  choice.config = op.default_config(params, traits);
  choice.source = ConfigSource::default_config;
  return choice;
}

}  // namespace kestrel::records
