// Setting a tuning session up (see tune_setup.h).
#include "kestrel/frontend/tune_setup.h"

#include <cstdlib>
#include <filesystem>
#include <system_error>
#include <vector>

#include "kestrel/base/usage_error.h"
#include "kestrel/frontend/model_jobs.h"
#include "kestrel/tuner/zero_shot.h"

namespace kestrel::frontend {

namespace fs = std::filesystem;

std::int64_t checked_block(const std::string& option, std::int64_t block) {
  if (block != 0 && block != 4 && block != 8 && block != 16) throw UsageError(option + " must be 4, 8 or 16");
  return block;
}

void tune_model_tasks(tuner::SessionOptions& options, std::shared_ptr<const model::Model> model,
                      std::vector<model::Binding> buckets, std::int64_t block, const ops::Registry& registry,
                      std::function<void(const std::vector<tuner::TuneJob>&, const host::Target&)> on_jobs,
                      bool winograd) {
  // Nothing to tune is an error before a device is leased (the jobs are made again for
  // the leased device's target).
  model_jobs(*model, buckets, block, registry, host::parse_target("native", ""), winograd);
  options.scheduled = true;
  options.time_budget = options.tune.time_budget;
  options.make_jobs = [model, buckets = std::move(buckets), block, &registry, on_jobs = std::move(on_jobs),
                       winograd](const host::Target& target) {
    std::vector<tuner::TuneJob> jobs = model_jobs(*model, buckets, block, registry, target, winograd);
    if (on_jobs) on_jobs(jobs, target);
    return jobs;
  };
}

namespace {

// Where the shipped model may be, in the order they are tried.
std::vector<fs::path> shipped_cost_model_candidates() {
  std::vector<fs::path> out;
  if (const char* env = std::getenv("KESTREL_COST_MODEL"); env && *env) {
    out.emplace_back(env);
    return out;  // the user's choice: no fallback behind it
  }
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) out.push_back(self.parent_path().parent_path() / "share" / "kestrel" / "cost-model.kcm");
  out.push_back(fs::path(KESTREL_SOURCE_DIR) / "share" / "cost-model" / "kestrel.kcm");
  return out;
}

}  // namespace

std::string shipped_cost_model_path() {
  for (const fs::path& candidate : shipped_cost_model_candidates()) {
    std::error_code ec;
    if (fs::is_regular_file(candidate, ec)) return candidate.string();
  }
  return {};
}

std::string shipped_cost_model_places() {
  std::string out;
  for (const fs::path& candidate : shipped_cost_model_candidates()) out += (out.empty() ? "" : ", ") + candidate.string();
  return out;
}

CostModelUse load_cost_model(const std::string& file, bool zero_shot, const std::string& zero_shot_option,
                             const std::string& file_option) {
  CostModelUse use;
  use.zero_shot = zero_shot;
  use.path = file;
  if (use.path.empty() && zero_shot) {
    use.path = shipped_cost_model_path();
    if (use.path.empty()) {
      throw tuner::ModelFileError(zero_shot_option + " without " + file_option +
                                  " uses the cost model Kestrel ships, and there is none at " +
                                  shipped_cost_model_places() + " (set KESTREL_COST_MODEL or give " + file_option + ")");
    }
  }
  if (!use.path.empty()) use.model = std::make_shared<const tuner::CrossModel>(tuner::CrossModel::load(use.path));
  return use;
}

CostModelUse cost_model_use(OptionSource& source) {
  const OptionSpec& file = option_spec("cost-model");
  const OptionSpec& zero_shot = option_spec("zero-shot");
  const OptionSpec& verify = option_spec("zero-shot-verify");
  const bool picks = source.flag(zero_shot);
  if (source.has(verify) && !picks) {
    throw UsageError(source.spell(verify) + " goes with " + source.spell(zero_shot));
  }
  // Loaded now: a missing or foreign file fails before anything starts.
  CostModelUse use = load_cost_model(source.has(file) ? source.text(file) : std::string(), picks,
                                     source.spell(zero_shot), source.spell(file));
  use.zero_shot_verify = static_cast<std::size_t>(integer_of(source, verify));
  return use;
}

bool measures(const CostModelUse& use) { return !use.zero_shot || use.zero_shot_verify > 0; }

void use_cost_model(tuner::SessionOptions& options, const CostModelUse& use, const TargetPolicy& target,
                    const ops::Op* single_op, const ops::Registry& registry) {
  options.tune.prior_model = use.model;
  options.tune.zero_shot = use.zero_shot;
  options.tune.zero_shot_verify = use.zero_shot_verify;
  auto check = [model = use.model, path = use.path, single_op, &registry](const host::Target& t) {
    if (!model || single_op == nullptr) return;
    const ops::Op& op = registry.get(single_op->name(), t.backend);
    if (std::string missing = tuner::missing_model(*model, op.name(), t); !missing.empty()) {
      throw tuner::ModelFileError(path + ": " + missing);
    }
  };
  options.choose_target = [target, check](const rpc::DeviceInfo& device) {
    host::Target t = target.resolve(device);
    check(t);
    return t;
  };
  if (use.zero_shot && use.zero_shot_verify == 0) {
    // Nothing is measured, so no pool starts when the target is known without a device:
    // named (native or a triple), or this machine's (the embedded pool's device). A GPU
    // target, or a tracker's device with target auto, is leased only to learn the target.
    TargetPolicy known = target;
    if (known.spec == "auto" && !options.pool.tracker) known.spec = "native";
    if (std::optional<host::Target> t = known.without_device()) {
      check(*t);
      options.target = std::move(t);
    }
  }
}

std::unique_ptr<records::RecordStore> open_session_records(const std::string& location, bool measures) {
  if (measures) return records::open_records(location);  // fails early on a bad file
  if (records::records_exist(location)) return records::open_records(location, records::OpenMode::existing);
  return records::open_records(":memory:");
}

}  // namespace kestrel::frontend
