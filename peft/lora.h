// LoRA adapters for LibTorch modules, as PEFT's LoraModel builds them (Note [LoRA] in
// peft/lora.cpp): zrt::lora::apply adds a low-rank pair to the Linear layers a config names and
// freezes the rest of the model; a model's forward reaches them through zrt::lora::linear.
//
//   zrt::lora::LoraConfig lc;
//   lc.r = 16; lc.lora_alpha = 32; lc.target_modules = {"q_proj", "v_proj"};
//   zrt::lora::apply(*model, lc);            // before zrt::initialize: ZeRO-3 partitions the
//   auto engine = zrt::initialize(model, ...);  // frozen base and trains the adapters
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "core/json.h"

namespace zrt::lora {

// PEFT's LoraConfig, the keys of adapter_config.json this implementation honours.
struct LoraConfig {
  int64_t r = 8;
  double lora_alpha = 8.0;
  double lora_dropout = 0.0;
  // Which Linear layers get adapters (PEFT's matching): a module whose full name equals an entry
  // or ends in "." + entry; or, when `target_regex` is set instead, whose full name the regular
  // expression matches whole (PEFT's string target_modules, re.fullmatch); or, with
  // `all_linear` (PEFT's "all-linear"), every Linear but the output layer, the module named
  // "lm_head". Modules marked Unadaptable are never targets.
  std::vector<std::string> target_modules;
  std::string target_regex;
  bool all_linear = false;
  bool use_rslora = false;  // scaling lora_alpha / sqrt(r) instead of lora_alpha / r
  // Modules trained whole (their parameters stay trainable), saved with the adapter.
  std::vector<std::string> modules_to_save;

  double scaling() const;
  // Throws ConfigError naming the key for r <= 0, a dropout outside [0, 1), no targets, or a bad
  // regular expression.
  void validate(const std::string& context) const;
  // adapter_config.json as PEFT writes it (peft_type LORA, task_type CAUSAL_LM, bias "none").
  Json to_peft_json(const std::string& base_model_name_or_path) const;
  // Reads PEFT's adapter_config.json: ConfigError naming `context` and the key for a PEFT type
  // other than LORA, a bias other than "none", fan_in_fan_out, DoRA, per-layer rank or alpha
  // patterns, or layers_to_transform — what this implementation does not build.
  static LoraConfig from_peft_json(const Json& j, const std::string& context);
};

// A base class marking a module that stands for what transformers keeps as a plain parameter (a
// MoE router, the routed experts' fused weights): PEFT's matching never finds such a module in a
// transformers model, so apply() passes it by whatever its name.
struct Unadaptable {
  virtual ~Unadaptable() = default;
};

// What apply() did: the adapted Linear layers' names, and the modules kept trainable whole.
struct Applied {
  std::vector<std::string> adapted;
  std::vector<std::string> saved;
  int64_t trainable_params = 0;
  int64_t all_params = 0;
};

// Adds lora_A (r x in, Kaiming-uniform with a = sqrt(5), from torch's default generator) and
// lora_B (out x r, zeros) to every matching torch::nn::Linear of `model`, registered as its
// children "lora_A" and "lora_B" (so their parameters are named "<layer>.lora_A.weight"), in the
// layer's dtype and device; then sets requires_grad false on every other parameter except those
// of `modules_to_save`. Throws ConfigError when nothing matches, a target names a module that is
// not a Linear, a layer already has an adapter, or the config is invalid (validate()); the model
// is unchanged then.
Applied apply(torch::nn::Module& model, const LoraConfig& config);

// `layer`'s output with its adapter: layer(x) + scaling * lora_B(lora_A(dropout(x))), dropout
// only in training mode; layer(x) alone when it has no adapter or the adapter is merged. Models
// call this where they would call layer->forward(x): LibTorch has no forward hooks, so an adapter
// is used only where its layer is reached through here (unused_adapters() finds the others).
torch::Tensor linear(torch::nn::Linear layer, const torch::Tensor& x);

// The adapted layers whose adapter no forward has used since apply() (their Linear is called
// some other way than linear()); empty when every adapter ran.
std::vector<std::string> unused_adapters(torch::nn::Module& model);

// W += delta_weight(A, B, scaling) into every adapted layer (merge) or W -= the same (unmerge),
// in the weight's dtype; linear() skips merged adapters. Needs whole parameters: under ZeRO-3, inside
// zrt::GatheredParameters with a modifier rank. Merging a merged model (or unmerging an unmerged
// one) is an error.
void merge(torch::nn::Module& model);
void unmerge(torch::nn::Module& model);

// An adapter's contribution to its layer's weight, scaling * B A, as PEFT's get_delta_weight
// computes it on CPU: for bf16/fp16 adapters the product in fp32, rounded to their dtype.
torch::Tensor delta_weight(const torch::Tensor& lora_a, const torch::Tensor& lora_b,
                           double scaling);
// The layers of `model` whose adapter is not merged, by name, with the adapter's scaling (its
// tensors are "<layer>.lora_A.weight" and "<layer>.lora_B.weight").
std::map<std::string, double> adapted_layers(const torch::nn::Module& model);

// The names of `model`'s parameters and buffers in PEFT's PeftModel wrapping it, which DeepSpeed's
// checkpoints of a PEFT model use: "base_model.model." + the name, an adapted layer's own tensors
// as "<layer>.base_layer.weight", its adapters' as "<layer>.lora_A.default.weight". (PEFT keeps a
// frozen original beside each module to save; such a model's checkpoint has no place for it.)
std::function<std::string(const std::string&)> peft_model_names(const torch::nn::Module& model);

// The adapter's tensors by the names PEFT saves them under — "base_model.model." + the module's
// name, with lora_A / lora_B and the modules_to_save's own parameters — mapped from the model's
// parameter names; a name that is not the adapter's maps to an empty string.
std::string peft_key(const std::string& param_name, const LoraConfig& config);
// The inverse: the model's parameter name of a PEFT key (with or without ".default" after
// lora_A / lora_B), or an empty string for a key that is not "base_model.model.".
std::string param_name_of(const std::string& peft_key);

}  // namespace zrt::lora
