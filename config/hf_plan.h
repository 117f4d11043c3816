// What the HF Trainer builds around a DeepSpeed config (docs/DEEPSPEED.md §3.5, §3.6): who
// creates the optimizer and the LR scheduler, ZeRO-3 inference mode, and one call that runs the
// whole HF-Trainer path (process -> accelerate -> finalize -> plan or inference -> accelerate ->
// resolve).
//
// Inference mode faithfully deletes the sections "optimizer" and "lr_scheduler", as transformers
// does. DeepSpeed's scheduler key is "scheduler", so a "scheduler" section survives inference
// (it is unused: no optimizer steps happen).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "config/hf_trainer.h"
#include "config/resolved.h"
#include "config/training_args.h"
#include "optim/options.h"
#include "sched/options.h"

namespace zrt::config {

// The four optimizer/scheduler combinations of transformers' deepspeed_optim_sched.
enum class OptimSchedCase {
  kConfigOptimizerConfigScheduler,  // DeepSpeed builds both from the config
  kConfigOptimizerHfScheduler,      // DeepSpeed optimizer, HF schedule (lr_scheduler_type)
  kHfOptimizerConfigScheduler,      // HF optimizer, DeepSpeed schedule from the config
  kHfOptimizerHfScheduler,          // HF builds both
};

const char* optim_sched_case_name(OptimSchedCase c);

struct OptimSchedPlan {
  OptimSchedCase which = OptimSchedCase::kConfigOptimizerConfigScheduler;
  std::optional<optim::OptimizerSpec> hf_optimizer;      // set when HF creates the optimizer
  std::optional<sched::HfScheduleOptions> hf_scheduler;  // set when HF creates the schedule
  std::vector<std::string> notes;                        // also logged at info level
};

// HF's optimizer from --optim (adamw_torch, adamw_torch_fused: torch AdamW; sgd: torch SGD)
// with the arguments' lr, betas, eps and weight decay (HF applies the decay to the parameter
// groups it chooses). ConfigError for optimizers ZeroRT does not implement (adafactor, ...).
optim::OptimizerSpec hf_optimizer_from_args(const TrainingArguments& args);

// HF's get_scheduler() arguments: lr_scheduler_type, get_warmup_steps(N), N, and the
// lr_scheduler_kwargs (num_cycles, power, lr_end). ConfigError for schedule types ZeroRT does
// not implement.
sched::HfScheduleOptions hf_schedule_from_args(const TrainingArguments& args,
                                               int64_t num_training_steps);

// spec §3.5. Decides the case; when HF creates the optimizer it sets
// "zero_allow_untested_optimizer": true in the config. "--adafactor" together with an
// "optimizer" section is a ConfigError. num_training_steps unset: the HF schedule gets 0 steps
// and a note says so.
OptimSchedPlan deepspeed_optim_sched(HfTrainerDeepSpeedConfig& hf, const TrainingArguments& args,
                                     std::optional<int64_t> num_training_steps);

// spec §3.6 inference: ZeRO-3 only ("ZeRO inference only makes sense with ZeRO Stage 3 -
// please adjust your config"), then deletes "optimizer" and "lr_scheduler" (see above).
void prepare_inference(HfTrainerDeepSpeedConfig& hf);

struct TrainerConfigOptions {
  int world_size = 1;
  ModelDims model;
  std::optional<int64_t> num_training_steps;  // unset: max_steps when > 0
  bool inference = false;
};

struct TrainerConfig {
  Json filled;                         // the DeepSpeed config after the HF layer
  std::optional<OptimSchedPlan> plan;  // unset in inference mode
  ResolvedConfig resolved;
};

// The HF-Trainer path in one call, in the Trainer's order: trainer_config_process, accelerate's
// DeepSpeedPlugin rules and mixed precision (hf_accelerate.h), trainer_config_finalize, inference
// or the optimizer/scheduler plan, accelerate's last fill, resolve_config. On `ds` (or on
// args.deepspeed loaded with DeepSpeedConfig::from_source when ds is not given; UsageError if
// neither).
TrainerConfig prepare_trainer_config(const TrainingArguments& args,
                                     const TrainerConfigOptions& options,
                                     std::optional<DeepSpeedConfig> ds = std::nullopt);

}  // namespace zrt::config
