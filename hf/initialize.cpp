#include "hf/initialize.h"

#include <utility>

#include "comm/init.h"
#include "config/hf_plan.h"
#include "core/error.h"
#include "runtime/initialize.h"

namespace zrt {

std::unique_ptr<Engine> initialize(std::shared_ptr<torch::nn::Module> model,
                                   const config::TrainingArguments& args,
                                   TrainerInitializeOptions options) {
  ZRT_CHECK_AS(UsageError, args.deepspeed.has_value() || options.deepspeed_config.has_value(),
               "initialize(model, TrainingArguments): --deepspeed CONFIG is required");
  // The config is loaded once: from options.deepspeed_config when the caller has it already.
  config::DeepSpeedConfig ds = options.deepspeed_config
                                   ? config::DeepSpeedConfig(*options.deepspeed_config)
                                   : config::DeepSpeedConfig::from_source(*args.deepspeed);
  // A communicator passed in keeps its own options; the one created here gets the config's.
  std::shared_ptr<comm::Comm> comm =
      options.comm ? std::move(options.comm)
                   : comm::init_from_env(comm_options_for_config(ds.json()));
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
