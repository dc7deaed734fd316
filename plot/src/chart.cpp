// The chart: panels in a grid, best-so-far steps, each session's final recommendation
// (a diamond labelled "final"), ticks, legend; cairo SVG and image surfaces.
#include "kestrel/plot/chart.h"

#include <cairo-svg.h>
#include <cairo.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <memory>
#include <numbers>
#include <sstream>

namespace kestrel::plot {
namespace {

struct Rgb {
  double r, g, b;
};

// Okabe-Ito: told apart by colour-blind readers and in greyscale print.
constexpr Rgb kPalette[] = {{0.000, 0.447, 0.698}, {0.835, 0.369, 0.000}, {0.000, 0.620, 0.451},
                            {0.800, 0.475, 0.655}, {0.902, 0.624, 0.000}, {0.337, 0.706, 0.914},
                            {0.000, 0.000, 0.000}};
constexpr std::size_t kColours = sizeof kPalette / sizeof kPalette[0];
// Dashes for lines past the palette's end.
constexpr double kDash[] = {6.0, 3.0};

struct Rect {
  double x, y, w, h;
};

// The round step (1, 2, 5 x 10^k) that cuts [lo, hi] into about `want` intervals.
double nice_step(double lo, double hi, int want) {
  const double raw = (hi - lo) / want;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    step = m * mag;
    if (step >= raw) break;
  }
  return step;
}

// The multiples of `step` in [lo, hi].
std::vector<double> multiples(double lo, double hi, double step) {
  std::vector<double> out;
  const double first = std::ceil(lo / step - 1e-9);
  for (double k = first; k * step <= hi + step * 1e-9; k += 1) out.push_back(std::abs(k) < 0.5 ? 0 : k * step);
  return out;
}

// Round steps covering [lo, hi] with about `want` intervals.
std::vector<double> ticks(double lo, double hi, int want) {
  if (!(hi > lo)) hi = lo + 1;
  return multiples(lo, hi, nice_step(lo, hi, want));
}

std::string number(double v) {
  char buf[32];
  if (v != 0 && (std::abs(v) >= 1e6 || std::abs(v) < 1e-3)) std::snprintf(buf, sizeof buf, "%.0e", v);
  else if (std::abs(v - std::round(v)) < 1e-9) std::snprintf(buf, sizeof buf, "%.0f", v);
  else std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

std::string xml_escaped(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string legend_entry(const Curve& c) {
  std::ostringstream s;
  s.precision(1);
  s << std::fixed << c.label << ": " << c.trials << " trials, best " << c.best_gflops << " GFLOP/s";
  if (c.final) {
    s << ", final " << c.final->gflops;
    if (c.final->implementation != records::kKestrelImplementation) s << " (" << c.final->implementation << ")";
    else if (c.final->is_default) s << " (default)";
  }
  return s.str();
}

// A filled diamond centred on (x, y), outlined in white then dark grey so that it stands
// out on its curve's line.
void diamond(cairo_t* cr, double x, double y, double r) {
  cairo_move_to(cr, x, y - r);
  cairo_line_to(cr, x + r, y);
  cairo_line_to(cr, x, y + r);
  cairo_line_to(cr, x - r, y);
  cairo_close_path(cr);
}

class Painter {
 public:
  explicit Painter(cairo_t* cr) : cr_(cr) {}

  void font(double size, bool bold = false) {
    cairo_select_font_face(cr_, "DejaVu Sans", CAIRO_FONT_SLANT_NORMAL,
                           bold ? CAIRO_FONT_WEIGHT_BOLD : CAIRO_FONT_WEIGHT_NORMAL);
    cairo_set_font_size(cr_, size);
  }
  double width_of(const std::string& text) {
    cairo_text_extents_t e;
    cairo_text_extents(cr_, text.c_str(), &e);
    return e.x_advance;
  }
  // Text with its anchor: align 0 left, 0.5 centre, 1 right; baseline at y.
  void text(const std::string& s, double x, double y, double align) {
    cairo_move_to(cr_, x - width_of(s) * align, y);
    cairo_show_text(cr_, s.c_str());
  }
  // Shrinks the current font until `s` fits in `width`.
  void fit(const std::string& s, double size, double width, bool bold = false) {
    font(size, bold);
    while (size > 6 && width_of(s) > width) font(size -= 0.5, bold);
  }
  void colour(Rgb c) { cairo_set_source_rgb(cr_, c.r, c.g, c.b); }
  void grey(double v) { cairo_set_source_rgb(cr_, v, v, v); }
  cairo_t* cr() { return cr_; }

 private:
  cairo_t* cr_;
};

void draw_panel(Painter& p, const Panel& panel, Rect cell, XAxis x_axis) {
  cairo_t* cr = p.cr();
  // Panel title.
  p.grey(0.1);
  p.fit(panel.op + " " + panel.workload + " on " + panel.target, 13, cell.w - 8, true);
  p.text(panel.op + " " + panel.workload + " on " + panel.target, cell.x + cell.w / 2, cell.y + 16, 0.5);
  const Rect area{cell.x + 62, cell.y + 28, cell.w - 62 - 14, cell.h - 28 - 46};
  if (area.w < 20 || area.h < 20) return;

  double x_max = 1, y_min = std::numeric_limits<double>::infinity(), y_max = 0;
  for (const Curve& c : panel.curves) {
    for (const Point& pt : c.points) {
      x_max = std::max(x_max, pt.x);
      y_min = std::min(y_min, pt.best_gflops);
      y_max = std::max(y_max, pt.best_gflops);
    }
    if (c.final) {
      y_min = std::min(y_min, c.final->gflops);
      y_max = std::max(y_max, c.final->gflops);
    }
  }
  const std::vector<double> xt = ticks(0, x_max, 6);
  x_max = std::max(x_max, xt.back());
  const Axis y_axis = value_axis(y_min, y_max);
  const std::vector<double>& yt = y_axis.ticks;
  auto sx = [&](double x) { return area.x + x / x_max * area.w; };
  auto sy = [&](double y) { return area.y + area.h - (y - y_axis.lo) / (y_axis.hi - y_axis.lo) * area.h; };

  // Grid, axes, ticks and their labels.
  cairo_set_line_width(cr, 0.6);
  p.grey(0.88);
  for (double t : yt) {
    cairo_move_to(cr, area.x, std::round(sy(t)) + 0.5);
    cairo_line_to(cr, area.x + area.w, std::round(sy(t)) + 0.5);
  }
  for (double t : xt) {
    cairo_move_to(cr, std::round(sx(t)) + 0.5, area.y);
    cairo_line_to(cr, std::round(sx(t)) + 0.5, area.y + area.h);
  }
  cairo_stroke(cr);
  cairo_set_line_width(cr, 1);
  p.grey(0.15);
  cairo_rectangle(cr, area.x + 0.5, area.y + 0.5, area.w, area.h);
  cairo_stroke(cr);
  p.font(10.5);
  for (double t : yt) {
    cairo_move_to(cr, area.x - 4, sy(t));
    cairo_line_to(cr, area.x, sy(t));
    p.text(number(t), area.x - 7, sy(t) + 3.5, 1);
  }
  for (double t : xt) {
    cairo_move_to(cr, sx(t), area.y + area.h);
    cairo_line_to(cr, sx(t), area.y + area.h + 4);
    p.text(number(t), sx(t), area.y + area.h + 16, 0.5);
  }
  cairo_stroke(cr);
  p.font(11.5);
  p.text(x_axis == XAxis::trials ? "trials" : "time (s)", area.x + area.w / 2, area.y + area.h + 34, 0.5);
  cairo_save(cr);
  cairo_translate(cr, cell.x + 14, area.y + area.h / 2);
  cairo_rotate(cr, -std::numbers::pi / 2);
  p.text("best GFLOP/s", 0, 0, 0.5);
  cairo_restore(cr);

  // The curves: best-so-far is a step function (one path per curve).
  auto style = [&](std::size_t i) {
    p.colour(kPalette[i % kColours]);
    cairo_set_line_width(cr, 2);
    if (i >= kColours) cairo_set_dash(cr, kDash, 2, 0);
    else cairo_set_dash(cr, nullptr, 0, 0);
  };
  cairo_save(cr);
  cairo_rectangle(cr, area.x, area.y, area.w + 1, area.h + 1);
  cairo_clip(cr);
  for (std::size_t i = 0; i < panel.curves.size(); ++i) {
    const Curve& c = panel.curves[i];
    style(i);
    cairo_move_to(cr, sx(c.points.front().x), sy(c.points.front().best_gflops));
    for (std::size_t k = 1; k < c.points.size(); ++k) {
      cairo_line_to(cr, sx(c.points[k].x), sy(c.points[k - 1].best_gflops));
      cairo_line_to(cr, sx(c.points[k].x), sy(c.points[k].best_gflops));
    }
    cairo_set_line_join(cr, CAIRO_LINE_JOIN_ROUND);
    cairo_stroke(cr);
  }
  cairo_restore(cr);
  // Each session's final recommendation, re-measured: a filled diamond in its colour at
  // the right end of its curve, labelled "final" (left of it: the curve ends at the right);
  // not clipped, as it may sit on the plot's right edge.
  cairo_set_dash(cr, nullptr, 0, 0);
  cairo_set_line_join(cr, CAIRO_LINE_JOIN_MITER);
  for (std::size_t i = 0; i < panel.curves.size(); ++i) {
    const Curve& c = panel.curves[i];
    if (!c.final) continue;
    const double x = sx(c.points.back().x), y = sy(c.final->gflops);
    diamond(cr, x, y, 6);
    p.colour(kPalette[i % kColours]);
    cairo_fill_preserve(cr);
    cairo_set_line_width(cr, 1);
    p.grey(0.1);
    cairo_stroke(cr);
    p.font(10, true);
    p.colour(kPalette[i % kColours]);
    p.text("final", x - 9, y + (y < area.y + 14 ? 12 : -6), 1);
  }

  // Legend, lower right inside the plot (the best-so-far curves rise to the upper left and right).
  std::vector<std::string> entries;
  for (const Curve& c : panel.curves) entries.push_back(legend_entry(c));
  p.font(10.5);
  double text_w = 0;
  for (const auto& e : entries) text_w = std::max(text_w, p.width_of(e));
  const double row = 15, box_w = std::min(area.w - 8, text_w + 38), box_h = row * entries.size() + 8;
  const double bx = area.x + area.w - box_w - 6, by = area.y + area.h - box_h - 6;
  cairo_rectangle(cr, bx, by, box_w, box_h);
  cairo_set_source_rgba(cr, 1, 1, 1, 0.9);
  cairo_fill_preserve(cr);
  p.grey(0.7);
  cairo_set_line_width(cr, 0.8);
  cairo_stroke(cr);
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const double y = by + 4 + row * i + row / 2;
    style(i);
    cairo_move_to(cr, bx + 6, y);
    cairo_line_to(cr, bx + 28, y);
    cairo_stroke(cr);
    cairo_set_dash(cr, nullptr, 0, 0);
    if (panel.curves[i].final) {  // the swatch carries the diamond too
      diamond(cr, bx + 17, y, 4);
      cairo_fill(cr);
    }
    p.grey(0.1);
    p.text(entries[i], bx + 33, y + 3.8, 0);
  }
}

void draw(cairo_t* cr, const std::vector<Panel>& panels, const ChartOptions& options) {
  Painter p(cr);
  cairo_set_source_rgb(cr, 1, 1, 1);
  cairo_paint(cr);
  const double w = options.width, h = options.height;
  const std::string title = options.title.empty() ? "best-so-far GFLOP/s" : options.title;
  p.grey(0.05);
  p.fit(title, 17, w - 24, true);
  p.text(title, w / 2, 26, 0.5);
  const std::size_t n = std::max<std::size_t>(panels.size(), 1);
  const std::size_t cols = n == 1 ? 1 : n <= 4 ? 2 : 3;
  const std::size_t rows = (n + cols - 1) / cols;
  const double top = 40, margin = 10;
  const double cell_w = (w - 2 * margin) / cols, cell_h = (h - top - margin) / rows;
  for (std::size_t i = 0; i < panels.size(); ++i) {
    const Rect cell{margin + cell_w * (i % cols), top + cell_h * (i / cols), cell_w, cell_h};
    draw_panel(p, panels[i], cell, options.x);
  }
}

struct SurfaceDeleter {
  void operator()(cairo_surface_t* s) const { cairo_surface_destroy(s); }
};
struct ContextDeleter {
  void operator()(cairo_t* c) const { cairo_destroy(c); }
};
using Surface = std::unique_ptr<cairo_surface_t, SurfaceDeleter>;
using Context = std::unique_ptr<cairo_t, ContextDeleter>;

// cairo draws text as glyph outlines; the title and each panel's legend also go into
// <title> and <desc>, for screen readers and for searching the file.
void add_svg_text(const std::filesystem::path& file, const std::vector<Panel>& panels, const std::string& title) {
  std::ifstream in(file, std::ios::binary);
  std::string svg((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  in.close();
  const auto open = svg.find("<svg");
  const auto end = open == std::string::npos ? open : svg.find('>', open);
  if (end == std::string::npos) throw ChartError("cairo wrote no <svg> element");
  std::string text = "\n<title>" + xml_escaped(title) + "</title>\n<desc>";
  for (const Panel& p : panels) {
    text += xml_escaped(p.op + " " + p.workload + " on " + p.target) + "\n";
    for (const Curve& c : p.curves) text += "  " + xml_escaped(legend_entry(c)) + "\n";
  }
  text += "</desc>";
  svg.insert(end + 1, text);
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  out << svg;
  out.close();
  if (!out) throw ChartError("cannot write " + file.string());
}

void check(cairo_status_t status, const std::string& what) {
  if (status != CAIRO_STATUS_SUCCESS) throw ChartError(what + ": " + cairo_status_to_string(status));
}

}  // namespace

Axis value_axis(double lo, double hi, int want) {
  if (!std::isfinite(lo) || !std::isfinite(hi) || hi < lo || hi <= 0) return {0, 1, ticks(0, 1, want)};
  lo = std::max(lo, 0.0);
  // A margin of 8% of the data's span on each side; a flat curve gets 5% of its value.
  const double margin = hi - lo > hi * 1e-3 ? (hi - lo) * 0.08 : hi * 0.05;
  const double a = std::max(0.0, lo - margin), b = hi + margin;
  // The smallest round step whose ticks around [a, b] make at most want + 1 intervals.
  double step = std::pow(10.0, std::floor(std::log10((b - a) / want)) - 1);
  for (int i = 0; std::ceil(b / step - 1e-9) - std::floor(a / step + 1e-9) > want + 1; ++i) {
    step *= i % 3 == 1 ? 2.5 : 2;  // 1 -> 2 -> 5 -> 10
  }
  Axis axis;
  axis.lo = std::floor(a / step + 1e-9) * step;
  axis.hi = std::ceil(b / step - 1e-9) * step;
  axis.ticks = multiples(axis.lo, axis.hi, step);
  return axis;
}

std::string chart_format(const std::string& path) {
  std::string ext = std::filesystem::path(path).extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
  if (ext == ".svg") return "svg";
  if (ext == ".png") return "png";
  throw ChartError("cannot tell the format of " + path + ": give a file name ending in .svg or .png");
}

void write_chart(const std::vector<Panel>& panels, const ChartOptions& options, const std::string& path) {
  const std::string format = chart_format(path);
  if (options.width < 200 || options.height < 150 || options.width > 10000 || options.height > 10000) {
    throw ChartError("a chart of " + std::to_string(options.width) + "x" + std::to_string(options.height) +
                     " is out of range (200x150 to 10000x10000)");
  }
  const std::filesystem::path target(path);
  const std::filesystem::path temp =
      target.parent_path() / ("." + target.filename().string() + ".tmp-" + std::to_string(::getpid()));
  try {
    if (format == "svg") {
      Surface surface(cairo_svg_surface_create(temp.c_str(), options.width, options.height));
      check(cairo_surface_status(surface.get()), "cannot write " + path);
      {
        Context cr(cairo_create(surface.get()));
        draw(cr.get(), panels, options);
        check(cairo_status(cr.get()), "cannot draw " + path);
      }
      cairo_surface_finish(surface.get());
      check(cairo_surface_status(surface.get()), "cannot write " + path);
      add_svg_text(temp, panels, options.title.empty() ? "best-so-far GFLOP/s" : options.title);
    } else {
      Surface surface(cairo_image_surface_create(CAIRO_FORMAT_ARGB32, options.width, options.height));
      check(cairo_surface_status(surface.get()), "cannot draw " + path);
      {
        Context cr(cairo_create(surface.get()));
        draw(cr.get(), panels, options);
        check(cairo_status(cr.get()), "cannot draw " + path);
      }
      check(cairo_surface_write_to_png(surface.get(), temp.c_str()), "cannot write " + path);
    }
    std::error_code ec;
    std::filesystem::rename(temp, target, ec);
    if (ec) throw ChartError("cannot write " + path + ": " + ec.message());
  } catch (...) {
    std::error_code ignored;
    std::filesystem::remove(temp, ignored);
    throw;
  }
}

}  // namespace kestrel::plot
