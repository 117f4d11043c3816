// A tiny dependency-free SVG line-chart writer: axes with "nice" ticks, grid, title, axis labels
// and a legend. Used for LR schedule previews and training loss curves. It does not do log
// scales, bars or interactive output; non-finite points break a line instead of failing.
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace zrt {

// One line of the chart: points (xs[k], ys[k]); xs and ys must have the same length.
struct PlotSeries {
  std::string name;
  std::vector<double> xs;
  std::vector<double> ys;
};

// Writes a complete standalone SVG document (800×480) to `os`. Empty series or series without
// finite points are listed in the legend and draw nothing. Throws zrt::Error when a series'
// xs and ys differ in length.
void write_svg_line_chart(std::ostream& os, const std::string& title, const std::string& x_label,
                          const std::vector<PlotSeries>& series, const std::string& y_label);

// Same, into the file `path` (replaced); throws zrt::Error when it cannot be written.
void write_svg_line_chart(const std::string& path, const std::string& title,
                          const std::string& x_label, const std::vector<PlotSeries>& series,
                          const std::string& y_label);

// One chart of a stack: what write_svg_line_chart draws.
struct ChartSpec {
  std::string title;
  std::string x_label;
  std::vector<PlotSeries> series;
  std::string y_label;
};
// Charts one above the other in one SVG document (e.g. a learning rate and a momentum, whose
// scales differ too much for one axis); throws zrt::Error when `path` cannot be written.
void write_svg_chart_stack(std::ostream& os, const std::vector<ChartSpec>& charts);
void write_svg_chart_stack(const std::string& path, const std::vector<ChartSpec>& charts);

// Tick values covering [lo, hi] (lo <= hi, finite) with a step of 1, 2 or 5 × 10^k chosen so that
// there are at most `max_ticks` (>= 2) ticks; the first tick is <= lo and the last >= hi.
std::vector<double> nice_ticks(double lo, double hi, int max_ticks = 7);

}  // namespace zrt
