// Statistics of repeated timings: robust location (median, quantiles) and a confidence
// interval for the ratio of two kernels' times from paired, interleaved passes.
//
// Why paired passes: on a shared machine the load drifts; two kernels measured in the
// same pass see the same conditions, so the ratio of their per-pass medians cancels most
// of the drift that their absolute times carry. The interval is Student's t on the log
// ratios of the passes (a ratio's natural scale), turned back into a ratio.
#pragma once

#include <cstddef>
#include <vector>

namespace kestrel::stats {

// The median; +infinity for no values.
double median(std::vector<double> values);
// The q-quantile (0..1) of sorted values, linearly interpolated; +infinity for none.
double quantile(const std::vector<double>& sorted, double q);
// (p90 - p10) / median: how much the values disagree; 0 for fewer than 2.
double spread(std::vector<double> values);

// What a list of timings says at a glance. All 0 for no values.
struct Summary {
  std::size_t n = 0;
  double min = 0;
  double median = 0;
  double mean = 0;
  double stddev = 0;  // sample standard deviation; 0 for fewer than 2
  double spread = 0;  // as spread()
};
Summary summarize(std::vector<double> values);

// The two-sided 95% critical value of Student's t with `df` degrees of freedom.
double t_critical_95(std::size_t df);

// A ratio with its 95% confidence interval, from n paired observations.
struct RatioInterval {
  double estimate = 1;  // exp(mean log ratio): the typical ratio
  double low = 0;       // the interval; [0, inf] with fewer than 2 observations
  double high = 0;
  std::size_t n = 0;
  // Below 1 with confidence (high < 1) / above 1 with confidence (low > 1).
  bool below_one() const { return n >= 2 && high < 1; }
  bool above_one() const { return n >= 2 && low > 1; }
  // Half the interval's width relative to the estimate (in log space): 0.05 is +-5%.
  double relative_half_width() const;
};

// The interval of the ratios a[i] / b[i] (positive, finite; others are skipped).
RatioInterval ratio_interval(const std::vector<double>& a, const std::vector<double>& b);

}  // namespace kestrel::stats
