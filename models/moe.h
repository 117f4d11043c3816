// Mixture-of-experts layers of models/llama.h's MoE families: Mixtral, Qwen2-MoE, Qwen3-MoE.
//
// Note [Mixture of experts]
// A sparse layer replaces the decoder layer's MLP (Mixtral: every layer, registered as
// block_sparse_moe; Qwen: layer i when (i + 1) % decoder_sparse_step == 0 and i is not in
// mlp_only_layers, registered as mlp). As transformers computes it, for the tokens x (T, H):
// - Router: logits = x · gate.weightᵀ (E, H; no bias) in the activations' dtype; p = softmax in
//   fp32; the top-k experts by p and their weights w. Mixtral always divides w by its sum and
//   keeps it in fp32; Qwen divides only with norm_topk_prob and casts w to the logits' dtype.
// - Experts: each a SwiGLU down(silu(gate(x)) · up(x)) (Mixtral's w1 = gate, w3 = up, w2 =
//   down; Qwen's gate_proj, up_proj, down_proj). out[t] = Σ_k w[t,k] · expert_{i[t,k]}(x[t]),
//   summed in expert order; experts no token chose do not run (and get no gradient).
// - Qwen2-MoE's shared expert (a SwiGLU of shared_expert_intermediate_size) runs on every token,
//   scaled by sigmoid(shared_expert_gate(x)) (one scalar per token), added to out.
// - Load balancing (output_router_logits): over the router logits of every sparse layer
//   together and the tokens that count (attention mask; all without one), with p = softmax of
//   the logits in their own dtype and its top-k: frac[e] = (routes to e) / (tokens), prob[e] =
//   (Σ p[·, e]) / (tokens), both pooled over the layers; aux = E · Σ_e frac[e] · prob[e] (K for a
//   perfectly balanced router). The training loss is cross entropy + router_aux_loss_coef · aux.
// Parameter names are those of transformers' saved checkpoints (one tensor per expert and
// projection), so HF folders load and save by name. The layer is inside its decoder layer's
// ZeRO-3 unit: all experts are gathered together whichever the tokens choose, which is what
// DeepSpeed's leaf modules (its default classes are these three blocks) ensure there.
#pragma once

#include <cmath>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include <torch/torch.h>

#include "models/llama_config.h"
#include "peft/lora.h"

namespace zrt::models {

// A projection x Wᵀ held as a module's `weight` (out × in), but not a torch::nn::Linear: the
// routers and the routed experts, which transformers keeps as plain parameters (its fused expert
// tensors, its TopKRouter), so that LoRA's target matching and "all-linear" (peft/lora.h) pass
// them by as PEFT does. Initialised as torch::nn::Linear initialises its weight.
struct ProjectionImpl : torch::nn::Module, zrt::lora::Unadaptable {
  ProjectionImpl(int64_t in, int64_t out) {
    weight = register_parameter("weight", torch::empty({out, in}));
    torch::NoGradGuard no_grad;
    torch::nn::init::kaiming_uniform_(weight, std::sqrt(5.0));
  }
  torch::Tensor forward(const torch::Tensor& x) { return torch::linear(x, weight); }
  torch::Tensor weight;
};
TORCH_MODULE(Projection);

// A SwiGLU feed-forward without biases: down(silu(gate(x)) · up(x)), its three projections
// registered under the given names: Linear layers (LoRA can adapt them) for Qwen2-MoE's shared
// expert, plain projections for the routed experts.
template <typename Proj>
struct SwigluImpl : torch::nn::Module {
  SwigluImpl(int64_t hidden, int64_t width, const char* gate_name, const char* up_name,
             const char* down_name) {
    gate = register_module(gate_name, make(hidden, width));
    up = register_module(up_name, make(hidden, width));
    down = register_module(down_name, make(width, hidden));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    return apply(down, torch::silu(apply(gate, x)) * apply(up, x));
  }
  static Proj make(int64_t in, int64_t out) {
    if constexpr (std::is_same_v<Proj, torch::nn::Linear>) {
      return Proj(torch::nn::LinearOptions(in, out).bias(false));
    } else {
      return Proj(in, out);
    }
  }
  static torch::Tensor apply(Proj p, const torch::Tensor& x) {
    if constexpr (std::is_same_v<Proj, torch::nn::Linear>) {
      return zrt::lora::linear(p, x);
    } else {
      return p->forward(x);
    }
  }
  Proj gate{nullptr}, up{nullptr}, down{nullptr};
};
using MoeExpertImpl = SwigluImpl<Projection>;
using SharedExpertImpl = SwigluImpl<torch::nn::Linear>;
TORCH_MODULE(MoeExpert);
TORCH_MODULE(SharedExpert);

// The sparse layer (Note [Mixture of experts]) of a Mixtral, Qwen2-MoE or Qwen3-MoE config.
struct SparseMoeBlockImpl : torch::nn::Module {
  explicit SparseMoeBlockImpl(const LlamaConfig& c) : moe(c.moe), mixtral(c.model_type == "mixtral") {
    using torch::nn::LinearOptions;
    const int64_t h = c.hidden_size;
    gate = register_module("gate", Projection(h, moe.num_experts));
    experts = register_module("experts", torch::nn::ModuleList());
    for (int64_t e = 0; e < moe.num_experts; ++e) {
      experts->push_back(mixtral ? MoeExpert(h, moe.expert_intermediate_size, "w1", "w3", "w2")
                                 : MoeExpert(h, moe.expert_intermediate_size, "gate_proj",
                                             "up_proj", "down_proj"));
    }
    if (moe.shared_expert_intermediate_size > 0) {
      shared_expert = register_module(
          "shared_expert",
          SharedExpert(h, moe.shared_expert_intermediate_size, "gate_proj", "up_proj",
                       "down_proj"));
      shared_expert_gate =
          register_module("shared_expert_gate", torch::nn::Linear(LinearOptions(h, 1).bias(false)));
    }
  }
  // x: (b, t, H) → (the layer's output (b, t, H), the router logits (b·t, E)).
  std::tuple<torch::Tensor, torch::Tensor> forward(const torch::Tensor& x) {
    const auto flat = x.reshape({-1, x.size(-1)});
    const auto logits = gate->forward(flat);
    auto [weights, chosen] = torch::softmax(logits.to(torch::kFloat), -1).topk(moe.num_experts_per_tok, -1);
    if (moe.norm_topk_prob) weights = weights / weights.sum(-1, /*keepdim=*/true);
    if (!mixtral) weights = weights.to(logits.scalar_type());
    auto out = torch::zeros_like(flat);
    for (int64_t e = 0; e < moe.num_experts; ++e) {
      const auto routes = (chosen == e).nonzero();  // (token, k) pairs, token-major
      if (routes.size(0) == 0) continue;
      const auto token = routes.select(1, 0), k = routes.select(1, 1);
      auto y = experts->ptr<MoeExpertImpl>(e)->forward(flat.index_select(0, token));
      y = y * weights.index({token, k}).unsqueeze(-1);
      out.index_add_(0, token, y.to(out.scalar_type()));
    }
    if (shared_expert) {
      out = out + torch::sigmoid(zrt::lora::linear(shared_expert_gate, flat)) *
                      shared_expert->forward(flat);
    }
    return {out.view(x.sizes()), logits};
  }
  MoeConfig moe;
  bool mixtral;
  Projection gate{nullptr};
  torch::nn::Linear shared_expert_gate{nullptr};
  torch::nn::ModuleList experts{nullptr};
  SharedExpert shared_expert{nullptr};
};
TORCH_MODULE(SparseMoeBlock);

// transformers' load_balancing_loss_func (Note [Mixture of experts]): `router_logits` holds one
// (tokens, E) tensor per sparse layer; `mask` (tokens), if defined, the tokens that count (1) and
// those that do not (0, e.g. padding). A 0-dim fp32 tensor.
inline torch::Tensor load_balancing_loss(const std::vector<torch::Tensor>& router_logits,
                                         const MoeConfig& moe, const torch::Tensor& mask = {}) {
  TORCH_CHECK(!router_logits.empty(), "load_balancing_loss: no router logits (no sparse layer)");
  torch::Tensor routes, probs, tokens;
  for (const torch::Tensor& logits : router_logits) {
    const auto p = torch::softmax(logits, -1);
    const auto chosen = std::get<1>(p.topk(moe.num_experts_per_tok, -1));
    auto count = torch::zeros({logits.size(0), moe.num_experts}, torch::kFloat)
                     .scatter_add_(1, chosen, torch::ones(chosen.sizes(), torch::kFloat));
    auto pf = p.to(torch::kFloat);
    torch::Tensor n;
    if (mask.defined()) {
      const auto m = mask.reshape({-1, 1}).to(torch::kFloat);
      count = count * m;
      pf = pf * m;
      n = m.sum();
    } else {
      n = torch::full({}, static_cast<double>(logits.size(0)), torch::kFloat);
    }
    routes = routes.defined() ? routes + count.sum(0) : count.sum(0);
    probs = probs.defined() ? probs + pf.sum(0) : pf.sum(0);
    tokens = tokens.defined() ? tokens + n : n;
  }
  return (routes / tokens * (probs / tokens)).sum() * static_cast<double>(moe.num_experts);
}

}  // namespace zrt::models
