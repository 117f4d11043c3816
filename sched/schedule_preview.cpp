// Schedule previews: CSV rows of the lr per optimizer step (report/schedule_plot.h draws them).
#include "sched/schedule_preview.h"

#include <charconv>

#include "core/error.h"
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

}  // namespace zrt::sched
