// Schedule previews: the CSV format (header, rows, momentum column, number format) and the SVG.
#include "sched/schedule_preview.h"

#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/error.h"
#include "golden.h"
#include "report/schedule_plot.h"

namespace zrt::sched {
namespace {

using test::near_rel;

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream is(text);
  for (std::string line; std::getline(is, line);) lines.push_back(line);
  return lines;
}

TEST(ScheduleCsv, WarmupLinearExactText) {
  WarmupLROptions o;
  o.warmup_min_lr = {0.0};
  o.warmup_max_lr = {1.0};
  o.warmup_num_steps = 4;
  o.warmup_type = WarmupType::kLinear;
  std::ostringstream os;
  write_schedule_csv(os, o, {0.5}, 7);
  EXPECT_EQ(os.str(), "step,lr\n0,0\n1,0\n2,0.25\n3,0.5\n4,0.75\n5,1\n6,1\n");
}

TEST(ScheduleCsv, OneCycleHasAMomentumColumn) {
  OneCycleOptions o;
  o.cycle_min_lr = {0.1};
  o.cycle_max_lr = {1.0};
  o.cycle_first_step_size = 4;
  o.decay_lr_rate = 0.5;
  o.decay_step_size = 2;
  std::ostringstream os;
  write_schedule_csv(os, o, {0.01}, 13);
  const std::vector<std::string> lines = split_lines(os.str());
  ASSERT_EQ(lines.size(), 14u);
  EXPECT_EQ(lines[0], "step,lr,momentum");
  EXPECT_EQ(lines[1], "0,0.1,0.8");
  const std::vector<double> lr = {0.1,   0.325, 0.55, 0.775,     1.0,        0.775, 0.55,
                                  0.325, 0.1,   0.08, 0.1 / 1.5, 0.1 / 1.75, 0.05};
  const std::vector<double> beta1 = {0.8,   0.875, 0.85, 0.825, 0.8, 0.825, 0.85,
                                     0.875, 0.9,   0.9,  0.9,   0.9, 0.9};
  for (size_t k = 0; k < lr.size(); ++k) {
    std::istringstream row(lines[k + 1]);
    std::string step, lr_text, mom_text;
    std::getline(row, step, ',');
    std::getline(row, lr_text, ',');
    std::getline(row, mom_text, ',');
    EXPECT_EQ(step, std::to_string(k));
    EXPECT_TRUE(near_rel(std::stod(lr_text), lr[k])) << lines[k + 1];
    EXPECT_TRUE(near_rel(std::stod(mom_text), beta1[k])) << lines[k + 1];
  }
  // Without momentum cycling there is no momentum column.
  o.cycle_momentum = false;
  std::ostringstream plain;
  write_schedule_csv(plain, o, {0.01}, 2);
  EXPECT_EQ(plain.str(), "step,lr\n0,0.1\n1,0.325\n");
  std::ostringstream sgd;
  o.cycle_momentum = true;
  write_schedule_csv(sgd, o, {0.01}, 1, /*optimizer_has_betas=*/false);
  EXPECT_EQ(sgd.str(), "step,lr\n0,0.1\n");
}

TEST(ScheduleCsv, HfScheduleRowsUseTheLambdaLrConvention) {
  HfScheduleOptions o;
  o.type = HfScheduleType::kLinear;
  o.num_warmup_steps = 2;
  o.num_training_steps = 4;
  std::ostringstream os;
  write_schedule_csv(os, o, {0.5}, 5);
  EXPECT_EQ(os.str(), "step,lr\n0,0\n1,0.25\n2,0.5\n3,0.25\n4,0\n");
}

TEST(ScheduleCsv, EmptyAndInvalid) {
  WarmupLROptions o;
  std::ostringstream os;
  write_schedule_csv(os, o, {1.0}, 0);
  EXPECT_EQ(os.str(), "step,lr\n");
  EXPECT_THROW(write_schedule_csv(os, o, {1.0}, -1), Error);
}

TEST(FormatShortest, RoundTrips) {
  EXPECT_EQ(format_shortest(0.5), "0.5");
  EXPECT_EQ(format_shortest(1e-7), "1e-07");
  EXPECT_EQ(format_shortest(65536.0), "65536");
  EXPECT_EQ(format_shortest(0.0), "0");
  const double third = 1.0 / 3.0;
  EXPECT_EQ(std::stod(format_shortest(third)), third);
}

TEST(ScheduleSvg, DrawsTheCurve) {
  WarmupCosineLROptions o;
  o.total_num_steps = 100;
  o.warmup_num_steps = 10;
  std::ostringstream os;
  report::write_schedule_svg(os, o, {1e-3}, 120);
  const std::string svg = os.str();
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("<polyline"), std::string::npos);
  EXPECT_NE(svg.find(">WarmupCosineLR</text>"), std::string::npos);
  EXPECT_NE(svg.find(">optimizer step</text>"), std::string::npos);
  EXPECT_EQ(svg.substr(svg.size() - 7), "</svg>\n");
  EXPECT_EQ(svg.find("momentum"), std::string::npos);
}

// OneCycle cycling momentum: a second chart with beta1 (the CSV's momentum column) below the lr.
TEST(ScheduleSvg, OneCycleAlsoDrawsTheMomentum) {
  OneCycleOptions o;
  o.cycle_min_lr = {1e-4};
  o.cycle_max_lr = {1e-2};
  o.cycle_first_step_size = 20;
  o.cycle_momentum = true;
  std::ostringstream os;
  report::write_schedule_svg(os, o, {1e-3}, 60);
  const std::string svg = os.str();
  EXPECT_NE(svg.find(">OneCycle momentum</text>"), std::string::npos) << svg.substr(0, 400);
  EXPECT_NE(svg.find(">momentum (beta1)</text>"), std::string::npos);
  size_t polylines = 0;
  for (size_t p = svg.find("<polyline"); p != std::string::npos; p = svg.find("<polyline", p + 1)) {
    ++polylines;
  }
  EXPECT_EQ(polylines, 2u);
  std::ostringstream without;
  report::write_schedule_svg(without, o, {1e-3}, 60, "", /*optimizer_has_betas=*/false);  // SGD
  EXPECT_EQ(without.str().find("momentum"), std::string::npos);
}

}  // namespace
}  // namespace zrt::sched
