#include "report/schedule_plot.h"

#include "report/svg_plot.h"
#include "sched/lr_scheduler.h"

namespace zrt::report {

namespace {

PlotSeries lr_series(const sched::SchedulerSpec& spec, const std::vector<double>& base_lrs,
                     int64_t num_steps) {
  PlotSeries series;
  series.name = "lr";
  series.ys = sched::lr_curve(spec, base_lrs, num_steps);
  for (int64_t k = 0; k < num_steps; ++k) series.xs.push_back(static_cast<double>(k));
  return series;
}

}  // namespace

namespace {

// The lr chart, and for a OneCycle that cycles momentum a second chart of beta1 below it.
std::vector<ChartSpec> schedule_charts(const sched::SchedulerSpec& spec,
                                       const std::vector<double>& base_lrs, int64_t num_steps,
                                       const std::string& title, bool optimizer_has_betas) {
  std::vector<ChartSpec> charts = {{title.empty() ? sched::schedule_name(spec) : title,
                                    "optimizer step",
                                    {lr_series(spec, base_lrs, num_steps)},
                                    "learning rate"}};
  const auto* one_cycle = std::get_if<sched::OneCycleOptions>(&spec);
  if (one_cycle == nullptr || !one_cycle->cycle_momentum || !optimizer_has_betas) return charts;
  sched::LRScheduler scheduler(spec, base_lrs, optimizer_has_betas);
  PlotSeries beta1;
  beta1.name = "momentum (beta1)";
  for (int64_t k = 0; k < num_steps; ++k) {
    if (k > 0) scheduler.step();
    if (!scheduler.get_momentum()) continue;
    beta1.xs.push_back(static_cast<double>(k));
    beta1.ys.push_back((*scheduler.get_momentum())[0].beta1);
  }
  charts.push_back({"OneCycle momentum", "optimizer step", {beta1}, "beta1"});
  return charts;
}

}  // namespace

void write_schedule_svg(std::ostream& os, const sched::SchedulerSpec& spec,
                        const std::vector<double>& base_lrs, int64_t num_steps,
                        const std::string& title, bool optimizer_has_betas) {
  write_svg_chart_stack(os, schedule_charts(spec, base_lrs, num_steps, title, optimizer_has_betas));
}

void write_schedule_svg(const std::string& path, const sched::SchedulerSpec& spec,
                        const std::vector<double>& base_lrs, int64_t num_steps,
                        const std::string& title, bool optimizer_has_betas) {
  write_svg_chart_stack(path,
                        schedule_charts(spec, base_lrs, num_steps, title, optimizer_has_betas));
}

}  // namespace zrt::report
