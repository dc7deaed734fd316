// The bench report's columns and ratios (see report.h).
#include "kestrel/base/stats.h"
#include "kestrel/compare/report.h"

#include <algorithm>

namespace kestrel::compare {
namespace {

// The median, 0 for none (a contender that timed nothing).
double median(const std::vector<double>& v) { return v.empty() ? 0 : stats::median(v); }

}  // namespace

const std::vector<std::string>& library_columns() {
  static const std::vector<std::string> columns = {"openblas", "onednn", "onednn-any"};
  return columns;
}

std::optional<double> speed_ratio(const Timing& kestrel, const Timing* library) {
  if (!library || library->status != "ok" || kestrel.status != "ok" || library->median_s <= 0 ||
      kestrel.median_s <= 0) {
    return std::nullopt;
  }
  if (library->rounds.size() != kestrel.rounds.size()) return library->median_s / kestrel.median_s;
  std::vector<double> per_round;
  for (std::size_t i = 0; i < library->rounds.size(); ++i) per_round.push_back(library->rounds[i] / kestrel.rounds[i]);
  return median(per_round);
}

}  // namespace kestrel::compare
