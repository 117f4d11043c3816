// StepReporter: what an engine shows about each optimizer step, in one place. DeepSpeed's
// monitors (csv_monitor and tensorboard, rank 0, runtime/monitor.h) get Train/Samples/* events;
// wall_clock_breakdown logs the step's timers and steps_per_print DeepSpeed's progress line.
// The engine hands it one StepRecord per optimizer step; the writers are created on rank 0 at
// the first record, so an engine that never steps writes nothing.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "config/resolved.h"
#include "runtime/engine_options.h"

namespace zrt {

class CsvMonitor;
class TensorBoardMonitor;

namespace runtime {

struct StepRecord {
  int64_t global_steps = 0;
  int64_t global_samples = 0;  // the monitors' x axis, as DeepSpeed's
  int64_t skipped_steps = 0;
  double loss = 0;                  // the mean of the step's micro-batch losses on this rank
  std::optional<double> last_loss;  // the last micro-batch's (DeepSpeed's progress line)
  std::vector<double> lr;           // per parameter group
  std::string momentum;             // the schedule's betas, ", mom=[...]" or ""
  std::optional<double> loss_scale;  // fp16 only
  StepTimes times;
  double samples_per_second = 0;
  double step_ms = 0;
};

class StepReporter {
 public:
  StepReporter(const config::ResolvedConfig& config, int rank);
  ~StepReporter();
  StepReporter(const StepReporter&) = delete;
  StepReporter& operator=(const StepReporter&) = delete;

  void record(const StepRecord& r);

 private:
  void write_monitors(const StepRecord& r);

  config::MonitorConfig csv_, tensorboard_config_;
  bool profile_ = false;  // activation_checkpointing.profile
  bool wall_clock_breakdown_ = false;
  std::optional<int64_t> steps_per_print_;
  int rank_ = 0;
  std::unique_ptr<CsvMonitor> monitor_;
  std::unique_ptr<TensorBoardMonitor> tensorboard_;
};

}  // namespace runtime
}  // namespace zrt
