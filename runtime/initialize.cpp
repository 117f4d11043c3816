#include "runtime/initialize.h"

#include "comm/init.h"
#include "config/hf_plan.h"
#include "config/load.h"
#include "config/resolved.h"
#include "core/error.h"

namespace zrt {
namespace {

std::shared_ptr<comm::Comm> comm_or_default(std::shared_ptr<comm::Comm> comm) {
  return comm != nullptr ? std::move(comm) : comm::init_from_env();
}

}  // namespace

std::unique_ptr<Engine> initialize(std::shared_ptr<torch::nn::Module> model,
                                   const std::string& config, InitializeOptions options) {
  return initialize(std::move(model), config::load_config_source(config), std::move(options));
}

std::unique_ptr<Engine> initialize(std::shared_ptr<torch::nn::Module> model, const Json& config,
                                   InitializeOptions options) {
  std::shared_ptr<comm::Comm> comm = comm_or_default(std::move(options.comm));
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
  std::shared_ptr<comm::Comm> comm = comm_or_default(std::move(options.comm));
  ZRT_CHECK_AS(UsageError, args.deepspeed.has_value(),
               "initialize(model, TrainingArguments): --deepspeed CONFIG is required");
  config::TrainerConfigOptions tco;
  tco.world_size = comm->size();
  tco.model = options.model_dims;
  tco.num_training_steps = options.num_training_steps;
  tco.inference = options.inference;
  config::TrainerConfig tc = config::prepare_trainer_config(args, tco);
  EngineOptions eo;
  eo.param_groups = options.param_groups;
  if (eo.param_groups.empty() && args.weight_decay != 0.0) {
    // HF's create_optimizer: no weight decay for biases and normalization weights.
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
