#include "tools/moe_loss.h"

#include <string>
#include <utility>
#include <vector>

namespace zrt::tools {

// Note [The auxiliary loss in HF's Trainer]
// transformers' *MoeForCausalLM returns cross entropy + router_aux_loss_coef · aux for each
// micro-batch, its cross entropy a sum divided by the step's token count (num_items_in_batch,
// gathered over the ranks with average_tokens_across_devices, the default). The Trainer then
// multiplies the loss by the world size (average_tokens_across_devices) and does not divide it by
// the gradient accumulation steps (the token count already spans them). The cross entropy comes
// out as the step's token mean; the auxiliary term, added inside the model, is weighted
// coef · world size · accumulation steps in the gradient and the logged loss, and coef · world
// size in evaluation (one batch's token count, scaled alike). zrt-train uses those weights, so
// the two agree step by step (tests/peers/hf_clm.py); without average_tokens_across_devices the
// world size drops out of both. (DeepSpeed's own loop, engine.backward of the model's loss,
// weighs it coef: the mean over ranks and accumulation steps.)
AuxLossScale hf_trainer_aux_scale(const config::TrainingArguments& args, int world,
                                  int64_t accumulation) {
  AuxLossScale scale;
  scale.eval = args.average_tokens_across_devices ? world : 1;
  scale.train = scale.eval * static_cast<double>(accumulation);
  return scale;
}

LossFn moe_causal_lm_loss(std::shared_ptr<models::LlamaForCausalLMImpl> model,
                              std::function<std::pair<at::Tensor, at::Tensor>(const at::Tensor&)> input,
                              OutputLossFn output_loss,
                              std::shared_ptr<const AuxLossScale> scale) {
  return [model = std::move(model), input = std::move(input), output_loss = std::move(output_loss),
          scale = std::move(scale)](torch::nn::Module& module, const at::Tensor& x,
                                    const at::Tensor& y) {
    const models::MoeConfig& moe = model->config.moe;
    std::vector<at::Tensor> router_logits;
    const auto [ids, positions] = input(x);
    const at::Tensor logits = model->forward(ids, nullptr, &router_logits, positions);
    const double weight =
        moe.router_aux_loss_coef * (module.is_training() ? scale->train : scale->eval);
    return output_loss(logits, y) + weight * models::load_balancing_loss(router_logits, moe);
  };
}

}  // namespace zrt::tools
