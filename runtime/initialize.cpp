#include "runtime/initialize.h"

#include "comm/init.h"
#include "config/hf_plan.h"
#include "config/load.h"
#include "config/resolved.h"
#include "core/error.h"

namespace zrt {

comm::CommOptions comm_options_for_config(const Json& config);

namespace {

// The communicator initialize() creates gets the config's "zrt" section (comm_timeout,
// debug_collectives) on top of the environment's; a communicator passed in keeps its own.
std::shared_ptr<comm::Comm> comm_or_default(std::shared_ptr<comm::Comm> comm, const Json& config) {
  if (comm != nullptr) return comm;
  return comm::init_from_env(comm_options_for_config(config));
}

}  // namespace

comm::CommOptions comm_options_for_config(const Json& config) {
  return config::resolve_comm_options(config);  // strict, as resolve_config reads it
}

std::unique_ptr<Engine> initialize(std::shared_ptr<torch::nn::Module> model,
                                   const std::string& config, InitializeOptions options) {
  return initialize(std::move(model), config::load_config_source(config), std::move(options));
}

std::unique_ptr<Engine> initialize(std::shared_ptr<torch::nn::Module> model, const Json& config,
                                   InitializeOptions options) {
  std::shared_ptr<comm::Comm> comm = comm_or_default(std::move(options.comm), config);
  config::ResolveOptions ro;
  ro.world_size = comm->size();
  ro.client_optimizer = options.engine.client_optimizer.has_value();
  config::ResolvedConfig resolved = config::resolve_config(config, ro);
  return std::make_unique<Engine>(std::move(model), std::move(resolved), std::move(comm),
                                  std::move(options.engine));
}

std::unique_ptr<Engine> initialize(std::shared_ptr<torch::nn::Module> model,
                                   const config::TrainingArguments& args,
                                   TrainerInitializeOptions options) {
  ZRT_CHECK_AS(UsageError, args.deepspeed.has_value() || options.deepspeed_config.has_value(),
               "initialize(model, TrainingArguments): --deepspeed CONFIG is required");
  // The config is loaded once: from options.deepspeed_config when the caller has it already.
  config::DeepSpeedConfig ds = options.deepspeed_config
                                   ? config::DeepSpeedConfig(*options.deepspeed_config)
                                   : config::DeepSpeedConfig::from_source(*args.deepspeed);
  std::shared_ptr<comm::Comm> comm = comm_or_default(std::move(options.comm), ds.json());
  config::TrainerConfigOptions tco;
  tco.world_size = comm->size();
  tco.model = options.model_dims;
  tco.num_training_steps = options.num_training_steps;
  tco.inference = options.inference;
  config::TrainerConfig tc = config::prepare_trainer_config(args, tco, std::move(ds));
  EngineOptions eo;
  eo.param_groups = options.param_groups;
  const bool hf_optimizer = tc.plan && tc.plan->hf_optimizer;
  if (eo.param_groups.empty() && args.weight_decay != 0.0 && hf_optimizer) {
    // HF's create_optimizer: no weight decay for biases and normalization weights. Only when HF
    // builds the optimizer: with an "optimizer" section transformers hands DeepSpeed all the
    // parameters in one group (accelerate's DummyOptim), and the decay applies to every one.
    eo.param_groups.push_back(no_weight_decay_for({"bias", "norm", "LayerNorm", "ln_"}));
  }
  if (tc.plan) {
    eo.client_optimizer = tc.plan->hf_optimizer;
    if (tc.plan->hf_scheduler) eo.client_scheduler = *tc.plan->hf_scheduler;
  }
  return std::make_unique<Engine>(std::move(model), std::move(tc.resolved), std::move(comm),
                                  std::move(eo));
}

}  // namespace zrt
