// Best-so-far curves from a records database: for each tuned (op, workload, target),
// one curve per tuning session, the best GFLOP/s measured so far against the session's
// trials (or the seconds since its first measurement), and the session's final
// recommendation as re-measured in its final round. What `kestrel plot` draws.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "kestrel/records/records.h"

namespace kestrel::plot {

enum class XAxis { trials, time };

struct Point {
  double x = 0;            // trial number within the session (1-based), or seconds since its first record
  double best_gflops = 0;  // the best ok measurement up to and including this trial
};

// A session's final recommendation on one workload, as its final round re-measured it.
struct FinalMark {
  double gflops = 0;
  std::string implementation = records::kKestrelImplementation;  // a vendor library's when it won
  bool is_default = false;   // the op's default configuration
  bool recommended = false;  // the round marked it (Record::recommended & kRecommended); else the fastest
};

// One session's search on one workload.
struct Curve {
  std::string session;
  std::string label;   // shown in the legend: "session " and the session id's first 8 characters
  std::string source;  // where its records came from, set by the caller (kestrel plot: the database's name)
  std::size_t trials = 0;
  double best_gflops = 0;
  std::vector<Point> points;  // from the first ok measurement on, x ascending
  // The session's final round of this workload: its recommendation (the record marked
  // kRecommended when any is, else the lowest-cost ok one); none without a final round.
  std::optional<FinalMark> final;
};

// One (op, workload, target): a panel of the chart.
struct Panel {
  std::string op;
  std::string workload;  // ops::format_params text
  std::string target;
  std::vector<Curve> curves;  // in the order the sessions started
};

struct CurveQuery {
  std::string op;        // empty: every op
  std::string workload;  // empty: every workload; else its format_params text (order of keys free)
  XAxis x = XAxis::trials;
};

// The search's measurements only (the final rounds' re-measurements and vendor kernels
// are not trials), in record order, and each curve's final recommendation from the
// session's final-round records. Sessions with no ok measurement in the search draw no
// curve (nor a final mark); panels without a curve are left out.
std::vector<Panel> best_so_far(const records::RecordStore& db, const CurveQuery& query);

// Names each curve that has a source after it in the legend: the source alone ("sa"), or
// the source and the session ("tune session 3fa2c1d0") where several curves of a panel
// share that source. Curves without a source keep their label.
void label_by_source(std::vector<Panel>& panels);

// What the database holds, one "op workload (N records)" line per (op, workload), for
// a message saying that nothing matched.
std::vector<std::string> tuned_workloads(const records::RecordStore& db);

}  // namespace kestrel::plot
