// CheckpointAccess: the part of an Engine that only its checkpointer
// (runtime/engine_checkpointer.h) may touch — the file-system seam, whether a backward is pending,
// and the counters and LR scheduler state a load restores. Internal to runtime/.
#pragma once

#include <cstdint>

#include "core/json.h"
#include "runtime/engine.h"

namespace zrt::runtime {

class CheckpointAccess {
 public:
  explicit CheckpointAccess(Engine& engine) : engine_(engine) {}

  // The file-system seam every checkpoint read and write goes through.
  ckpt::Storage& storage() const;
  // Whether backward() ran since the last step() (checkpoints refuse to save or load then).
  bool backward_pending() const;
  // Not collective. The micro-step count is left as it is.
  void restore_counters(int64_t global_steps, int64_t global_samples, int64_t skipped_steps) const;
  // Restores the LR scheduler's state and applies its current lr (and betas) to the optimizer.
  // Requires engine.lr_scheduler() != nullptr.
  void load_lr_scheduler_state(const Json& state) const;

 private:
  Engine& engine_;
};

}  // namespace zrt::runtime
