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

// "svg" or "png" for a path ending in .svg or .png (any case); throws ChartError otherwise.
std::string chart_format(const std::string& path);

// Writes the chart to `path` atomically (a temporary file beside it, then renamed):
// on any failure nothing is left at `path` (an existing file is kept as it was).
// Throws ChartError.
void write_chart(const std::vector<Panel>& panels, const ChartOptions& options, const std::string& path);

}  // namespace kestrel::plot
