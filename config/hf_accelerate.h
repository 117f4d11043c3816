// What accelerate (1.15) does to a DeepSpeed config on the HF Trainer's path, after transformers'
// HfTrainerDeepSpeedConfig (hf_trainer.h) and before DeepSpeed reads it. prepare_trainer_config
// (hf_plan.h) runs these in the Trainer's order; tests/peers/config_differential.py checks the
// result against the installed accelerate.
//
//   1. accelerate_plugin_rules:      DeepSpeedPlugin(hf_ds_config=...).__post_init__, which
//                                    TrainingArguments runs right after trainer_config_process.
//   2. accelerate_mixed_precision:   DeepSpeedPlugin.set_mixed_precision(args.mixed_precision),
//                                    when the Trainer's Accelerator starts.
//   3. accelerate_prepare_fill:      Accelerator._prepare_deepspeed's last fill before
//                                    deepspeed.initialize (after deepspeed_init).
// accelerate's environment variables (ACCELERATE_DEEPSPEED_ZERO_STAGE, ...) are not read: their
// defaults apply, as for a Trainer started without `accelerate launch`.
#pragma once

#include <cstdint>
#include <optional>

#include "config/hf_trainer.h"
#include "config/training_args.h"

namespace zrt::config {

// Step 1: a config without "zero_optimization" is an error ("Please specify the ZeRO
// optimization config in the DeepSpeed config."); a missing gradient_accumulation_steps becomes
// 1; "auto" in zero_optimization.stage becomes 2, in the offload devices and nvme paths "none",
// in stage3_gather_16bit_weights_on_model_save false. steps_per_print is removed (accelerate
// writes inf: DeepSpeed never prints its progress line under the Trainer).
void accelerate_plugin_rules(HfTrainerDeepSpeedConfig& hf);

// Step 2, with accelerate's mixed precision "fp16" (--fp16), "bf16" (--bf16) or "no": --fp16
// creates a missing "fp16" section as {"enabled": true, "auto_cast": true}, --bf16 a missing
// "bf16" as {"enabled": true}; the other type enabled in the config is an error; any section of
// the two still missing is added as {"enabled": false}; "auto" in fp16.enabled / bf16.enabled
// becomes whether the mixed precision is that type.
void accelerate_mixed_precision(HfTrainerDeepSpeedConfig& hf, const TrainingArguments& args);

// What the optimizer and scheduler the Trainer hands to accelerate give to step 3.
struct AcceleratePrepareInputs {
  int world_size = 1;
  ModelDims model;
  bool config_optimizer = false;       // a DummyOptim (the config has "optimizer")
  bool config_scheduler = false;       // a DummyScheduler without lr_scheduler_callable
  std::optional<double> optimizer_lr;  // the lr of the optimizer the scheduler is built on
  bool num_training_steps_known = true;
};

// Step 3: every "auto" still in the config is replaced from accelerate's values (gradient
// clipping 1.0, stage3_gather_16bit_weights_on_model_save false, the batch sizes, the three
// hidden-size keys at any stage, DummyOptim's lr 0.001 and weight decay 0, DummyScheduler's
// warmup 0 -> lr, max(1, 0) warmup steps); any other "auto" is accelerate's error
// "`KEY` not found in kwargs. ..." (all of them in one ConfigError). With
// num_training_steps_known false the scheduler's step keys are left for resolve_config, whose
// message names --num_training_steps.
void accelerate_prepare_fill(HfTrainerDeepSpeedConfig& hf, const TrainingArguments& args,
                             const AcceleratePrepareInputs& inputs);

}  // namespace zrt::config
