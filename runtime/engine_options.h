// What zrt::Engine is built and loaded with, beyond the config: optimizer parameter-group rules,
// the client's optimizer and scheduler (HF's Trainer), the options of load_checkpoint, and the
// engine's measurements (model-state bytes, step times).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/value.h"
#include "config/resolved.h"

namespace zrt {

// Optimizer parameter groups: parameters whose name a rule matches (first match wins) form a
// group with that rule's overrides; the others form the default group. HF's usual choice is
// `no_weight_decay_for({"bias", "LayerNorm.weight"})`.
struct ParamGroupRule {
  std::function<bool(const std::string& name)> match;
  std::optional<double> weight_decay;
  std::optional<double> lr;
};
ParamGroupRule no_weight_decay_for(std::vector<std::string> name_substrings);

struct LoadCheckpointOptions {
  bool load_optimizer_states = true;
  bool load_lr_scheduler_states = true;
  bool load_module_only = false;   // weights only; counters and optimizer state are not restored
  bool load_module_strict = true;  // every parameter and buffer must be present
};

struct LoadedCheckpoint {
  std::string path;          // the tag directory
  ckpt::Value client_state;  // the other top-level keys of the model-states file (spec §4.5)
};

struct EngineOptions {
  std::vector<ParamGroupRule> param_groups;
  // Used when the config has no "optimizer" (the HF Trainer creates one; spec §3.5).
  std::optional<optim::OptimizerSpec> client_optimizer;
  // Used when the config has no "scheduler" (HF schedules, spec §3.5).
  std::optional<sched::SchedulerSpec> client_scheduler;
};

namespace runtime {

// Bytes of model states this rank holds, counted from the tensors themselves.
struct ModelStateBytes {
  int64_t params = 0;        // trainable parameters (flat buffers or partitions)
  int64_t grads = 0;         // gradient buffers
  int64_t master = 0;        // fp32 master weights that are not the parameters themselves
  int64_t optimizer = 0;     // optimizer state (Adam moments)
  int64_t gathered = 0;      // stage 3: parameters currently gathered beyond the persistent ones
  int64_t swap_buffers = 0;  // NVMe offload: the aligned buffers sub-groups are streamed through
  int64_t swapped = 0;       // NVMe offload: bytes of masters and moments on disk (not in memory)
  int64_t total() const { return params + grads + master + optimizer + swap_buffers; }
};

// Milliseconds spent in the phases of one optimizer step (its micro-steps summed).
struct StepTimes {
  double fwd = 0, bwd_inner = 0, bwd_allreduce = 0, step = 0;
  double recompute = 0;  // activation_checkpointing.profile: part of bwd_inner
};

}  // namespace runtime
}  // namespace zrt
