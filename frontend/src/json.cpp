// The JSON forms of results (see json.h).
#include "kestrel/frontend/json.h"

#include <chrono>
#include <string>

#include "kestrel/kernel/status.h"
#include "kestrel/ops/op.h"

namespace kestrel::frontend {

nlohmann::json to_json(const tuner::FinalEntry& f, double flops) {
  nlohmann::json out = {{"config", ops::format_config(f.config)},
                        {"median_s", f.median_s},
                        {"gflops", f.gflops(flops)},
                        {"status", std::string(kernel::to_string(f.status))},
                        {"spread", f.spread},
                        {"noisy", f.noisy},
                        {"is_default", f.is_default},
                        {"implementation", f.implementation},
                        {"recommended", f.recommended}};
  if (f.speedup > 0) {
    out["speedup"] = f.speedup;
    out["speedup_low"] = f.speedup_low;
    out["speedup_high"] = f.speedup_high;
  }
  return out;
}

nlohmann::json to_json(const tuner::TuneResult& result) {
  nlohmann::json zero_shot = nullptr;
  if (result.zero_shot) {
    const tuner::TuneResult::ZeroShot& z = *result.zero_shot;
    nlohmann::json picks = nlohmann::json::array();
    for (const ops::Config& pick : z.picks) picks.push_back(ops::format_config(pick));
    zero_shot = {{"pick", z.picks.empty() ? std::string() : ops::format_config(z.picks.front())},
                 {"picks", picks},
                 {"seconds", z.seconds},
                 {"scored", z.scored},
                 {"fallback", z.fallback}};
  }
  nlohmann::json final = nlohmann::json::array();
  for (const auto& f : result.final) final.push_back(to_json(f, result.flops));
  nlohmann::json out = {{"session", result.session},         {"op", result.op},
                        {"workload", result.workload},       {"target", result.target},       {"traits", result.traits},
                        {"trials", result.trials},           {"this_session", result.this_session},
                        {"resumed", result.resumed},         {"transfer_records", result.transfer_records},
                        {"statuses", result.statuses},
                        {"stop_reason", std::string(tuner::to_string(result.stop_reason))}, {"default_gflops", result.default_gflops()},
                        {"default_is_best", result.default_is_best}, {"final", final}};
  if (result.best_recorded) out["best_recorded"] = to_json(*result.best_recorded, result.flops);
  // The recommendation: the final round's choice, or the best recorded without one.
  const tuner::FinalEntry* best = result.recommendation();
  out["best"] = best ? to_json(*best, result.flops) : nlohmann::json(nullptr);
  out["verdict"] = result.verdict;
  out["passes"] = result.passes;
  out["final_cut"] = std::string(tuner::to_string(result.final_cut));
  if (result.zero_shot) out["zero_shot"] = zero_shot;
  if (!result.prior.empty()) out["prior"] = result.prior;
  nlohmann::json vendors = nlohmann::json::array();
  for (const auto& v : result.vendors) vendors.push_back(to_json(v, result.flops));
  out["vendors"] = vendors;
  return out;
}

nlohmann::json to_json(const tuner::TuneProgress& p) {
  auto seconds = [](std::chrono::steady_clock::duration d) { return std::chrono::duration<double>(d).count(); };
  return {{"trials", p.trials},
          {"total", p.total},
          {"this_session", p.this_session},
          {"failures", p.failures},
          {"statuses", p.statuses},
          {"best_gflops", p.best_gflops()},
          {"default_gflops", p.default_gflops()},
          {"best_config", p.best_config ? ops::format_config(*p.best_config) : std::string()},
          {"elapsed_s", seconds(p.elapsed)},
          {"eta_s", p.eta ? nlohmann::json(seconds(*p.eta)) : nlohmann::json(nullptr)},
          {"phase", p.phase},
          {"final_task", p.final_task},
          {"final_tasks", p.final_tasks},
          {"verdict", p.verdict},
          {"speedup", p.speedup},
          {"passes", p.passes},
          {"final_cut", std::string(tuner::to_string(p.final_cut))}};
}

}  // namespace kestrel::frontend
