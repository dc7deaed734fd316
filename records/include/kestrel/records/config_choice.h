// Which configuration stands for a task when Kestrel builds its kernel, decided in one
// place for every reader of the records: `kestrel bench`, `kestrel export` (and Python's
// export), `kestrel run --db`.
//
// The rule: Kestrel's own best record of the task (Best::own(): the recommendation of the
// newest final round, else the fastest; never a vendor library's, which has no
// configuration) when its configuration is still valid for the op and the target; else
// what the caller's fallback proposes (the zero-shot cost model's pick); else the op's
// default.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kestrel/ops/op.h"
#include "kestrel/records/records.h"

namespace kestrel::records {

enum class ConfigSource {
  recorded,        // the task's best own record
  fallback,        // the caller's fallback (the cost model's pick)
  default_config,  // the op's default for the target
};
// "recorded", "fallback", "default".
std::string_view to_string(ConfigSource source);

// Which records may stand for the task.
struct ChoiceRules {
  // Records of another CPU of the target's triple fit too (a library exported for a
  // family of boards): the exact target is preferred, then the fastest. Otherwise only
  // records of the exact target count.
  bool same_triple = false;
  // Only records measured on devices of this key, when not empty.
  std::string device_key;
  // Asked when no record fits: a configuration to use instead (valid for the task), or
  // nothing for the op's default. It may add notes (why it had nothing).
  std::function<std::optional<ops::Config>(std::vector<std::string>& notes)> fallback;
};

struct ConfigChoice {
  ops::Config config;
  ConfigSource source = ConfigSource::default_config;
  // The chosen Best and its own record when source is recorded (borrowed from the
  // `bests` given to choose_config: valid while they are).
  const Best* best = nullptr;
  const Record* record = nullptr;
  // Records passed over and why ("the recorded best (tile=9) is no longer valid: ..."),
  // and the fallback's notes.
  std::vector<std::string> notes;
};

// The configuration of `op` at `params` for `target` (host::Target::id()), whose code has
// `traits`, chosen from `bests` (what RecordStore::best() returned) by the rule above.
// Workloads are compared normalized (ops::normalize_params). Never throws for a stale
// record: it is noted and passed over.
ConfigChoice choose_config(const ops::Op& op, const ops::Params& params, const ops::TargetId& target,
                           const ops::TargetTraits& traits, const std::vector<Best>& bests,
                           const ChoiceRules& rules = {});

}  // namespace kestrel::records
