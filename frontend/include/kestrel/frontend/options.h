// The options every front end shares, declared once: where the devices are (the pool),
// how to measure, which target to compile for, and how a tuning session searches. A
// command reads them from its command line (tools/options_source.h), Python from a
// call's keywords (python/src/measure.cpp); both through OptionSource, so defaults,
// ranges, cross-checks and their messages are the same (spelled as the user wrote them:
// "--wait-ms" on the command line, "wait_ms" in Python).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kestrel/host/leased_pool.h"
#include "kestrel/host/target.h"
#include "kestrel/rpc/measure.h"
#include "kestrel/tuner/session.h"
#include "kestrel/tuner/tuning_loop.h"

namespace kestrel::frontend {

// duration: "90s", "15m", "2h" (or a bare number of seconds) on a command line; in
// Python also a number of seconds.
enum class OptionKind { text, integer, flag, duration };

struct OptionSpec {
  std::string_view name;        // as a command spells it without "--": "wait-ms" (Python: wait_ms)
  OptionKind kind = OptionKind::text;
  std::string_view value_name;  // "MS"; empty for flags
  std::string_view help;
  std::string_view fallback;    // the default as text ("30000"); empty: none
  std::int64_t min = 0;         // integers: the range
  std::int64_t max = 0;
};

// Where a front end's values come from. The source checks the value's type (a command
// line's text must be an integer for an integer option, a Python value an int); ranges,
// defaults and cross-checks are the readers' below.
class OptionSource {
 public:
  virtual ~OptionSource() = default;
  virtual bool has(const OptionSpec& spec) = 0;
  virtual std::string text(const OptionSpec& spec) = 0;        // when has()
  virtual std::int64_t integer(const OptionSpec& spec) = 0;    // when has(); throws UsageError when not one
  virtual bool flag(const OptionSpec& spec) = 0;
  virtual std::chrono::seconds duration(const OptionSpec& spec) = 0;  // when has(); throws UsageError when not one
  // How the user wrote the option: "--wait-ms" or "wait_ms".
  virtual std::string spell(const OptionSpec& spec) const = 0;
};

// The value of `spec` given, else its fallback ("" / 0 without one). integer_of throws
// UsageError naming the option when the value is outside [min, max].
std::string text_of(OptionSource& source, const OptionSpec& spec);
std::int64_t integer_of(OptionSource& source, const OptionSpec& spec);

// --tracker, --key, --token-file, --tls-ca, --no-tls, --wait-ms, --device-wait-s, --priority.
const std::vector<OptionSpec>& pool_option_specs();
// --target, --mcpu, --features.
const std::vector<OptionSpec>& target_option_specs();
// --number, --repeat, --min-repeat-ms, --cooldown-ms, --flush-cache, --timeout-ms, --threads, --data-seed.
const std::vector<OptionSpec>& measure_option_specs();
// --strategy, --early-stopping, --batch, --seed, --final-top, --final-repeat,
// --final-max-passes, --vendors: how a tuning session searches and re-measures.
const std::vector<OptionSpec>& search_option_specs();
// --devices, --compile-threads, --reconnect-ms: how a session leases and compiles.
const std::vector<OptionSpec>& session_option_specs();
// --trials, --trials-per-task, --time-budget, --no-transfer: how much a session tunes.
const std::vector<OptionSpec>& budget_option_specs();
// --cost-model, --zero-shot, --zero-shot-verify: a cost model as prior or as the picker
// (read by frontend::cost_model_use, tune_setup.h).
const std::vector<OptionSpec>& cost_model_option_specs();
// The spec of one of the above by name (a bug when there is none: std::logic_error).
const OptionSpec& option_spec(std::string_view name);

// The pool the options name: a tracker's (with its token and TLS) or, without --tracker,
// the embedded local pool. `token` is the client token when the front end read one (a
// file, or Python's token=); `client_name` is how the tracker shows this client. Throws
// UsageError for contradictions (--key without --tracker, --no-tls with --tls-ca, TLS
// options without a tracker, an unreadable --tls-ca).
host::PoolOptions pool_options(OptionSource& source, std::optional<rpc::Token> token, std::string client_name);
rpc::MeasureSettings measure_settings(OptionSource& source);
// The endpoint `spec` gives (its fallback when not given); UsageError naming the option
// for a malformed address.
rpc::Endpoint endpoint_of(OptionSource& source, const OptionSpec& spec);

// "90s", "15m", "2h" or a number of seconds; UsageError naming `option` otherwise.
std::chrono::seconds parse_duration(const std::string& option, const std::string& text);

// The search, budget and measuring options as a session's TuneOptions. For a model's
// tasks (`model`), --trials-per-task bounds each task (64 unless a time budget is given)
// and --final-top defaults to 2; for a workload, --trials (200). UsageError for
// --trials with a model and --trials-per-task without one.
tuner::TuneOptions tune_options(OptionSource& source, bool model = false);
// The session options (devices, compile threads, reconnect window) onto `options`.
void apply_session_options(OptionSource& source, tuner::SessionOptions& options);

// Which compile target a leased device gets: "auto" (the device's CPU, from its
// registered triple), "native", a triple, or a GPU spec of the device ("cuda",
// "cuda:sm_XX", "cuda:compute_XX", "opencl", "#N" for its Nth GPU); an -mcpu and
// features on top (for GPU targets, of the reference kernel's CPU target).
struct TargetPolicy {
  std::string spec = "auto";
  std::string mcpu;
  std::string features;
  // Throws UsageError when the device cannot take the spec (saying what it has).
  host::Target resolve(const rpc::DeviceInfo& device) const;
  // The target when it is known without a device ("native" or a triple; not auto or a GPU).
  std::optional<host::Target> without_device() const;
};
TargetPolicy target_policy(OptionSource& source);

// A strategy's name checked against tuner::strategy_names(); UsageError listing them
// (and naming the closest) otherwise.
std::string checked_strategy(const std::string& name);
// The vendors option: "all", "none" or a comma-separated list of library names;
// UsageError naming `option` otherwise.
std::string checked_vendors(const std::string& option, const std::string& text);

}  // namespace kestrel::frontend
