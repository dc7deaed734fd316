// Statistics of repeated timings (see stats.h).
#include "kestrel/base/stats.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace kestrel::stats {
namespace {
constexpr double kInf = std::numeric_limits<double>::infinity();
}  // namespace

double median(std::vector<double> values) {
  if (values.empty()) return kInf;
  std::sort(values.begin(), values.end());
  return quantile(values, 0.5);
}

double quantile(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) return kInf;
  double pos = q * static_cast<double>(sorted.size() - 1);
  auto lo = static_cast<std::size_t>(std::floor(pos));
  auto hi = std::min(lo + 1, sorted.size() - 1);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - static_cast<double>(lo));
}

double spread(std::vector<double> values) {
  if (values.size() < 2) return 0;
  std::sort(values.begin(), values.end());
  double mid = quantile(values, 0.5);
  return mid > 0 ? (quantile(values, 0.9) - quantile(values, 0.1)) / mid : 0;
}

Summary summarize(std::vector<double> values) {
  Summary s;
  if (values.empty()) return s;
  std::sort(values.begin(), values.end());
  s.n = values.size();
  s.min = values.front();
  s.median = quantile(values, 0.5);
  double sum = 0;
  for (double x : values) sum += x;
  s.mean = sum / static_cast<double>(values.size());
  double sq = 0;
  for (double x : values) sq += (x - s.mean) * (x - s.mean);
  s.stddev = values.size() > 1 ? std::sqrt(sq / static_cast<double>(values.size() - 1)) : 0.0;
  s.spread = values.size() > 1 && s.median > 0 ? (quantile(values, 0.9) - quantile(values, 0.1)) / s.median : 0;
  return s;
}

double t_critical_95(std::size_t df) {
  // Two-sided 95% (the 0.975 quantile), df 1..30; beyond that the normal's 1.96 with a
  // small correction.
  static constexpr double kTable[] = {12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
                                      2.201,  2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
                                      2.080,  2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042};
  if (df == 0) return kInf;
  if (df <= 30) return kTable[df - 1];
  return 1.96 + 2.4 / static_cast<double>(df);
}

double RatioInterval::relative_half_width() const {
  if (n < 2 || !(low > 0) || !std::isfinite(high)) return kInf;
  return (std::log(high) - std::log(low)) / 2;
}

RatioInterval ratio_interval(const std::vector<double>& a, const std::vector<double>& b) {
  std::vector<double> logs;
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i) {
    if (a[i] > 0 && b[i] > 0 && std::isfinite(a[i]) && std::isfinite(b[i])) logs.push_back(std::log(a[i] / b[i]));
  }
  RatioInterval r;
  r.n = logs.size();
  if (logs.empty()) {
    r.low = 0;
    r.high = kInf;
    return r;
  }
  double mean = 0;
  for (double x : logs) mean += x;
  mean /= static_cast<double>(logs.size());
  r.estimate = std::exp(mean);
  if (logs.size() < 2) {
    r.low = 0;
    r.high = kInf;
    return r;
  }
  double var = 0;
  for (double x : logs) var += (x - mean) * (x - mean);
  var /= static_cast<double>(logs.size() - 1);
  const double half = t_critical_95(logs.size() - 1) * std::sqrt(var / static_cast<double>(logs.size()));
  r.low = std::exp(mean - half);
  r.high = std::exp(mean + half);
  return r;
}

}  // namespace kestrel::stats
