// What zrt::Engine is built and loaded with, beyond the config: optimizer parameter-group rules,
// the client's optimizer and scheduler (HF's Trainer), and the options of load_checkpoint.
#pragma once

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

}  // namespace zrt
