// Schedule previews for `zrt-config schedule`: the lr (and OneCycle momentum) of every optimizer
// step as CSV (report/schedule_plot.h draws the same curve as an SVG line chart). Uses
// LRScheduler, so previews follow
// Note [Scheduler step convention]: row k is the lr used by optimizer step k (group 0).
// Parsing configs and command lines is not done here (the tool's job).
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "sched/options.h"

namespace zrt::sched {

// Writes the header `step,lr` (`step,lr,momentum` when the schedule cycles momentum: OneCycle
// with cycle_momentum and an optimizer with betas; momentum = beta1) and one row per optimizer
// step 0..num_steps-1, numbers in shortest round-trip form (format_shortest). Group 0's values
// when there are several groups. Rows end with '\n'.
void write_schedule_csv(std::ostream& os, const SchedulerSpec& spec,
                        const std::vector<double>& base_lrs, int64_t num_steps,
                        bool optimizer_has_betas = true);

// Shortest decimal text that reads back as exactly `value` ("0.1", "1e-07", "65536").
std::string format_shortest(double value);

}  // namespace zrt::sched
