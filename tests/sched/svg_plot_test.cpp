// report/svg_plot: the document is well-formed XML (balanced tags, escaped text), lines break at
// non-finite points, ticks are "nice", and file output reports failures.
#include "report/svg_plot.h"

#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/error.h"

namespace zrt {
namespace {

// Checks that every element is closed in order; returns "" or the first problem.
std::string check_balanced(const std::string& xml) {
  std::vector<std::string> open;
  size_t pos = 0;
  while ((pos = xml.find('<', pos)) != std::string::npos) {
    const size_t end = xml.find('>', pos);
    if (end == std::string::npos) return "unterminated tag";
    const std::string tag = xml.substr(pos + 1, end - pos - 1);
    if (tag.empty()) return "empty tag";
    if (tag[0] == '/') {
      if (open.empty() || open.back() != tag.substr(1)) return "unexpected </" + tag.substr(1);
      open.pop_back();
    } else if (tag.back() != '/') {
      open.push_back(tag.substr(0, tag.find(' ')));
    }
    pos = end + 1;
  }
  return open.empty() ? "" : "unclosed <" + open.back();
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t pos = text.find(what); pos != std::string::npos; pos = text.find(what, pos + 1)) ++n;
  return n;
}

std::string chart(const std::vector<PlotSeries>& series, const std::string& title = "loss") {
  std::ostringstream os;
  write_svg_line_chart(os, title, "step", series, "value");
  return os.str();
}

TEST(SvgPlot, WellFormedWithAxesLegendAndLines) {
  PlotSeries train{"train <loss>", {0, 1, 2, 3}, {2.0, 1.5, 1.2, 1.1}};
  PlotSeries eval{"eval & test", {0, 2}, {2.1, 1.4}};
  const std::string svg = chart({train, eval}, "Loss \"curve\"");
  EXPECT_EQ(svg.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\"", 0), 0u);
  EXPECT_EQ(check_balanced(svg), "");
  EXPECT_EQ(count(svg, "<polyline"), 2u);
  EXPECT_NE(svg.find("train &lt;loss&gt;"), std::string::npos);
  EXPECT_NE(svg.find("eval &amp; test"), std::string::npos);
  EXPECT_NE(svg.find("Loss &quot;curve&quot;"), std::string::npos);
  EXPECT_NE(svg.find(">step</text>"), std::string::npos);
  EXPECT_NE(svg.find(">value</text>"), std::string::npos);
  // Four points in the first polyline.
  const size_t points = svg.find("points=\"");
  const std::string list = svg.substr(points + 8, svg.find('"', points + 8) - points - 8);
  EXPECT_EQ(count(list, ","), 4u);
}

TEST(SvgPlot, NonFinitePointsBreakTheLine) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  PlotSeries s{
      "loss", {0, 1, 2, 3, 4, 5}, {1, 2, nan, 3, 4, std::numeric_limits<double>::infinity()}};
  const std::string svg = chart({s});
  EXPECT_EQ(count(svg, "<polyline"), 2u);
  EXPECT_EQ(check_balanced(svg), "");
  PlotSeries dot{"one", {7}, {0.5}};
  EXPECT_EQ(count(chart({dot}), "<circle"), 1u);
}

TEST(SvgPlot, EmptyAndConstantSeries) {
  EXPECT_EQ(check_balanced(chart({})), "");
  EXPECT_EQ(check_balanced(chart({PlotSeries{"none", {}, {}}})), "");
  const std::string flat = chart({PlotSeries{"flat", {0, 1, 2}, {3, 3, 3}}});
  EXPECT_EQ(count(flat, "<polyline"), 1u);
  EXPECT_EQ(flat.find("nan"), std::string::npos);
  EXPECT_EQ(flat.find("inf"), std::string::npos);
}

TEST(SvgPlot, MismatchedSeriesIsAnError) {
  EXPECT_THROW(chart({PlotSeries{"bad", {0, 1}, {1}}}), Error);
}

TEST(SvgPlot, NiceTicks) {
  const std::vector<double> unit = nice_ticks(0, 1);
  ASSERT_EQ(unit.size(), 6u);
  for (size_t k = 0; k < unit.size(); ++k) EXPECT_NEAR(unit[k], 0.2 * k, 1e-12);
  EXPECT_EQ(nice_ticks(0, 1000), (std::vector<double>{0, 200, 400, 600, 800, 1000}));
  for (auto [lo, hi] : std::vector<std::pair<double, double>>{
           {-3.7, 12.2}, {1e-7, 1e-3}, {5, 5}, {0, 0}, {0.99, 1.01}, {-1, -1e-9}}) {
    const std::vector<double> t = nice_ticks(lo, hi);
    SCOPED_TRACE(std::to_string(lo) + ".." + std::to_string(hi));
    ASSERT_GE(t.size(), 2u);
    EXPECT_LE(t.size(), 7u);
    EXPECT_LE(t.front(), lo);
    EXPECT_GE(t.back(), hi);
  }
  EXPECT_THROW(nice_ticks(2, 1), Error);
}

TEST(SvgPlot, WritesFiles) {
  const std::string path = ::testing::TempDir() + "zrt_svg_plot_test.svg";
  write_svg_line_chart(path, "t", "x", {PlotSeries{"s", {0, 1}, {0, 1}}}, "y");
  std::ifstream in(path);
  std::stringstream content;
  content << in.rdbuf();
  EXPECT_EQ(content.str().rfind("<svg", 0), 0u);
  EXPECT_NE(content.str().find("<polyline"), std::string::npos);
  std::remove(path.c_str());
  EXPECT_THROW(write_svg_line_chart("/nonexistent-dir/x.svg", "t", "x", {}, "y"), Error);
}

}  // namespace
}  // namespace zrt
