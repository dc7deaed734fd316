// The shared options (see options.h).
#include "kestrel/frontend/options.h"

#include <algorithm>
#include <cctype>
#include <optional>
#include <stdexcept>

#include "kestrel/base/suggest.h"
#include "kestrel/base/usage_error.h"
#include "kestrel/rpc/errors.h"
#include "kestrel/tuner/strategy.h"

namespace kestrel::frontend {
namespace {

constexpr std::int64_t kDay = 24LL * 3'600'000;

const std::vector<OptionSpec> kPool = {
    {"tracker", OptionKind::text, "HOST:PORT",
     "tracker to lease devices from; without it, a local tracker and device are started", "", 0, 0},
    {"key", OptionKind::text, "KEY", "device key to lease", "local", 0, 0},
    {"token-file", OptionKind::text, "FILE", "the client token (the tracker's --client-token-file, or its --token-file)",
     "", 0, 0},
    {"tls-ca", OptionKind::text, "FILE", "PEM certificate (the tracker's own, or its CA) the tracker must present", "",
     0, 0},
    {"no-tls", OptionKind::flag, "",
     "plain TCP to the tracker: frames carry per-frame MACs instead (the tracker needs --no-tls too)", "", 0, 0},
    {"wait-ms", OptionKind::integer, "MS", "how long to wait for a free device", "30000", 1, kDay},
    {"device-wait-s", OptionKind::integer, "S",
     "when every leased device is lost (stopped, rebooting, unreachable), how long to wait for one of the key to "
     "come back before stopping with an error; 0 = until interrupted",
     "300", 0, 7 * 24 * 3600},
    {"priority", OptionKind::integer, "N",
     "priority of the lease requests, -1000..1000: while clients wait for a busy key, the tracker grants the highest "
     "priority first (equal ones in arrival order)",
     "0", -1000, 1000},
};

const std::vector<OptionSpec> kTarget = {
    {"target", OptionKind::text, "TARGET",
     "auto (the device's CPU, from its registered triple), native, a triple (x86_64-linux-gnu, aarch64-linux-gnu, "
     "armv7a-linux-gnueabihf, riscv64-linux-gnu), cuda (the sm_XX of the device's CUDA GPU), cuda:sm_XX (cubin), "
     "cuda:compute_XX (PTX), or opencl; #N picks the device's Nth GPU (opencl#1)",
     "auto", 0, 0},
    {"mcpu", OptionKind::text, "CPU", "CPU to tune the code for, e.g. cortex-a72 (with a triple)", "", 0, 0},
    {"features", OptionKind::text, "FEATURES", "extra target features, e.g. +avx2", "", 0, 0},
};

const std::vector<OptionSpec> kMeasure = {
    {"number", OptionKind::integer, "N", "calls per timed round; 0 grows it until a round lasts --min-repeat-ms", "0",
     0, 100'000'000},
    {"repeat", OptionKind::integer, "N", "timed rounds", "5", 1, 10'000},
    {"min-repeat-ms", OptionKind::integer, "MS", "minimum length of a round when --number is 0", "100", 0, 600'000},
    {"cooldown-ms", OptionKind::integer, "MS", "pause between rounds", "0", 0, 600'000},
    {"flush-cache", OptionKind::flag, "", "overwrite the CPU caches before every round", "", 0, 0},
    {"timeout-ms", OptionKind::integer, "MS", "time limit per candidate on the device", "10000", 1, 3'600'000},
    {"threads", OptionKind::integer, "N", "threads the kernel may use; 0 = all cores", "0", 0, 1024},
    {"data-seed", OptionKind::integer, "N", "seed of the random input data", "1", 0, INT64_MAX},
};

const std::vector<OptionSpec> kSearch = {
    {"strategy", OptionKind::text, "NAME",
     "sa (annealing over an XGBoost cost model), anneal (model-free), ga, random, grid", "sa", 0, 0},
    {"early-stopping", OptionKind::integer, "N", "stop after N trials without improvement; 0: never", "0", 0,
     100'000'000},
    {"batch", OptionKind::integer, "N", "configurations per batch", "16", 1, 4096},
    {"seed", OptionKind::integer, "N", "seed of the search (reproducible)", "1", 0, INT64_MAX},
    {"final-top", OptionKind::integer, "N",
     "best configurations re-measured at the end beside the default; 0: none (the best recorded is the result); 2 "
     "for a model's tasks",
     "3", 0, 100},
    {"final-repeat", OptionKind::integer, "N", "their timed rounds over the first 3 interleaved passes", "15", 1,
     10'000},
    {"final-max-passes", OptionKind::integer, "N",
     "more passes (of final-repeat/3 rounds) while the best one's speed-up over the default is undecided; a "
     "configuration is recommended only when it is faster than the default with 95% confidence",
     "12", 1, 1000},
    {"vendors", OptionKind::text, "LIST",
     "vendor libraries timed on the device beside the final round, when the op has them and the device has them: "
     "all, none, or e.g. openblas,onednn",
     "all", 0, 0},
};

const std::vector<OptionSpec> kSession = {
    {"devices", OptionKind::integer, "N", "devices of the key to lease in parallel", "1", 1, 4096},
    {"compile-threads", OptionKind::integer, "N", "host compile threads; 0 = one per core", "0", 0, 256},
    {"reconnect-ms", OptionKind::integer, "MS", "how long to keep reconnecting when the tracker goes away", "120000", 0,
     kDay},
};

const std::vector<OptionSpec> kBudget = {
    {"trials", OptionKind::integer, "N",
     "total configurations to measure for this workload and target, earlier runs included", "200", 1, 100'000'000},
    {"trials-per-task", OptionKind::integer, "N",
     "with a model: at most N trials per task, earlier runs included (default: 64, no limit with a time budget)", "",
     1, 100'000'000},
    {"time-budget", OptionKind::duration, "DURATION", "the whole session's time, its final re-measurement included (when short, the tasks that weigh most are "
     "re-measured first, the others keep their best recorded), e.g. 90s, 15m or 2h", "", 0, 0},
    {"no-transfer", OptionKind::flag, "", "do not seed the cost model with records of other workloads", "", 0, 0},
};

const std::vector<OptionSpec> kCostModel = {
    {"cost-model", OptionKind::text, "FILE",
     "a cross-workload cost model (kestrel cost-model train): warm-starts the search (sa), or with --zero-shot picks "
     "without searching (default with --zero-shot: the model Kestrel ships)",
     "", 0, 0},
    {"zero-shot", OptionKind::flag, "",
     "no search: the cost model picks the configuration in seconds, measuring nothing and recording nothing (one "
     "pick per workload of a set or task of a model)",
     "", 0, 0},
    {"zero-shot-verify", OptionKind::integer, "N",
     "with --zero-shot: measure the model's top N and the default once (recorded) and keep the fastest", "0", 0, 1000},
};

std::int64_t fallback_integer(const OptionSpec& spec) {
  return spec.fallback.empty() ? 0 : std::stoll(std::string(spec.fallback));
}

bool flag_of(OptionSource& source, std::string_view name) { return source.flag(option_spec(name)); }

}  // namespace

std::string text_of(OptionSource& source, const OptionSpec& spec) {
  return source.has(spec) ? source.text(spec) : std::string(spec.fallback);
}

std::int64_t integer_of(OptionSource& source, const OptionSpec& spec) {
  if (!source.has(spec)) return fallback_integer(spec);
  const std::int64_t value = source.integer(spec);
  if (value < spec.min || value > spec.max) {
    throw UsageError(source.spell(spec) + " must be between " + std::to_string(spec.min) + " and " +
                     std::to_string(spec.max) + ", got " + std::to_string(value));
  }
  return value;
}

const std::vector<OptionSpec>& pool_option_specs() { return kPool; }
const std::vector<OptionSpec>& target_option_specs() { return kTarget; }
const std::vector<OptionSpec>& measure_option_specs() { return kMeasure; }
const std::vector<OptionSpec>& search_option_specs() { return kSearch; }
const std::vector<OptionSpec>& session_option_specs() { return kSession; }
const std::vector<OptionSpec>& budget_option_specs() { return kBudget; }
const std::vector<OptionSpec>& cost_model_option_specs() { return kCostModel; }

const OptionSpec& option_spec(std::string_view name) {
  for (const auto* list : {&kPool, &kTarget, &kMeasure, &kSearch, &kSession, &kBudget, &kCostModel}) {
    for (const OptionSpec& spec : *list) {
      if (spec.name == name) return spec;
    }
  }
  throw std::logic_error("no shared option named " + std::string(name));
}

host::PoolOptions pool_options(OptionSource& source, std::optional<rpc::Token> token, std::string client_name) {
  const OptionSpec& tracker = option_spec("tracker");
  const OptionSpec& key = option_spec("key");
  const OptionSpec& no_tls = option_spec("no-tls");
  const OptionSpec& tls_ca = option_spec("tls-ca");
  host::PoolOptions pool;
  if (source.has(tracker)) pool.tracker = endpoint_of(source, tracker);
  pool.key = text_of(source, key);
  if (!pool.tracker && pool.key != "local") {
    throw UsageError(source.spell(key) + " '" + pool.key + "' needs " + source.spell(tracker) +
                     " HOST:PORT (without a tracker a local device is used)");
  }
  pool.token = std::move(token);
  pool.tls.disabled = source.flag(no_tls);
  pool.tls.ca_file = text_of(source, tls_ca);
  if (pool.tls.disabled && !pool.tls.ca_file.empty()) {
    throw UsageError(source.spell(tls_ca) + " and " + source.spell(no_tls) + " contradict each other: drop one");
  }
  if (!pool.tracker && (pool.tls.disabled || !pool.tls.ca_file.empty())) {
    throw UsageError(source.spell(no_tls) + " and " + source.spell(tls_ca) + " apply to a tracker: give " +
                     source.spell(tracker) + " HOST:PORT");
  }
  rpc::peer_tls_context(pool.tls, pool.token.has_value());  // a bad CA file fails here, with its reason
  pool.wait = std::chrono::milliseconds(integer_of(source, option_spec("wait-ms")));
  pool.replacement_wait = std::chrono::seconds(integer_of(source, option_spec("device-wait-s")));
  pool.priority = static_cast<std::int32_t>(integer_of(source, option_spec("priority")));
  pool.client_name = std::move(client_name);
  return pool;
}

rpc::MeasureSettings measure_settings(OptionSource& source) {
  rpc::MeasureSettings m;
  m.number = static_cast<std::uint32_t>(integer_of(source, option_spec("number")));
  m.repeat = static_cast<std::uint32_t>(integer_of(source, option_spec("repeat")));
  m.min_repeat_ms = static_cast<std::uint32_t>(integer_of(source, option_spec("min-repeat-ms")));
  m.cooldown_ms = static_cast<std::uint32_t>(integer_of(source, option_spec("cooldown-ms")));
  m.flush_cache = flag_of(source, "flush-cache");
  m.timeout_ms = static_cast<std::uint32_t>(integer_of(source, option_spec("timeout-ms")));
  m.threads = static_cast<std::uint32_t>(integer_of(source, option_spec("threads")));
  m.seed = static_cast<std::uint64_t>(integer_of(source, option_spec("data-seed")));
  return m;
}

rpc::Endpoint endpoint_of(OptionSource& source, const OptionSpec& spec) {
  try {
    return rpc::parse_endpoint(text_of(source, spec));
  } catch (const rpc::RpcError& e) {  // bad_request: not HOST:PORT
    throw UsageError(source.spell(spec) + ": " + e.what());
  } catch (const std::invalid_argument& e) {
    throw UsageError(source.spell(spec) + ": " + e.what());
  }
}

std::chrono::seconds parse_duration(const std::string& option, const std::string& text) {
  if (text.empty()) throw UsageError(option + " needs a value such as 90s, 15m or 2h");
  const char unit = text.back();
  const bool has_unit = !std::isdigit(static_cast<unsigned char>(unit));
  if (has_unit && unit != 's' && unit != 'm' && unit != 'h') {
    throw UsageError(option + " '" + text + "' has an unknown unit '" + std::string(1, unit) +
                     "' (use s, m or h, e.g. 90s, 15m or 2h)");
  }
  std::string number = has_unit ? text.substr(0, text.size() - 1) : text;
  long value = 0;
  try {
    std::size_t used = 0;
    if (number.empty() || !std::isdigit(static_cast<unsigned char>(number[0]))) throw std::invalid_argument("");
    value = std::stol(number, &used);
    if (used != number.size() || value < 0) throw std::invalid_argument("");
  } catch (const std::exception&) {
    throw UsageError(option + " '" + text + "' is not a duration such as 90s, 15m or 2h");
  }
  switch (unit) {
    case 'h': return std::chrono::hours(value);
    case 'm': return std::chrono::minutes(value);
    default: return std::chrono::seconds(value);
  }
}

tuner::TuneOptions tune_options(OptionSource& source, bool model) {
  const OptionSpec& trials = option_spec("trials");
  const OptionSpec& per_task = option_spec("trials-per-task");
  const OptionSpec& budget = option_spec("time-budget");
  if (model && source.has(trials)) {
    throw UsageError("with a model, give " + source.spell(per_task) + " or " + source.spell(budget) + " (" +
                     source.spell(trials) + " is per workload)");
  }
  if (!model && source.has(per_task)) throw UsageError(source.spell(per_task) + " goes with a model");
  tuner::TuneOptions tune;
  if (source.has(budget)) tune.time_budget = source.duration(budget);
  if (!model) {
    tune.trials = static_cast<std::size_t>(integer_of(source, trials));
  } else if (source.has(per_task)) {
    tune.trials = static_cast<std::size_t>(integer_of(source, per_task));
  } else {
    tune.trials = tune.time_budget.count() > 0 ? static_cast<std::size_t>(per_task.max) : 64;
  }
  tune.transfer = !flag_of(source, "no-transfer");
  tune.strategy = checked_strategy(text_of(source, option_spec("strategy")));
  tune.early_stopping = static_cast<std::size_t>(integer_of(source, option_spec("early-stopping")));
  tune.batch_size = static_cast<std::size_t>(integer_of(source, option_spec("batch")));
  tune.seed = static_cast<std::uint64_t>(integer_of(source, option_spec("seed")));
  const OptionSpec& final_top = option_spec("final-top");
  tune.final_top = source.has(final_top) ? static_cast<std::size_t>(integer_of(source, final_top)) : model ? 2 : 3;
  tune.final_repeat = static_cast<std::uint32_t>(integer_of(source, option_spec("final-repeat")));
  tune.final_max_passes = static_cast<std::uint32_t>(integer_of(source, option_spec("final-max-passes")));
  const OptionSpec& vendors = option_spec("vendors");
  tune.vendors = checked_vendors(source.spell(vendors), text_of(source, vendors));
  tune.measure = measure_settings(source);
  return tune;
}

void apply_session_options(OptionSource& source, tuner::SessionOptions& options) {
  options.pool.devices = static_cast<unsigned>(integer_of(source, option_spec("devices")));
  options.compile_threads = static_cast<unsigned>(integer_of(source, option_spec("compile-threads")));
  options.pool.reconnect_window = std::chrono::milliseconds(integer_of(source, option_spec("reconnect-ms")));
}

host::Target TargetPolicy::resolve(const rpc::DeviceInfo& device) const {
  try {
    if (host::is_gpu_target_spec(spec) || spec == "auto") {
      host::Target target =
          host::is_gpu_target_spec(spec) ? host::gpu_target_for_device(spec, device) : host::target_for_device(device);
      if (!mcpu.empty()) target.cpu = mcpu;  // for a GPU target: of the reference kernel
      if (!features.empty()) target.features = features;
      return target;
    }
    return host::parse_target(spec, mcpu, features);
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
}

std::optional<host::Target> TargetPolicy::without_device() const {
  if (spec == "auto" || host::is_gpu_target_spec(spec)) return std::nullopt;
  try {
    return host::parse_target(spec, mcpu, features);
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
}

TargetPolicy target_policy(OptionSource& source) {
  TargetPolicy policy;
  policy.spec = text_of(source, option_spec("target"));
  policy.mcpu = text_of(source, option_spec("mcpu"));
  policy.features = text_of(source, option_spec("features"));
  return policy;
}

std::string checked_strategy(const std::string& name) {
  const auto& names = tuner::strategy_names();
  if (std::find(names.begin(), names.end(), name) != names.end()) return name;
  std::string list;
  for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
  throw UsageError("unknown strategy '" + name + "'" + did_you_mean(name, names) + " (strategies: " + list + ")");
}

std::string checked_vendors(const std::string& option, const std::string& text) {
  for (std::size_t start = 0; text != "all" && text != "none";) {
    const std::size_t comma = text.find(',', start);
    const std::string name = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (name.empty() || name.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789_-") != std::string::npos) {
      throw UsageError(option + " '" + text + "' is not all, none or a list of libraries such as openblas,onednn");
    }
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return text;
}

}  // namespace kestrel::frontend
