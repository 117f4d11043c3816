// zrt-train's loss for a mixture-of-experts model (models/moe.h) with output_router_logits: cross
// entropy + router_aux_loss_coef · the load-balancing loss, weighted as HF's Trainer weighs it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include <torch/torch.h>

#include "config/training_args.h"
#include "hf/trainer.h"
#include "models/llama.h"

namespace zrt::tools {

// The load-balancing loss's weight, as a multiple of router_aux_loss_coef, while training and
// while evaluating (Note [The auxiliary loss in HF's Trainer] in moe_loss.cpp).
struct AuxLossScale {
  double train = 1, eval = 1;
};
AuxLossScale hf_trainer_aux_scale(const config::TrainingArguments& args, int world,
                                  int64_t accumulation);

// output_loss(model(ids, position_ids = input(x)), y) + coef · scale · load_balancing_loss(router logits), with
// `scale` read at each call (train or eval by the module's mode), so it may be set after the
// Trainer that calls the loss exists.
LossFn moe_causal_lm_loss(std::shared_ptr<models::LlamaForCausalLMImpl> model,
                              std::function<std::pair<at::Tensor, at::Tensor>(const at::Tensor&)> input,
                              OutputLossFn output_loss,
                              std::shared_ptr<const AuxLossScale> scale);

}  // namespace zrt::tools
