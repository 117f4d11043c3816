// The configuration of models/llama.h's LLaMA, read from and written to an HF config.json
// (transformers 4's and 5's forms).
#pragma once

#include <cmath>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

#include "core/error.h"
#include "core/json.h"
#include "core/strings.h"
#include "models/moe_config.h"

namespace zrt::models {

struct LlamaConfig {
  int64_t vocab_size = 32000;
  int64_t hidden_size = 4096;
  int64_t intermediate_size = 11008;
  int64_t num_hidden_layers = 32;
  int64_t num_attention_heads = 32;
  int64_t num_key_value_heads = 32;
  int64_t head_dim = 128;
  int64_t max_position_embeddings = 2048;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  // Rotary scaling (Note [Rotary scaling] in models/rotary.h): "default", "linear", "dynamic" or "llama3", with
  // transformers' parameters; the others are refused.
  std::string rope_type = "default";
  double rope_factor = 1.0;
  double rope_low_freq_factor = 1.0;   // llama3
  double rope_high_freq_factor = 4.0;  // llama3
  int64_t rope_original_max_position_embeddings = 0;  // llama3
  bool tie_word_embeddings = false;
  bool attention_bias = false;  // llama, qwen3_moe: biases on q, k, v and o
  bool mlp_bias = false;
  bool qwen_qkv_bias = false;  // qwen2, qwen2_moe: biases on q, k and v
  // The family (Note [LLaMA families] in llama.h): llama, mistral, qwen2, or MoE (moe.h): mixtral, qwen2_moe, qwen3_moe.
  std::string model_type = "llama";
  int64_t sliding_window = 0;  // mistral, mixtral: keys more than this far back are not seen
  MoeConfig moe;
  std::string attn_implementation;  // "sdpa", "eager"; "": sdpa if LibTorch has it (llama.h)
  int64_t mlp_tile_tokens = 0;  // dense MLPs over tiles of this many positions (tiled_mlp.h); 0: off
  bool qkv_bias() const { return attention_bias || qwen_qkv_bias; }
  bool o_bias() const { return attention_bias; }
  bool qk_norm() const { return model_type == "qwen3_moe"; }  // RMSNorm of each q and k head
  Json extra;  // the config.json as read, written back by save_pretrained

  // Reads an HF config.json object; `where` names the file in errors. Refuses what this model
  // does not implement (another model_type or activation, another rope type, Qwen2's sliding
  // window) by naming the key.
  static LlamaConfig from_json(const Json& j, const std::string& where);
  // Reads `path`: a config.json, or a folder (an HF model folder) holding one.
  static LlamaConfig from_file(const std::string& path);
  // `extra` with this configuration's values written over it.
  Json to_json() const;
};

// model_type, the family's name as people write it and its transformers class.
struct LlamaFamily {
  const char *type, *name, *architecture;
};
inline const LlamaFamily& llama_family(const LlamaConfig& c) {
  static const LlamaFamily families[] = {
      {"llama", "LLaMA", "LlamaForCausalLM"},         {"mistral", "Mistral", "MistralForCausalLM"},
      {"qwen2", "Qwen2", "Qwen2ForCausalLM"},         {"mixtral", "Mixtral", "MixtralForCausalLM"},
      {"qwen2_moe", "Qwen2-MoE", "Qwen2MoeForCausalLM"},
      {"qwen3_moe", "Qwen3-MoE", "Qwen3MoeForCausalLM"}};
  for (const LlamaFamily& f : families) {
    if (c.model_type == f.type) return f;
  }
  return families[0];
}
inline const char* family_name(const LlamaConfig& c) { return llama_family(c).name; }

// The rope type and its parameters into `c` (Note [Rotary scaling] in rotary.h); the rope_theta
// given there, if any.
inline std::optional<double> read_rope_scaling(const Json& j, const std::string& where,
                                               LlamaConfig& c) {
  // transformers 5 writes {"rope_parameters": {"rope_theta": ..., "rope_type": ..., <scaling>}},
  // 4.x a top-level rope_theta and {"rope_scaling": {"rope_type" (or "type"): ..., <scaling>}}.
  std::optional<double> theta;
  for (const char* key : {"rope_parameters", "rope_scaling"}) {
    if (!j.contains(key) || j[key].is_null()) continue;
    const Json& rp = j[key];
    ZRT_CHECK_AS(ConfigError, rp.is_object(), where, ": ", key, " must be an object");
    auto number = [&](const char* name, std::optional<double> fallback) {
      if (!rp.contains(name) || rp[name].is_null()) {
        ZRT_CHECK_AS(ConfigError, fallback.has_value(), where, ": ", key, ".", name,
                     " is missing (rope_type '", c.rope_type, "' needs it)");
        return *fallback;
      }
      ZRT_CHECK_AS(ConfigError, rp[name].is_number() && rp[name].get<double>() > 0, where, ": ",
                   key, ".", name, " must be a positive number, got ", rp[name].dump());
      return rp[name].get<double>();
    };
    const std::string type =
        rp.value("rope_type", rp.value("type", std::string("default")));
    ZRT_CHECK_AS(ConfigError,
                 type == "default" || type == "linear" || type == "dynamic" || type == "llama3",
                 where, ": ", key, ".rope_type '", type,
                 "' is not supported (default, linear, dynamic and llama3 are)");
    c.rope_type = type;
    if (rp.contains("rope_theta")) theta = number("rope_theta", std::nullopt);
    if (type != "default") c.rope_factor = number("factor", std::nullopt);
    if (type == "llama3") {
      c.rope_low_freq_factor = number("low_freq_factor", std::nullopt);
      c.rope_high_freq_factor = number("high_freq_factor", std::nullopt);
      ZRT_CHECK_AS(ConfigError, c.rope_high_freq_factor > c.rope_low_freq_factor, where, ": ", key,
                   ".high_freq_factor ", c.rope_high_freq_factor,
                   " must be larger than low_freq_factor ", c.rope_low_freq_factor);
      const double original = number("original_max_position_embeddings", std::nullopt);
      ZRT_CHECK_AS(ConfigError, original == std::floor(original), where, ": ", key,
                   ".original_max_position_embeddings must be an integer");
      c.rope_original_max_position_embeddings = static_cast<int64_t>(original);
    }
  }
  return theta;
}

// model_type and what it changes into `c`: "llama"; "qwen2" and "qwen2_moe" (biases on q, k and
// v; their sliding window is refused); "mistral" and "mixtral" (no biases; sliding_window);
// "qwen3_moe" (q/k norms; its sliding window is refused). Other types are refused by name.
inline void read_family(const Json& j, const std::string& where, LlamaConfig& c) {
  c.model_type = j.value("model_type", std::string("llama"));
  const std::string& t = c.model_type;
  ZRT_CHECK_AS(ConfigError, t == llama_family(c).type, where, ": model_type '", t,
               "' is not supported (ZeroRT implements 'llama', 'mistral', 'qwen2', 'mixtral', "
               "'qwen2_moe' and 'qwen3_moe')");
  c.qwen_qkv_bias = t == "qwen2" || (t == "qwen2_moe" && j.value("qkv_bias", true));
  if (t == "qwen2" || t == "qwen2_moe" || t == "qwen3_moe") {
    bool sliding = j.value("use_sliding_window", false);
    if (j.contains("layer_types") && j["layer_types"].is_array()) {
      for (const Json& type : j["layer_types"]) sliding |= type != "full_attention";
    }
    ZRT_CHECK_AS(ConfigError, !sliding, where,
                 ": use_sliding_window / layer_types: ", family_name(c),
                 "'s sliding-window layers are not supported (only full attention)");
  }
  const bool windowed = t == "mistral" || t == "mixtral";
  if (windowed && j.contains("sliding_window") && !j["sliding_window"].is_null()) {
    ZRT_CHECK_AS(ConfigError,
                 j["sliding_window"].is_number_integer() && j["sliding_window"].get<int64_t>() > 0,
                 where, ": 'sliding_window' must be a positive integer or null, got ",
                 j["sliding_window"].dump());
    c.sliding_window = j["sliding_window"].get<int64_t>();
  }
}

inline LlamaConfig LlamaConfig::from_json(const Json& j, const std::string& where) {
  ZRT_CHECK_AS(ConfigError, j.is_object(), where, ": expected a JSON object");
  auto get_int = [&](const char* key, std::optional<int64_t> fallback) -> int64_t {
    if (!j.contains(key) || j[key].is_null()) {
      ZRT_CHECK_AS(ConfigError, fallback.has_value(), where, ": '", key, "' is missing");
      return *fallback;
    }
    ZRT_CHECK_AS(ConfigError, j[key].is_number_integer() && j[key].get<int64_t>() > 0, where, ": '",
                 key, "' must be a positive integer, got ", j[key].dump());
    return j[key].get<int64_t>();
  };
  auto get_double = [&](const char* key, double fallback) {
    if (!j.contains(key) || j[key].is_null()) return fallback;
    ZRT_CHECK_AS(ConfigError, j[key].is_number() && j[key].get<double>() > 0, where, ": '", key,
                 "' must be a positive number, got ", j[key].dump());
    return j[key].get<double>();
  };
  auto get_bool = [&](const char* key, bool fallback) {
    if (!j.contains(key) || j[key].is_null()) return fallback;
    ZRT_CHECK_AS(ConfigError, j[key].is_boolean(), where, ": '", key, "' must be true or false");
    return j[key].get<bool>();
  };
  const std::string act = j.value("hidden_act", std::string("silu"));
  ZRT_CHECK_AS(ConfigError, act == "silu", where, ": hidden_act '", act,
               "' is not supported (LLaMA's MLP uses 'silu')");
  LlamaConfig c;
  read_family(j, where, c);
  std::optional<double> rope_parameters_theta = read_rope_scaling(j, where, c);
  c.vocab_size = get_int("vocab_size", std::nullopt);
  c.hidden_size = get_int("hidden_size", std::nullopt);
  c.intermediate_size = get_int("intermediate_size", std::nullopt);
  c.num_hidden_layers = get_int("num_hidden_layers", std::nullopt);
  c.num_attention_heads = get_int("num_attention_heads", std::nullopt);
  c.num_key_value_heads = get_int("num_key_value_heads", c.num_attention_heads);
  ZRT_CHECK_AS(ConfigError, c.hidden_size % c.num_attention_heads == 0 || j.contains("head_dim"),
               where, ": hidden_size ", c.hidden_size, " is not a multiple of num_attention_heads ",
               c.num_attention_heads, " and no head_dim is given");
  c.head_dim = get_int("head_dim", c.hidden_size / c.num_attention_heads);
  ZRT_CHECK_AS(ConfigError, c.num_attention_heads % c.num_key_value_heads == 0, where,
               ": num_attention_heads ", c.num_attention_heads,
               " is not a multiple of num_key_value_heads ", c.num_key_value_heads);
  ZRT_CHECK_AS(ConfigError, c.head_dim % 2 == 0, where, ": head_dim ", c.head_dim,
               " must be even (rotary embeddings rotate pairs)");
  c.max_position_embeddings = get_int("max_position_embeddings", 2048);
  c.rms_norm_eps = get_double("rms_norm_eps", 1e-6);
  c.rope_theta = rope_parameters_theta.value_or(get_double("rope_theta", 10000.0));
  c.tie_word_embeddings = get_bool("tie_word_embeddings", false);
  if (c.model_type == "llama" || c.model_type == "qwen3_moe") {
    c.attention_bias = get_bool("attention_bias", false);
  }
  if (c.model_type == "llama") c.mlp_bias = get_bool("mlp_bias", false);
  c.moe = read_moe_config(j, where, c.model_type, c.intermediate_size);
  c.extra = j;
  return c;
}

inline LlamaConfig LlamaConfig::from_file(const std::string& path) {
  std::error_code ec;
  const bool folder = std::filesystem::is_directory(path, ec);
  const std::string file =
      folder ? (std::filesystem::path(path) / "config.json").string() : path;
  std::ifstream in(file);
  ZRT_CHECK_AS(ConfigError, in.good(), file, ": cannot read it");
  Json j;
  try {
    j = Json::parse(in);
  } catch (const Json::exception& e) {
    throw ConfigError(str(file, ": not valid JSON: ", e.what()));
  }
  return from_json(j, file);
}

inline Json LlamaConfig::to_json() const {
  Json j = extra.is_object() ? extra : Json::object();
  j["model_type"] = model_type;
  j["architectures"] = Json::array({llama_family(*this).architecture});
  j["vocab_size"] = vocab_size;
  j["hidden_size"] = hidden_size;
  j["intermediate_size"] = intermediate_size;
  j["num_hidden_layers"] = num_hidden_layers;
  j["num_attention_heads"] = num_attention_heads;
  j["num_key_value_heads"] = num_key_value_heads;
  j["head_dim"] = head_dim;
  j["max_position_embeddings"] = max_position_embeddings;
  j["rms_norm_eps"] = rms_norm_eps;
  if (j.contains("rope_parameters") && j["rope_parameters"].is_object()) {
    j["rope_parameters"]["rope_theta"] = rope_theta;
  } else {
    j["rope_theta"] = rope_theta;
  }
  j["tie_word_embeddings"] = tie_word_embeddings;
  if (model_type == "llama" || model_type == "qwen3_moe") j["attention_bias"] = attention_bias;
  if (model_type == "llama") j["mlp_bias"] = mlp_bias;
  write_moe_config(moe, model_type, j);
  j["hidden_act"] = "silu";
  return j;
}

}  // namespace zrt::models
