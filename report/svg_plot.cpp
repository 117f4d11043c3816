// SVG line charts (see svg_plot.h). Layout: a fixed 800×480 canvas, the plot area inset by
// margins for the title, tick labels and axis labels; one <polyline> per run of finite points.
#include "report/svg_plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>

#include "core/error.h"

namespace zrt {
namespace {

constexpr double kWidth = 800, kHeight = 480;
constexpr double kLeft = 84, kRight = 780, kTop = 44, kBottom = 416;  // plot area
constexpr const char* kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e",
                                   "#9467bd", "#8c564b", "#e377c2", "#17becf"};

std::string escape_xml(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&apos;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string fixed2(double v) {
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), "%.2f", v);
  return buffer;
}

std::string tick_label(double v) {
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), "%.6g", v);
  return buffer;
}

struct Range {
  double lo = std::numeric_limits<double>::infinity();
  double hi = -std::numeric_limits<double>::infinity();
  void add(double v) {
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  bool empty() const { return lo > hi; }
};

// Maps data coordinates to canvas coordinates for one axis.
struct Axis {
  double lo, hi, from, to;  // data range → pixel range
  double map(double v) const { return from + (v - lo) / (hi - lo) * (to - from); }
};

}  // namespace

std::vector<double> nice_ticks(double lo, double hi, int max_ticks) {
  ZRT_CHECK(std::isfinite(lo) && std::isfinite(hi) && lo <= hi, "nice_ticks: bad range [", lo, ", ",
            hi, "]");
  ZRT_CHECK(max_ticks >= 2, "nice_ticks: max_ticks must be >= 2, got ", max_ticks);
  if (lo == hi) {
    const double pad = lo != 0.0 ? std::abs(lo) * 0.1 : 1.0;
    lo -= pad;
    hi += pad;
  }
  const double raw = (hi - lo) / (max_ticks - 1);
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  double step = magnitude;
  double first = 0.0;
  int count = 0;
  for (double m : {1.0, 2.0, 5.0, 10.0, 20.0}) {
    step = m * magnitude;
    first = std::floor(lo / step + 1e-9) * step;
    const double last = std::ceil(hi / step - 1e-9) * step;
    count = static_cast<int>(std::lround((last - first) / step)) + 1;
    if (count <= max_ticks) break;
  }
  std::vector<double> ticks;
  for (int k = 0; k < count; ++k) {
    double v = first + k * step;
    if (std::abs(v) < step * 1e-9) v = 0.0;
    ticks.push_back(v);
  }
  return ticks;
}

void write_svg_line_chart(std::ostream& os, const std::string& title, const std::string& x_label,
                          const std::vector<PlotSeries>& series, const std::string& y_label) {
  Range xr, yr;
  for (const PlotSeries& s : series) {
    ZRT_CHECK(s.xs.size() == s.ys.size(), "plot series '", s.name, "' has ", s.xs.size(),
              " x values but ", s.ys.size(), " y values");
    for (size_t k = 0; k < s.xs.size(); ++k) {
      if (std::isfinite(s.xs[k]) && std::isfinite(s.ys[k])) {
        xr.add(s.xs[k]);
        yr.add(s.ys[k]);
      }
    }
  }
  if (xr.empty()) xr = {0.0, 1.0};
  if (yr.empty()) yr = {0.0, 1.0};
  const std::vector<double> xt = nice_ticks(xr.lo, xr.hi);
  const std::vector<double> yt = nice_ticks(yr.lo, yr.hi);
  const Axis xa{xt.front(), xt.back(), kLeft, kRight};
  const Axis ya{yt.front(), yt.back(), kBottom, kTop};

  os << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << kWidth << "\" height=\"" << kHeight
     << "\" viewBox=\"0 0 " << kWidth << " " << kHeight
     << "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  os << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  os << "<text x=\"" << fixed2((kLeft + kRight) / 2) << "\" y=\"26\" text-anchor=\"middle\" "
     << "font-size=\"16\" font-weight=\"bold\">" << escape_xml(title) << "</text>\n";

  // Grid, ticks and tick labels.
  os << "<g stroke=\"#e0e0e0\" stroke-width=\"1\">\n";
  for (double v : xt) {
    os << "<line x1=\"" << fixed2(xa.map(v)) << "\" y1=\"" << kTop << "\" x2=\""
       << fixed2(xa.map(v)) << "\" y2=\"" << kBottom << "\"/>\n";
  }
  for (double v : yt) {
    os << "<line x1=\"" << kLeft << "\" y1=\"" << fixed2(ya.map(v)) << "\" x2=\"" << kRight
       << "\" y2=\"" << fixed2(ya.map(v)) << "\"/>\n";
  }
  os << "</g>\n<g text-anchor=\"middle\">\n";
  for (double v : xt) {
    os << "<text x=\"" << fixed2(xa.map(v)) << "\" y=\"" << kBottom + 18 << "\">" << tick_label(v)
       << "</text>\n";
  }
  os << "</g>\n<g text-anchor=\"end\">\n";
  for (double v : yt) {
    os << "<text x=\"" << kLeft - 6 << "\" y=\"" << fixed2(ya.map(v) + 4) << "\">" << tick_label(v)
       << "</text>\n";
  }
  os << "</g>\n";
  // Axes and their labels.
  os << "<path d=\"M" << kLeft << "," << kTop << " V" << kBottom << " H" << kRight
     << "\" fill=\"none\" stroke=\"black\" stroke-width=\"1\"/>\n";
  os << "<text x=\"" << fixed2((kLeft + kRight) / 2) << "\" y=\"" << kHeight - 16
     << "\" text-anchor=\"middle\">" << escape_xml(x_label) << "</text>\n";
  const double ymid = (kTop + kBottom) / 2;
  os << "<text x=\"18\" y=\"" << fixed2(ymid)
     << "\" text-anchor=\"middle\" transform=\"rotate(-90 18 " << fixed2(ymid) << ")\">"
     << escape_xml(y_label) << "</text>\n";

  // Lines: one polyline per run of finite points; an isolated point becomes a dot.
  for (size_t s = 0; s < series.size(); ++s) {
    const char* color = kColors[s % (sizeof(kColors) / sizeof(kColors[0]))];
    const PlotSeries& ps = series[s];
    std::vector<std::string> run;
    auto flush = [&] {
      if (run.size() == 1) {
        const size_t comma = run[0].find(',');
        os << "<circle cx=\"" << run[0].substr(0, comma) << "\" cy=\"" << run[0].substr(comma + 1)
           << "\" r=\"2.5\" fill=\"" << color << "\"/>\n";
      } else if (run.size() > 1) {
        os << "<polyline fill=\"none\" stroke=\"" << color << "\" stroke-width=\"1.5\" points=\"";
        for (size_t k = 0; k < run.size(); ++k) os << (k ? " " : "") << run[k];
        os << "\"/>\n";
      }
      run.clear();
    };
    for (size_t k = 0; k < ps.xs.size(); ++k) {
      if (std::isfinite(ps.xs[k]) && std::isfinite(ps.ys[k])) {
        run.push_back(fixed2(xa.map(ps.xs[k])) + "," + fixed2(ya.map(ps.ys[k])));
      } else {
        flush();
      }
    }
    flush();
  }

  // Legend in the top-right corner of the plot area.
  if (!series.empty()) {
    size_t longest = 0;
    for (const PlotSeries& s : series) longest = std::max(longest, s.name.size());
    const double width = 40 + 7.0 * static_cast<double>(longest);
    const double x = kRight - width - 8, y = kTop + 8;
    os << "<rect x=\"" << fixed2(x) << "\" y=\"" << fixed2(y) << "\" width=\"" << fixed2(width)
       << "\" height=\"" << 18 * series.size() + 8
       << "\" fill=\"white\" fill-opacity=\"0.85\" stroke=\"#999999\"/>\n";
    for (size_t s = 0; s < series.size(); ++s) {
      const char* color = kColors[s % (sizeof(kColors) / sizeof(kColors[0]))];
      const double row = y + 16 + 18.0 * static_cast<double>(s);
      os << "<line x1=\"" << fixed2(x + 6) << "\" y1=\"" << fixed2(row - 4) << "\" x2=\""
         << fixed2(x + 28) << "\" y2=\"" << fixed2(row - 4) << "\" stroke=\"" << color
         << "\" stroke-width=\"2\"/>\n";
      os << "<text x=\"" << fixed2(x + 34) << "\" y=\"" << fixed2(row) << "\">"
         << escape_xml(series[s].name) << "</text>\n";
    }
  }
  os << "</svg>\n";
}

void write_svg_line_chart(const std::string& path, const std::string& title,
                          const std::string& x_label, const std::vector<PlotSeries>& series,
                          const std::string& y_label) {
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  ZRT_CHECK(file.is_open(), "cannot open '", path, "' for writing");
  write_svg_line_chart(file, title, x_label, series, y_label);
  file.flush();
  ZRT_CHECK(file.good(), "failed to write the chart to '", path, "'");
}

void write_svg_chart_stack(std::ostream& os, const std::vector<ChartSpec>& charts) {
  const double height = kHeight * static_cast<double>(std::max<size_t>(1, charts.size()));
  os << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << kWidth << "\" height=\"" << height
     << "\" viewBox=\"0 0 " << kWidth << " " << height << "\">\n";
  for (size_t i = 0; i < charts.size(); ++i) {
    os << "<g transform=\"translate(0," << kHeight * static_cast<double>(i) << ")\">\n";
    write_svg_line_chart(os, charts[i].title, charts[i].x_label, charts[i].series,
                         charts[i].y_label);
    os << "</g>\n";
  }
  os << "</svg>\n";
}

void write_svg_chart_stack(const std::string& path, const std::vector<ChartSpec>& charts) {
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  ZRT_CHECK(file.is_open(), "cannot open '", path, "' for writing");
  write_svg_chart_stack(file, charts);
  file.flush();
  ZRT_CHECK(file.good(), "failed to write the charts to '", path, "'");
}

}  // namespace zrt
