// Draws best-so-far panels (curves.h) as a chart with cairo: one panel per (op,
// workload), one line per session, ticks, axis labels, a legend and a title; written
// as SVG or PNG, chosen by the file's extension.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

#include "kestrel/plot/curves.h"

namespace kestrel::plot {

struct ChartOptions {
  std::string title;  // empty: "best-so-far GFLOP/s"
  XAxis x = XAxis::trials;
  int width = 900;    // pixels (PNG) or points (SVG)
  int height = 560;
};

// A file that cannot be written, an unknown extension, or a size out of range.
struct ChartError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A value (GFLOP/s) axis: from lo to hi, with ticks at round steps (1, 2 or 5 x 10^k) from
// lo to hi, both of which are ticks.
struct Axis {
  double lo = 0;
  double hi = 1;
  std::vector<double> ticks;
};

// The value axis for data between `lo` and `hi` (the lowest and highest value drawn):
// about `want` intervals spanning the data with a margin on each side, starting at 0 only
// when the data come close to it (curves between 80 and 95 GFLOP/s get 75 to 100, not 0
// to 100). Without data (hi <= 0, or not finite) 0 to 1.
Axis value_axis(double lo, double hi, int want = 5);

// "svg" or "png" for a path ending in .svg or .png (any case); throws ChartError otherwise.
std::string chart_format(const std::string& path);

// Writes the chart to `path` atomically (a temporary file beside it, then renamed):
// on any failure nothing is left at `path` (an existing file is kept as it was).
// Throws ChartError.
void write_chart(const std::vector<Panel>& panels, const ChartOptions& options, const std::string& path);

}  // namespace kestrel::plot
