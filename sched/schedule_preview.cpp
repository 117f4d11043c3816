// Schedule previews: CSV rows and an SVG chart of the lr per optimizer step.
#include "sched/schedule_preview.h"

#include <charconv>

#include "core/error.h"
#include "core/svg_plot.h"
#include "sched/lr_scheduler.h"

namespace zrt::sched {

std::string format_shortest(double value) {
  char buffer[64];
  const auto result = std::to_chars(buffer, buffer + sizeof(buffer), value);
  ZRT_INTERNAL_ASSERT(result.ec == std::errc(), "to_chars failed");
  return std::string(buffer, result.ptr);
}

void write_schedule_csv(std::ostream& os, const SchedulerSpec& spec,
                        const std::vector<double>& base_lrs, int64_t num_steps,
                        bool optimizer_has_betas) {
  ZRT_CHECK(num_steps >= 0, "schedule preview: num_training_steps must be >= 0, got ", num_steps);
  LRScheduler scheduler(spec, base_lrs, optimizer_has_betas);
  // Momentum is cycled exactly when the scheduler writes betas at construction (or first step).
  const auto* one_cycle = std::get_if<OneCycleOptions>(&spec);
  const bool momentum = one_cycle != nullptr && one_cycle->cycle_momentum && optimizer_has_betas;
  os << (momentum ? "step,lr,momentum\n" : "step,lr\n");
  for (int64_t k = 0; k < num_steps; ++k) {
    if (k > 0) scheduler.step();
    os << k << ',' << format_shortest(scheduler.get_lr()[0]);
    if (momentum) {
      const auto& betas = scheduler.get_momentum();
      // Unset only for a OneCycle resumed at last_batch_iteration != -1 before its first step.
      os << ',' << (betas ? format_shortest((*betas)[0].beta1) : std::string());
    }
    os << '\n';
  }
}

namespace {

PlotSeries lr_series(const SchedulerSpec& spec, const std::vector<double>& base_lrs,
                     int64_t num_steps) {
  PlotSeries series;
  series.name = "lr";
  series.ys = lr_curve(spec, base_lrs, num_steps);
  for (int64_t k = 0; k < num_steps; ++k) series.xs.push_back(static_cast<double>(k));
  return series;
}

}  // namespace

namespace {

// The lr chart, and for a OneCycle that cycles momentum a second chart of beta1 below it.
std::vector<ChartSpec> schedule_charts(const SchedulerSpec& spec,
                                       const std::vector<double>& base_lrs, int64_t num_steps,
                                       const std::string& title, bool optimizer_has_betas) {
  std::vector<ChartSpec> charts = {{title.empty() ? schedule_name(spec) : title, "optimizer step",
                                    {lr_series(spec, base_lrs, num_steps)}, "learning rate"}};
  const auto* one_cycle = std::get_if<OneCycleOptions>(&spec);
  if (one_cycle == nullptr || !one_cycle->cycle_momentum || !optimizer_has_betas) return charts;
  LRScheduler scheduler(spec, base_lrs, optimizer_has_betas);
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

void write_schedule_svg(std::ostream& os, const SchedulerSpec& spec,
                        const std::vector<double>& base_lrs, int64_t num_steps,
                        const std::string& title, bool optimizer_has_betas) {
  write_svg_chart_stack(os, schedule_charts(spec, base_lrs, num_steps, title, optimizer_has_betas));
}

void write_schedule_svg(const std::string& path, const SchedulerSpec& spec,
                        const std::vector<double>& base_lrs, int64_t num_steps,
                        const std::string& title, bool optimizer_has_betas) {
  write_svg_chart_stack(path,
                        schedule_charts(spec, base_lrs, num_steps, title, optimizer_has_betas));
}

}  // namespace zrt::sched
