// The kernels a planned model runs with (see model_kernels.h).
#include "kestrel/deploy/model_kernels.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "kestrel/base/usage_error.h"
#include "kestrel/records/config_choice.h"
#include "kestrel/records/records.h"
#include "zero_shot_choice.h"

namespace kestrel::deploy {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The block the exported library's convolutions were built for (its manifest).
std::int64_t manifest_block(const std::string& dir) {
  fs::path path = fs::path(dir) / "manifest.json";
  if (!fs::exists(path)) throw UsageError("no " + path.string() + ": is " + dir + " the output of kestrel export?");
  try {
    json m = json::parse(read_text(path));
    return m.at("block").get<std::int64_t>();
  } catch (const json::exception& e) {
    throw UsageError("cannot read the block from " + path.string() + ": " + e.what());
  }
}

}  // namespace

std::int64_t plan_block(const KernelSource& source, const ops::TargetTraits& traits) {
  return source.exported ? manifest_block(*source.exported) : model::default_block(traits);
}

ModelKernels model_kernels(const KernelSource& source, const model::Plan& plan,
                           const host::Target& target, unsigned threads) {
  ModelKernels kernels;
  if (source.exported) {
    auto lib = std::make_unique<ExportedLibrary>(*source.exported, threads);
    kernels.description = lib->path();
    kernels.provider = std::move(lib);
    return kernels;
  }
  std::map<std::string, ops::Config> configs;
  if (source.records || source.cost_model) {
    std::vector<records::Best> bests;
    std::string location;
    if (source.records) {
      const auto db = records::open_records(*source.records, records::OpenMode::existing);
      bests = db->best();
      location = db->location();
    }
    records::ChoiceRules rules;
    rules.same_triple = true;
    rules.device_key = source.device_key;
    std::set<std::string> unmodelled;
    std::size_t recorded = 0, picked = 0;
    for (const model::ModelTask& task : plan.tasks) {
      if (source.cost_model) {
        rules.fallback = [&](std::vector<std::string>& notes) {
          return detail::zero_shot_choice(*source.cost_model, *task.op, task.params, target, unmodelled, notes);
        };
      }
      const records::ConfigChoice choice = records::choose_config(*task.op, task.params, target.id(), target.traits, bests, rules);
      for (const std::string& note : choice.notes) kernels.notes.push_back(task.key() + ": " + note);
      if (choice.source == records::ConfigSource::default_config) continue;
      configs[task.key()] = choice.config;
      ++(choice.source == records::ConfigSource::recorded ? recorded : picked);
    }
    const std::string of = " of " + std::to_string(plan.tasks.size()) + " tasks";
    std::string text = "compiled here: ";
    if (source.records) text += std::to_string(recorded) + of + " at their best record in " + location + ", ";
    if (source.cost_model) {
      text += std::to_string(picked) + (source.records ? std::string() : of) + " at the cost model's zero-shot pick, ";
    }
    kernels.description = text + "the rest at the ops' defaults (" + target.to_string() + ")";
  } else {
    kernels.description = "compiled here at the ops' default configurations (" + target.to_string() + ")";
  }
  kernels.provider = std::make_unique<CompiledKernels>(threads, std::move(configs));
  return kernels;
}

}  // namespace kestrel::deploy
