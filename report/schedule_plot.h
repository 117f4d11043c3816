// The SVG chart of a schedule preview (`zrt-config schedule --plot`): the lr of every optimizer
// step, the same rows as sched::write_schedule_csv.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "sched/options.h"

namespace zrt::report {

// Plots group 0's lr against the optimizer step (same rows as the CSV) as an SVG document;
// `title` defaults to the schedule's name. When the CSV has a momentum column, a second chart
// below the first plots it (beta1; its scale is not the lr's).
void write_schedule_svg(std::ostream& os, const sched::SchedulerSpec& spec,
                        const std::vector<double>& base_lrs, int64_t num_steps,
                        const std::string& title = "", bool optimizer_has_betas = true);
void write_schedule_svg(const std::string& path, const sched::SchedulerSpec& spec,
                        const std::vector<double>& base_lrs, int64_t num_steps,
                        const std::string& title = "", bool optimizer_has_betas = true);

}  // namespace zrt::report
