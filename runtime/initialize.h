// zrt::initialize: the user entry point, like deepspeed.initialize. From a DeepSpeed config
// (path, JSON text, urlsafe base64 or a parsed Json) or from HF-style TrainingArguments with
// --deepspeed (the HF-Trainer "auto" rules, spec/deepspeed.md §3), it builds the Engine.
//
//   auto model = std::make_shared<MyModel>();
//   auto engine = zrt::initialize(model, "ds_config.json");
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "comm/comm.h"
#include "config/hf_trainer.h"
#include "config/training_args.h"
#include "core/json.h"
#include "runtime/engine.h"

namespace zrt {

struct InitializeOptions {
  // The communicator; default comm::init_from_env() (MPI under mpirun, else a world of one).
  std::shared_ptr<comm::Comm> comm;
  EngineOptions engine;
};

// Communicator options for a config: the environment's (ZRT_COMM_TIMEOUT, ZRT_DEBUG_COLLECTIVES)
// overridden by the config's "zrt" section, parsed strictly (config::resolve_comm_options: a bad
// value is a ConfigError naming the key). For programs that create the communicator themselves:
// comm::init_from_env(comm_options_for_config(config)).
comm::CommOptions comm_options_for_config(const Json& config);

// Collective: every rank must call it. `config` is a file path, a JSON text or a urlsafe-base64
// JSON text (spec §1.1). Throws ConfigError listing every problem of the config.
std::unique_ptr<Engine> initialize(std::shared_ptr<torch::nn::Module> model,
                                   const std::string& config, InitializeOptions options = {});
std::unique_ptr<Engine> initialize(std::shared_ptr<torch::nn::Module> model, const Json& config,
                                   InitializeOptions options = {});

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
