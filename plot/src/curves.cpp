// Records -> best-so-far curves, one per (panel, session).
#include "kestrel/plot/curves.h"

#include <algorithm>
#include <map>
#include <sstream>
#include <tuple>

#include "kestrel/ops/op.h"

namespace kestrel::plot {
namespace {

// "N=2,M=1" and "M=1,N=2" name the same workload.
std::string normalized(const std::string& workload) {
  std::vector<std::string> parts;
  std::stringstream in(workload);
  for (std::string part; std::getline(in, part, ',');) {
    part.erase(std::remove(part.begin(), part.end(), ' '), part.end());
    if (!part.empty()) parts.push_back(part);
  }
  std::sort(parts.begin(), parts.end());
  std::string out;
  for (const auto& p : parts) out += (out.empty() ? "" : ",") + p;
  return out;
}

bool is_trial(const records::Record& r) {
  return !r.final_measurement && r.implementation == records::kKestrelImplementation;
}

std::string short_session(const std::string& session) { return session.substr(0, 8); }

}  // namespace

std::vector<Panel> best_so_far(const records::RecordStore& db, const CurveQuery& query) {
  std::vector<records::Record> records = db.all(query.op);
  std::stable_sort(records.begin(), records.end(), [](const auto& a, const auto& b) { return a.id < b.id; });
  const std::string want = normalized(query.workload);
  using PanelKey = std::tuple<std::string, std::string, std::string>;
  std::map<PanelKey, std::size_t> panel_index;
  std::vector<Panel> panels;
  // Per panel: session -> curve index, and each curve's first record time.
  std::vector<std::map<std::string, std::size_t>> curve_index;
  std::vector<std::vector<std::int64_t>> first_ms;
  for (const records::Record& r : records) {
    if (!is_trial(r)) continue;
    std::string workload = ops::format_params(r.workload);
    if (!want.empty() && normalized(workload) != want) continue;
    PanelKey key{r.op, workload, r.target.to_string()};
    auto [it, added] = panel_index.emplace(key, panels.size());
    if (added) {
      panels.push_back({r.op, workload, r.target.to_string(), {}});
      curve_index.emplace_back();
      first_ms.emplace_back();
    }
    const std::size_t p = it->second;
    auto [cit, new_curve] = curve_index[p].emplace(r.session, panels[p].curves.size());
    if (new_curve) {
      panels[p].curves.push_back({r.session, "session " + short_session(r.session), "", 0, 0, {}, std::nullopt});
      first_ms[p].push_back(r.time_unix_ms);
    }
    Curve& curve = panels[p].curves[cit->second];
    ++curve.trials;
    if (r.ok() && r.gflops > curve.best_gflops) curve.best_gflops = r.gflops;
    if (curve.best_gflops <= 0) continue;  // nothing to draw before the first ok measurement
    const double x = query.x == XAxis::trials
                         ? static_cast<double>(curve.trials)
                         : static_cast<double>(r.time_unix_ms - first_ms[p][cit->second]) / 1000.0;
    curve.points.push_back({x, curve.best_gflops});
  }
  // Each curve's final recommendation: the final round's record marked kRecommended (the
  // newest, should a session hold two rounds of the task), else its fastest ok record.
  struct Pick {
    const records::Record* marked = nullptr;
    const records::Record* fastest = nullptr;
  };
  std::map<std::pair<std::size_t, std::size_t>, Pick> picks;  // (panel, curve) -> records
  for (const records::Record& r : records) {
    if (!r.final_measurement || !r.ok() || !(r.gflops > 0)) continue;
    auto panel = panel_index.find(PanelKey{r.op, ops::format_params(r.workload), r.target.to_string()});
    if (panel == panel_index.end()) continue;
    auto curve = curve_index[panel->second].find(r.session);
    if (curve == curve_index[panel->second].end()) continue;
    Pick& pick = picks[{panel->second, curve->second}];
    if (r.recommended & records::kRecommended) pick.marked = &r;  // records are in id order
    if (!pick.fastest || r.cost < pick.fastest->cost) pick.fastest = &r;
  }
  for (const auto& [at, pick] : picks) {
    const records::Record& r = pick.marked ? *pick.marked : *pick.fastest;
    panels[at.first].curves[at.second].final =
        FinalMark{r.gflops, r.implementation, r.is_default, pick.marked != nullptr};
  }
  std::vector<Panel> drawn;
  for (Panel& panel : panels) {
    std::erase_if(panel.curves, [](const Curve& c) { return c.points.empty(); });
    if (!panel.curves.empty()) drawn.push_back(std::move(panel));
  }
  // Two sessions with the same 8-character prefix: show their whole ids.
  for (Panel& panel : drawn) {
    for (Curve& a : panel.curves) {
      for (const Curve& b : panel.curves) {
        if (&a != &b && short_session(a.session) == short_session(b.session)) a.label = "session " + a.session;
      }
    }
  }
  return drawn;
}

void label_by_source(std::vector<Panel>& panels) {
  for (Panel& panel : panels) {
    std::map<std::string, std::size_t> per_source;
    for (const Curve& c : panel.curves) ++per_source[c.source];
    for (Curve& c : panel.curves) {
      if (!c.source.empty()) c.label = per_source[c.source] > 1 ? c.source + " " + c.label : c.source;
    }
  }
}

std::vector<std::string> tuned_workloads(const records::RecordStore& db) {
  std::map<std::pair<std::string, std::string>, std::size_t> counts;
  for (const records::Record& r : db.all()) ++counts[{r.op, ops::format_params(r.workload)}];
  std::vector<std::string> out;
  for (const auto& [key, n] : counts) out.push_back(key.first + " " + key.second + " (" + std::to_string(n) + " records)");
  return out;
}

}  // namespace kestrel::plot
