// A LLaMA-architecture decoder (transformers' LlamaForCausalLM: RMSNorm, rotary position
// embeddings with rope_theta and the linear, dynamic and llama3 scalings, grouped-query attention, SwiGLU MLP, optional tied embeddings),
// built from an HF config.json. Parameter names and maths are transformers', so an HF checkpoint's
// tensors load by name:
//
//   model.embed_tokens.weight
//   model.layers.{i}.input_layernorm.weight
//   model.layers.{i}.self_attn.{q,k,v,o}_proj.weight   (+ .bias: Note [LLaMA families])
//   model.layers.{i}.post_attention_layernorm.weight
//   model.layers.{i}.mlp.{gate,up,down}_proj.weight    (+ .bias with mlp_bias)
//   model.layers.{i}.block_sparse_moe.{gate,experts.{e}.w1,w2,w3}.weight   (Mixtral)
//   model.layers.{i}.mlp.{gate,experts.{e}.{gate,up,down}_proj}.weight    (Qwen MoE)
//   model.norm.weight
//   lm_head.weight                                     (absent with tie_word_embeddings)
//
// Each decoder layer is a ZeRO-3 sharding unit (zrt::ShardUnit) and an activation-checkpointing
// region when enabled; the embedding and lm_head are units too. With tie_word_embeddings the
// projection reads model.embed_tokens.weight (no lm_head.weight, as transformers saves it): a
// second use of the embedding unit (ShardUnitBase::run), so the tied weight stays partitioned.
//
// Note [LLaMA families]
// transformers' Mistral and Qwen2 are this model with small differences, read from config.json's
// model_type (and written back by save_pretrained with their architectures):
// - llama: attention_bias puts biases on q, k, v and o; mlp_bias on the MLP's three projections.
// - qwen2: biases on q, k and v (always), none on o or the MLP; its sliding-window layers
//   (use_sliding_window, layer_types) are refused.
// - mistral: no biases; sliding_window W: a query at position p sees keys p − W + 1 .. p.
// - mixtral: Mistral with sparse MoE layers; qwen2_moe: Qwen2 (qkv_bias) with sparse layers and
//   a shared expert; qwen3_moe: attention_bias on q, k, v and o, an RMSNorm over each q and k
//   head before rotary (q_norm, k_norm), sparse layers (Note [Mixture of experts], moe.h).
//
// Note [LLaMA maths, as transformers computes it]
// - RMSNorm: h = x in fp32; h = h * rsqrt(mean(h²) + eps); out = weight * h.to(x.dtype).
// - Rotary: inv_freq[j] = 1 / theta^(2j / head_dim) in fp32 (scaled as Note [Rotary scaling]
//   says for the other rope types); for absolute position p the angles
//   p·inv_freq are repeated twice along the head dimension (cat(freqs, freqs)); cos and sin are
//   taken in fp32 and cast to the activations' dtype; q' = q·cos + rotate_half(q)·sin with
//   rotate_half(x) = cat(−x[d/2:], x[:d/2]).
// - Attention: query head h reads key/value head h / (heads / kv_heads); scores scaled by
//   head_dim^−1/2, causal (a query at absolute position p sees keys 0..p), softmax in fp32 then
//   cast back, then o_proj.
// - MLP: down_proj(silu(gate_proj(x)) · up_proj(x)).
// - Pre-norm residual blocks; the final RMSNorm, then lm_head; logits in the model's dtype.
//
// Generation: forward(tokens, cache) appends this call's keys and values (after rotary) per layer
// and continues positions from cache.length; a batch's prompts share one length (no padding).
#pragma once

#include <cmath>
#include <numeric>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include <torch/torch.h>

#include "core/error.h"
#include "core/json.h"
#include "core/strings.h"
#include "models/llama_config.h"
#include "models/tiled_mlp.h"
#include "models/attention.h"
#include "models/moe.h"
#include "models/rotary.h"
#include "peft/lora.h"
#include "zero/sequence_parallel.h"
#include "zero/shard_unit.h"

namespace zrt::models {

struct LlamaRMSNormImpl : torch::nn::Module {
  LlamaRMSNormImpl(int64_t dim, double eps) : eps(eps) {
    weight = register_parameter("weight", torch::ones({dim}));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    auto h = x.to(torch::kFloat);
    h = h * torch::rsqrt(h.pow(2).mean(-1, /*keepdim=*/true) + eps);
    return weight * h.to(x.scalar_type());
  }
  double eps;
  torch::Tensor weight;
};
TORCH_MODULE(LlamaRMSNorm);

struct LlamaAttentionImpl : torch::nn::Module {
  explicit LlamaAttentionImpl(const LlamaConfig& c) : c(c) {
    using torch::nn::LinearOptions;
    const int64_t q = c.num_attention_heads * c.head_dim, kv = c.num_key_value_heads * c.head_dim;
    q_proj = register_module(
        "q_proj", torch::nn::Linear(LinearOptions(c.hidden_size, q).bias(c.qkv_bias())));
    k_proj = register_module(
        "k_proj", torch::nn::Linear(LinearOptions(c.hidden_size, kv).bias(c.qkv_bias())));
    v_proj = register_module(
        "v_proj", torch::nn::Linear(LinearOptions(c.hidden_size, kv).bias(c.qkv_bias())));
    o_proj = register_module(
        "o_proj", torch::nn::Linear(LinearOptions(q, c.hidden_size).bias(c.o_bias())));
    if (c.qk_norm()) {
      q_norm = register_module("q_norm", LlamaRMSNorm(c.head_dim, c.rms_norm_eps));
      k_norm = register_module("k_norm", LlamaRMSNorm(c.head_dim, c.rms_norm_eps));
    }
  }
  // x: (b, t, hidden); cos/sin: (t, head_dim) or (b, 1, t, head_dim); `documents`: each token's
  // document (Note [Packed sequences] in attention.h) or undefined; `k_cache`/`v_cache` hold
  // earlier positions (or are undefined) and receive this call's keys and values appended.
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                        const torch::Tensor& documents, torch::Tensor* k_cache,
                        torch::Tensor* v_cache) {
    const int64_t b = x.size(0), t = x.size(1), d = c.head_dim;
    const int64_t heads = c.num_attention_heads, kv_heads = c.num_key_value_heads;
    auto q = zrt::lora::linear(q_proj, x).view({b, t, heads, d});
    auto k = zrt::lora::linear(k_proj, x).view({b, t, kv_heads, d});
    if (q_norm) {  // Qwen3: each head normalised before rotary
      q = q_norm->forward(q);
      k = k_norm->forward(k);
    }
    q = q.transpose(1, 2);
    k = k.transpose(1, 2);
    auto v = zrt::lora::linear(v_proj, x).view({b, t, kv_heads, d}).transpose(1, 2);
    q = q * cos + llama_rotate_half(q) * sin;
    k = k * cos + llama_rotate_half(k) * sin;
    if (k_cache != nullptr) {
      if (k_cache->defined()) {
        k = torch::cat({*k_cache, k}, 2);
        v = torch::cat({*v_cache, v}, 2);
      }
      *k_cache = k;
      *v_cache = v;
    }
    const bool ulysses = sp != nullptr && sp->size() > 1;  // Note [Ulysses sequence parallelism]
    int64_t local_heads = heads, local_kv = kv_heads;
    if (ulysses) {
      ZRT_CHECK(k_cache == nullptr, "sequence parallelism with a KV cache");
      const int64_t ranks = sp->size(), f = ranks / std::gcd(kv_heads, ranks);
      if (f > 1) {  // each key/value head repeated f times: the copies divide over the ranks
        k = k.repeat_interleave(f, 1);
        v = v.repeat_interleave(f, 1);
      }
      q = sp->gather_sequence(q);
      k = sp->gather_sequence(k);
      v = sp->gather_sequence(v);
      local_heads = heads / ranks;
      local_kv = kv_heads * f / ranks;
    }
    const int64_t total = k.size(2), rep = local_heads / local_kv;
    if (rep > 1) {  // key/value head j serves query heads j·rep .. j·rep + rep − 1
      k = k.unsqueeze(2).expand({b, local_kv, rep, total, d}).reshape({b, local_heads, total, d});
      v = v.unsqueeze(2).expand({b, local_kv, rep, total, d}).reshape({b, local_heads, total, d});
    }
    torch::Tensor y = causal_attention(q, k, v, c.sliding_window, llama_uses_sdpa(c), documents);
    if (ulysses) y = sp->scatter_sequence(y);
    return zrt::lora::linear(o_proj, y.transpose(1, 2).reshape({b, t, heads * d}));
  }
  LlamaConfig c;
  std::shared_ptr<const zrt::SequenceParallel> sp;  // set by LlamaForCausalLM::set_sequence_parallel
  torch::nn::Linear q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, o_proj{nullptr};
  LlamaRMSNorm q_norm{nullptr}, k_norm{nullptr};
};
TORCH_MODULE(LlamaAttention);

struct LlamaMlpImpl : torch::nn::Module {
  explicit LlamaMlpImpl(const LlamaConfig& c) {
    using torch::nn::LinearOptions;
    const int64_t h = c.hidden_size, m = c.intermediate_size;
    gate_proj =
        register_module("gate_proj", torch::nn::Linear(LinearOptions(h, m).bias(c.mlp_bias)));
    up_proj = register_module("up_proj", torch::nn::Linear(LinearOptions(h, m).bias(c.mlp_bias)));
    down_proj =
        register_module("down_proj", torch::nn::Linear(LinearOptions(m, h).bias(c.mlp_bias)));
    tile = c.mlp_tile_tokens;
  }
  torch::Tensor forward(const torch::Tensor& x) {
    if (tile > 0 && x.size(1) > tile) {  // Note [Tiled MLP] in tiled_mlp.h
      return tiled_sequence([this](const torch::Tensor& p) { return whole(p); }, x, parameters(), tile);
    }
    return whole(x);
  }
  torch::Tensor whole(const torch::Tensor& x) {
    return zrt::lora::linear(
        down_proj, torch::silu(zrt::lora::linear(gate_proj, x)) * zrt::lora::linear(up_proj, x));
  }
  torch::nn::Linear gate_proj{nullptr}, up_proj{nullptr}, down_proj{nullptr};
  int64_t tile = 0;  // positions per tile (0: the whole sequence at once)
};
TORCH_MODULE(LlamaMlp);

struct LlamaDecoderLayerImpl : torch::nn::Module {
  // Layer `index` of the model: a sparse layer where the MoE config says so (Note [Mixture of
  // experts] in models/moe.h), registered as Mixtral's block_sparse_moe or Qwen's mlp.
  LlamaDecoderLayerImpl(const LlamaConfig& c, int64_t index) {
    input_layernorm =
        register_module("input_layernorm", LlamaRMSNorm(c.hidden_size, c.rms_norm_eps));
    self_attn = register_module("self_attn", LlamaAttention(c));
    post_attention_layernorm =
        register_module("post_attention_layernorm", LlamaRMSNorm(c.hidden_size, c.rms_norm_eps));
    if (c.moe.sparse_layer(index)) {
      moe = register_module(c.model_type == "mixtral" ? "block_sparse_moe" : "mlp",
                            SparseMoeBlock(c));
    } else {
      mlp = register_module("mlp", LlamaMlp(c));
    }
  }
  // → (the layer's output, its router logits (b·t, E), undefined for a dense layer).
  std::tuple<torch::Tensor, torch::Tensor> forward(torch::Tensor x, const torch::Tensor& cos,
                                                   const torch::Tensor& sin,
                                                   const torch::Tensor& documents,
                                                   torch::Tensor* k_cache, torch::Tensor* v_cache) {
    x = x + self_attn->forward(input_layernorm->forward(x), cos, sin, documents, k_cache, v_cache);
    if (!moe) return {x + mlp->forward(post_attention_layernorm->forward(x)), torch::Tensor()};
    auto [y, router_logits] = moe->forward(post_attention_layernorm->forward(x));
    return {x + y, router_logits};
  }
  LlamaRMSNorm input_layernorm{nullptr}, post_attention_layernorm{nullptr};
  LlamaAttention self_attn{nullptr};
  LlamaMlp mlp{nullptr};
  SparseMoeBlock moe{nullptr};
};

// transformers' LlamaModel: the embedding, the decoder layers, the final norm. The embedding and
// every decoder layer are sharding units. With `deferred`, each part's parameters lose their
// storage as soon as it is built (zrt::defer_parameters), so the whole model never exists; the
// weights come from zrt::load_pretrained or zrt::init_deferred under ZeRO-3.
struct LlamaModelImpl : torch::nn::Module {
  LlamaModelImpl(const LlamaConfig& c, bool deferred) {
    embed_unit = register_module("embed_tokens",
                                 std::make_shared<zrt::ShardUnit<torch::nn::EmbeddingImpl>>(
                                     torch::nn::EmbeddingOptions(c.vocab_size, c.hidden_size)));
    embed_unit->set_checkpointable(false);  // as HF, checkpoint the layers only
    if (deferred) zrt::defer_parameters(*embed_unit);
    layers = register_module("layers", torch::nn::ModuleList());
    for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
      units.push_back(std::make_shared<zrt::ShardUnit<LlamaDecoderLayerImpl>>(c, i));
      if (deferred) zrt::defer_parameters(*units.back());
      layers->push_back(units.back());
    }
    norm = register_module("norm", LlamaRMSNorm(c.hidden_size, c.rms_norm_eps));
    if (deferred) zrt::defer_parameters(*norm);
  }
  std::shared_ptr<zrt::ShardUnit<torch::nn::EmbeddingImpl>> embed_unit;
  torch::nn::ModuleList layers{nullptr};
  std::vector<std::shared_ptr<zrt::ShardUnit<LlamaDecoderLayerImpl>>> units;
  LlamaRMSNorm norm{nullptr};
};
TORCH_MODULE(LlamaModel);

// transformers' _init_weights for one parameter of LlamaForCausalLM, by name: ones for the norms,
// zeros for biases, normal(0, initializer_range) for the other weights (from `gen`, or the current
// torch generator when unset), and a zero row for pad_token_id in the embedding.
inline void llama_init_parameter(const LlamaConfig& c, const std::string& name, torch::Tensor& t,
                                 c10::optional<at::Generator> gen) {
  torch::NoGradGuard no_grad;
  const Json& j = c.extra;
  if (name.find("layernorm") != std::string::npos || name == "model.norm.weight") {
    t.fill_(1.0);
  } else if (zrt::ends_with(name, ".bias")) {
    t.zero_();
  } else {
    t.normal_(0.0, j.is_object() ? j.value("initializer_range", 0.02) : 0.02, gen);
    const bool pad = name == "model.embed_tokens.weight" && j.is_object() &&
                     j.contains("pad_token_id") && j["pad_token_id"].is_number_integer();
    if (pad) {
      const int64_t id = j["pad_token_id"].get<int64_t>();
      if (id >= 0 && id < t.size(0)) t[id].zero_();
    }
  }
}

struct LlamaForCausalLMImpl : torch::nn::Module {
  // Parameters initialised as transformers' _init_weights does (llama_init_parameter), in the
  // order of named_parameters from the current torch generator; with `deferred`, no values at
  // all (above): zrt::init_deferred(engine, seed, ...) with llama_init_parameter gives them.
  explicit LlamaForCausalLMImpl(const LlamaConfig& c, bool deferred = false) : config(c) {
    model = register_module("model", LlamaModel(c, deferred));
    if (!c.tie_word_embeddings) {
      lm_head = register_module(
          "lm_head", std::make_shared<zrt::ShardUnit<torch::nn::LinearImpl>>(
                         torch::nn::LinearOptions(c.hidden_size, c.vocab_size).bias(false)));
      lm_head->set_checkpointable(false);  // as the embedding
      if (deferred) zrt::defer_parameters(*lm_head);
    }
    if (deferred) return;
    for (auto& p : named_parameters()) llama_init_parameter(config, p.key(), p.value(), {});
  }
  // tokens: (batch, t) int64 → logits (batch, t, vocab) in the model's dtype. With `cache`,
  // positions continue from cache->length and the cache grows by t. With `router_logits`, each
  // sparse layer's router logits (batch·t, E) are appended (for load_balancing_loss). With
  // `position_ids` (batch, t) int64, rotary takes them and packed documents attend only within
  // themselves (Note [Packed sequences] in attention.h); not with a cache.
  torch::Tensor forward(const torch::Tensor& tokens, KvCache* cache = nullptr,
                        std::vector<torch::Tensor>* router_logits = nullptr,
                        const torch::Tensor& position_ids = torch::Tensor()) {
    const torch::Tensor x = hidden(tokens, cache, router_logits, position_ids);
    if (lm_head) return lm_head->forward(x);
    auto& embed = *model->embed_unit;  // tied: a second use of the embedding unit
    return embed.run([&embed](const torch::Tensor& h) { return torch::linear(h, embed.weight); },
                     x);
  }
  // forward() up to the final norm's output (batch, t, hidden): the head's input.
  torch::Tensor hidden(const torch::Tensor& tokens, KvCache* cache = nullptr,
                       std::vector<torch::Tensor>* router_logits = nullptr,
                       const torch::Tensor& position_ids = torch::Tensor()) {
    const int64_t t = tokens.size(1), offset = cache ? cache->length : 0;
    ZRT_CHECK(!sp_ || (cache == nullptr && position_ids.defined()),
              "LlamaForCausalLM under sequence parallelism takes its slice's position_ids "
              "(SequenceParallel::shard_causal_lm) and no KV cache");
    auto x = model->embed_unit->forward(tokens);
    torch::Tensor cos, sin, documents;
    if (position_ids.defined()) {
      ZRT_CHECK(cache == nullptr, "LlamaForCausalLM: position_ids with a KV cache (the "
                "cache continues its own positions)");
      ZRT_CHECK(position_ids.dim() == 2 && position_ids.size(0) == tokens.size(0) &&
                    position_ids.size(1) == t && position_ids.scalar_type() == torch::kLong,
                "LlamaForCausalLM: position_ids must be int64 of the tokens' shape ",
                tokens.sizes(), ", got ", position_ids.scalar_type(), " ", position_ids.sizes());
      std::tie(cos, sin) = llama_rotary_at(config, position_ids, x.scalar_type());
      documents = packed_documents(sp_ ? sp_->all_positions(position_ids) : position_ids);
    } else {
      std::tie(cos, sin) = llama_rotary(config, offset, t, x.scalar_type(), cache);
    }
    if (cache != nullptr && cache->k.empty()) {
      cache->k.resize(model->units.size());
      cache->v.resize(model->units.size());
    }
    for (size_t l = 0; l < model->units.size(); ++l) {
      auto [y, logits] = model->units[l]->forward(x, cos, sin, documents,
                                                  cache ? &cache->k[l] : nullptr,
                                                  cache ? &cache->v[l] : nullptr);
      x = y;
      if (router_logits != nullptr && logits.defined()) router_logits->push_back(logits);
    }
    if (cache != nullptr) cache->length += t;
    return model->norm->forward(x);
  }
  // Ulysses sequence parallelism over `sp`'s group (Note [Ulysses sequence parallelism] in
  // zero/sequence_parallel.h): forward() then takes this rank's slice of the sequence with its
  // position_ids. The heads must divide over the group; dynamic rope (scaled by the longest
  // position a forward sees) is refused, each rank seeing other positions. Null: off.
  void set_sequence_parallel(std::shared_ptr<const zrt::SequenceParallel> group) {
    if (group && group->size() == 1) group = nullptr;
    if (group) {
      ZRT_CHECK_AS(ConfigError, config.num_attention_heads % group->size() == 0,
                   "sequence_parallel_size ", group->size(), " does not divide the model's ",
                   config.num_attention_heads, " attention heads");
      ZRT_CHECK_AS(ConfigError, config.rope_type != "dynamic",
                   "sequence parallelism with rope_type \"dynamic\" (scaled by the longest "
                   "position of a forward, which each rank's slice does not see) is not supported");
    }
    sp_ = group;
    for (auto& unit : model->units) unit->self_attn->sp = group;
  }
  // Parameters in all, from the shapes (valid for a deferred model too).
  int64_t num_params() {
    int64_t n = 0;
    for (const auto& p : parameters()) n += p.numel();
    return n;
  }
  LlamaConfig config;
  LlamaModel model{nullptr};
  std::shared_ptr<zrt::ShardUnit<torch::nn::LinearImpl>> lm_head;
  std::shared_ptr<const zrt::SequenceParallel> sp_;
};
TORCH_MODULE(LlamaForCausalLM);

}  // namespace zrt::models
