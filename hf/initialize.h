// zrt::initialize from HF-style TrainingArguments with --deepspeed: the HF Trainer's side of a
// DeepSpeed config ("auto" values filled from the arguments, mismatches refused;
// docs/DEEPSPEED.md §3) and its optimizer/scheduler plan, then the Engine. The Trainer
// (hf/trainer.h) builds its engine through it.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "comm/comm.h"
#include "config/hf_trainer.h"
#include "config/training_args.h"
#include "core/json.h"
#include "runtime/engine.h"

namespace zrt {

struct TrainerInitializeOptions {
  std::shared_ptr<comm::Comm> comm;
  config::ModelDims model_dims;               // for the hidden-size "auto" keys
  std::optional<int64_t> num_training_steps;  // default: args.max_steps when > 0
  // Default: as transformers, no weight decay for biases and norms when HF builds the optimizer
  // (no "optimizer" section); one group, all decaying, when the config's optimizer is used.
  std::vector<ParamGroupRule> param_groups;
  // HF's deepspeed_init(inference=True): ZeRO-3 only, the optimizer and scheduler are dropped.
  bool inference = false;
  // args.deepspeed already loaded (config::load_config_source) by a caller that needed it for
  // the communicator; unset: loaded here. Either way the file is read once.
  std::optional<Json> deepspeed_config;
};

// Collective. The HF-Trainer path: args.deepspeed's config filled from `args` (auto values,
// mismatch errors), the optimizer/scheduler plan of spec §3.5 (HF's AdamW from the arguments
// when the config has no optimizer, HF's schedule when it has no scheduler).
std::unique_ptr<Engine> initialize(std::shared_ptr<torch::nn::Module> model,
                                   const config::TrainingArguments& args,
                                   TrainerInitializeOptions options = {});

}  // namespace zrt
