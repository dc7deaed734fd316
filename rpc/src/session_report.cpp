#include "kestrel/rpc/session_report.h"

#include <algorithm>

namespace kestrel::rpc {
namespace {

std::string cut(const std::string& s) { return s.size() <= SessionReport::kMaxText ? s : s.substr(0, SessionReport::kMaxText); }

std::string cut(capnp::Text::Reader t) {
  std::string s(t.cStr(), t.size());
  return cut(s);
}

}  // namespace

void to_wire(const SessionReport& r, wire::SessionReport::Builder out) {
  out.setSessionId(cut(r.session_id));
  out.setJob(r.job);
  out.setLabel(cut(r.label));
  out.setOp(cut(r.op));
  out.setWorkload(cut(r.workload));
  out.setStrategy(cut(r.strategy));
  out.setTarget(cut(r.target));
  out.setKey(cut(r.key));
  out.setPhase(cut(r.phase));
  out.setTrials(r.trials);
  out.setBudget(r.budget);
  out.setThisSession(r.this_session);
  out.setBestGflops(r.best_gflops);
  out.setDefaultGflops(r.default_gflops);
  out.setBestConfig(cut(r.best_config));
  out.setElapsedMs(static_cast<std::uint64_t>(std::max<std::int64_t>(r.elapsed.count(), 0)));
  auto n = static_cast<unsigned>(std::min(r.failures.size(), SessionReport::kMaxFailureKinds));
  auto failures = out.initFailures(n);
  for (unsigned i = 0; i < n; ++i) {
    failures[i].setStatus(cut(r.failures[i].first));
    failures[i].setCount(r.failures[i].second);
  }
  out.setFinished(r.finished);
  out.setFinalGflops(r.final_gflops);
  out.setFinalSpeedup(r.final_speedup);
  out.setFinalSpeedupLow(r.final_speedup_low);
  out.setFinalSpeedupHigh(r.final_speedup_high);
  out.setVerdict(cut(r.verdict));
  out.setOutcome(cut(r.outcome));
  out.setEtaMs(static_cast<std::uint64_t>(std::max<std::int64_t>(r.eta.count(), 0)));
  out.setMessage(cut(r.message));
}

SessionReport from_wire(wire::SessionReport::Reader in) {
  SessionReport r;
  r.session_id = cut(in.getSessionId());
  r.job = in.getJob();
  r.label = cut(in.getLabel());
  r.op = cut(in.getOp());
  r.workload = cut(in.getWorkload());
  r.strategy = cut(in.getStrategy());
  r.target = cut(in.getTarget());
  r.key = cut(in.getKey());
  r.phase = cut(in.getPhase());
  r.trials = in.getTrials();
  r.budget = in.getBudget();
  r.this_session = in.getThisSession();
  r.best_gflops = in.getBestGflops();
  r.default_gflops = in.getDefaultGflops();
  r.best_config = cut(in.getBestConfig());
  r.elapsed = std::chrono::milliseconds(static_cast<std::int64_t>(std::min<std::uint64_t>(in.getElapsedMs(), 1ull << 50)));
  auto failures = in.getFailures();
  for (unsigned i = 0; i < failures.size() && i < SessionReport::kMaxFailureKinds; ++i) {
    r.failures.emplace_back(cut(failures[i].getStatus()), failures[i].getCount());
  }
  r.finished = in.getFinished();
  r.final_gflops = in.getFinalGflops();
  r.final_speedup = in.getFinalSpeedup();
  r.final_speedup_low = in.getFinalSpeedupLow();
  r.final_speedup_high = in.getFinalSpeedupHigh();
  r.verdict = cut(in.getVerdict());
  r.outcome = cut(in.getOutcome());
  r.eta = std::chrono::milliseconds(static_cast<std::int64_t>(std::min<std::uint64_t>(in.getEtaMs(), 1ull << 50)));
  r.message = cut(in.getMessage());
  return r;
}

}  // namespace kestrel::rpc
