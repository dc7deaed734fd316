// The kernels a planned model runs with (see model_kernels.h).
#include "kestrel/deploy/model_kernels.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "kestrel/base/usage_error.h"
#include "kestrel/records/config_choice.h"
#include "kestrel/records/records.h"

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
  if (source.records) {
    const auto db = records::open_records(*source.records, records::OpenMode::existing);
    const std::vector<records::Best> bests = db->best();
    records::ChoiceRules rules;
    rules.same_triple = true;
    rules.device_key = source.device_key;
    for (const model::ModelTask& task : plan.tasks) {
      const records::ConfigChoice choice = records::choose_config(*task.op, task.params, target.id(), target.traits, bests, rules);
      for (const std::string& note : choice.notes) kernels.notes.push_back(task.key() + ": " + note);
      if (choice.source == records::ConfigSource::recorded) configs[task.key()] = choice.config;
    }
    kernels.description = "compiled here: " + std::to_string(configs.size()) + " of " + std::to_string(plan.tasks.size()) +
                          " tasks at their best record in " + db->location() + ", the rest at the ops' defaults (" +
                          target.to_string() + ")";
  } else {
    kernels.description = "compiled here at the ops' default configurations (" + target.to_string() + ")";
  }
  kernels.provider = std::make_unique<CompiledKernels>(threads, std::move(configs));
  return kernels;
}

}  // namespace kestrel::deploy
