// The mixture-of-experts part of an HF config.json for models/llama.h's MoE families (Note
// [Mixture of experts] in models/moe.h): Mixtral, Qwen2-MoE and Qwen3-MoE.
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/json.h"

namespace zrt::models {

struct MoeConfig {
  int64_t num_experts = 0;  // 0: a dense model (no MoE layers)
  int64_t num_experts_per_tok = 2;
  int64_t expert_intermediate_size = 0;  // Mixtral: intermediate_size; Qwen: moe_intermediate_size
  int64_t shared_expert_intermediate_size = 0;  // Qwen2-MoE: its shared expert; 0: none
  bool norm_topk_prob = true;  // Mixtral always renormalises the top-k weights
  double router_aux_loss_coef = 0.001;
  bool output_router_logits = false;  // the load-balancing loss joins the training loss
  int64_t decoder_sparse_step = 1;    // Qwen: layer i is MoE iff (i + 1) % step == 0 ...
  std::vector<int64_t> mlp_only_layers;  // ... and i is not listed here
  bool enabled() const { return num_experts > 0; }
  bool sparse_layer(int64_t i) const {
    return enabled() && (i + 1) % decoder_sparse_step == 0 &&
           std::find(mlp_only_layers.begin(), mlp_only_layers.end(), i) == mlp_only_layers.end();
  }
};

// Reads the MoE keys of `model_type` ("mixtral", "qwen2_moe", "qwen3_moe"; any other: a dense
// model) from `j`; `intermediate_size` is the dense width (Mixtral's experts use it). Errors name
// the key and `where`.
inline MoeConfig read_moe_config(const Json& j, const std::string& where,
                                 const std::string& model_type, int64_t intermediate_size) {
  MoeConfig m;
  if (model_type != "mixtral" && model_type != "qwen2_moe" && model_type != "qwen3_moe") return m;
  auto positive = [&](const char* key, int64_t fallback, bool zero_ok = false) -> int64_t {
    if (!j.contains(key) || j[key].is_null()) return fallback;
    const bool ok = j[key].is_number_integer() &&
                    (j[key].get<int64_t>() > 0 || (zero_ok && j[key].get<int64_t>() == 0));
    ZRT_CHECK_AS(ConfigError, ok, where, ": '", key, "' must be a ",
                 zero_ok ? "non-negative" : "positive", " integer, got ", j[key].dump());
    return j[key].get<int64_t>();
  };
  auto boolean = [&](const char* key, bool fallback) {
    if (!j.contains(key) || j[key].is_null()) return fallback;
    ZRT_CHECK_AS(ConfigError, j[key].is_boolean(), where, ": '", key, "' must be true or false");
    return j[key].get<bool>();
  };
  const bool mixtral = model_type == "mixtral";
  // transformers writes Mixtral's and Qwen3-MoE's count as num_local_experts, Qwen2-MoE's as
  // num_experts; each reads both.
  const int64_t fallback = mixtral ? 8 : model_type == "qwen2_moe" ? 60 : 128;
  m.num_experts = positive("num_local_experts", positive("num_experts", fallback));
  m.num_experts_per_tok = positive("num_experts_per_tok", mixtral ? 2 : model_type == "qwen2_moe" ? 4 : 8);
  ZRT_CHECK_AS(ConfigError, m.num_experts_per_tok <= m.num_experts, where,
               ": num_experts_per_tok ", m.num_experts_per_tok, " is more than the ",
               m.num_experts, " experts");
  m.expert_intermediate_size =
      mixtral ? intermediate_size : positive("moe_intermediate_size", model_type == "qwen2_moe" ? 1408 : 768);
  if (model_type == "qwen2_moe") {
    m.shared_expert_intermediate_size = positive("shared_expert_intermediate_size", 5632, true);
  }
  m.norm_topk_prob = mixtral ? true : boolean("norm_topk_prob", false);
  m.output_router_logits = boolean("output_router_logits", false);
  if (j.contains("router_aux_loss_coef") && !j["router_aux_loss_coef"].is_null()) {
    ZRT_CHECK_AS(ConfigError, j["router_aux_loss_coef"].is_number(), where,
                 ": 'router_aux_loss_coef' must be a number, got ", j["router_aux_loss_coef"].dump());
    m.router_aux_loss_coef = j["router_aux_loss_coef"].get<double>();
  }
  if (mixtral) {
    const bool jitter = j.contains("router_jitter_noise") && j["router_jitter_noise"].is_number() &&
                        j["router_jitter_noise"].get<double>() != 0;
    ZRT_CHECK_AS(ConfigError, !jitter, where,
                 ": router_jitter_noise is not supported (only 0: no jitter)");
    return m;
  }
  m.decoder_sparse_step = positive("decoder_sparse_step", 1);
  if (j.contains("mlp_only_layers") && !j["mlp_only_layers"].is_null()) {
    ZRT_CHECK_AS(ConfigError, j["mlp_only_layers"].is_array(), where,
                 ": 'mlp_only_layers' must be a list of layer indices");
    for (const Json& i : j["mlp_only_layers"]) {
      ZRT_CHECK_AS(ConfigError, i.is_number_integer() && i.get<int64_t>() >= 0, where,
                   ": 'mlp_only_layers' must hold layer indices, got ", i.dump());
      m.mlp_only_layers.push_back(i.get<int64_t>());
    }
  }
  return m;
}

// Writes `m` into `j` under the keys transformers writes for `model_type`.
inline void write_moe_config(const MoeConfig& m, const std::string& model_type, Json& j) {
  if (!m.enabled()) return;
  j[model_type == "qwen2_moe" ? "num_experts" : "num_local_experts"] = m.num_experts;
  j["num_experts_per_tok"] = m.num_experts_per_tok;
  j["router_aux_loss_coef"] = m.router_aux_loss_coef;
  j["output_router_logits"] = m.output_router_logits;
  if (model_type == "mixtral") return;
  j["moe_intermediate_size"] = m.expert_intermediate_size;
  if (model_type == "qwen2_moe") {
    j["shared_expert_intermediate_size"] = m.shared_expert_intermediate_size;
  }
  j["norm_topk_prob"] = m.norm_topk_prob;
  j["decoder_sparse_step"] = m.decoder_sparse_step;
  j["mlp_only_layers"] = m.mlp_only_layers;
}

}  // namespace zrt::models
