#include "runtime/step_report.h"

#include <cmath>

#include "core/logging.h"
#include "core/strings.h"
#include "runtime/monitor.h"

namespace zrt::runtime {

StepReporter::StepReporter(const config::ResolvedConfig& config, int rank)
    : csv_(config.csv_monitor),
      tensorboard_config_(config.tensorboard),
      profile_(config.activation_checkpointing.profile),
      wall_clock_breakdown_(config.wall_clock_breakdown),
      steps_per_print_(config.steps_per_print),
      rank_(rank) {}

StepReporter::~StepReporter() = default;

void StepReporter::write_monitors(const StepRecord& r) {
  if (!monitor_ && csv_.enabled) {
    monitor_ = std::make_unique<CsvMonitor>(csv_.output_path, csv_.job_name);
  }
  if (!tensorboard_ && tensorboard_config_.enabled) {
    tensorboard_ = std::make_unique<TensorBoardMonitor>(tensorboard_config_.output_path,
                                                        tensorboard_config_.job_name);
  }
  const int64_t x = r.global_samples;
  std::vector<MonitorEvent> events = {{"Train/Samples/train_loss", r.loss, x},
                                      {"Train/Samples/lr", r.lr.empty() ? 0 : r.lr[0], x}};
  if (r.loss_scale) events.push_back({"Train/Samples/loss_scale", *r.loss_scale, x});
  if (profile_) events.push_back({"Train/Samples/elapsed_time_ms_recompute", r.times.recompute, x});
  if (wall_clock_breakdown_) {
    const StepTimes& t = r.times;
    events.push_back({"Train/Samples/elapsed_time_ms_forward", t.fwd, x});
    events.push_back({"Train/Samples/elapsed_time_ms_backward", t.bwd_inner + t.bwd_allreduce, x});
    events.push_back({"Train/Samples/elapsed_time_ms_backward_inner", t.bwd_inner, x});
    events.push_back({"Train/Samples/elapsed_time_ms_backward_allreduce", t.bwd_allreduce, x});
    events.push_back({"Train/Samples/elapsed_time_ms_step", t.step, x});
  }
  if (monitor_) monitor_->write_events(events);
  if (tensorboard_) tensorboard_->write_events(events);
}

void StepReporter::record(const StepRecord& r) {
  if (rank_ == 0 && (csv_.enabled || tensorboard_config_.enabled)) write_monitors(r);
  if (wall_clock_breakdown_) {
    const StepTimes& t = r.times;
    ZRT_LOG_INFO("time (ms) | fwd: ", t.fwd, " | bwd: ", t.bwd_inner + t.bwd_allreduce,
                 " | bwd_inner: ", t.bwd_inner, " | bwd_allreduce: ", t.bwd_allreduce,
                 " | step: ", t.step,
                 profile_ ? str(" | recompute (in bwd_inner): ", t.recompute) : std::string());
  }
  if (steps_per_print_ && *steps_per_print_ > 0 && r.global_steps % *steps_per_print_ == 0) {
    std::string lr = "[";
    for (double v : r.lr) lr += str(lr.size() > 1 ? ", " : "", v);
    lr += "]";
    ZRT_LOG_INFO("step=", r.global_steps, ", skipped=", r.skipped_steps, ", lr=", lr, r.momentum,
                 ", loss=", r.last_loss.value_or(NAN), ", samples/s=", r.samples_per_second,
                 ", step_ms=", r.step_ms);
  }
}

}  // namespace zrt::runtime
