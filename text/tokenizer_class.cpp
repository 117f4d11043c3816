#include "text/tokenizer_class.h"

#include <filesystem>
#include <map>
#include <set>

#include "core/error.h"
#include "text/hf_tokenizer_files.h"

namespace zrt::text {
namespace {

namespace fs = std::filesystem;

constexpr const char* kGeneric = "TokenizersBackend";

// transformers 5.24's model_type -> tokenizer class, for the byte-level BPE families.
const std::map<std::string, std::string>& family_classes() {
  static const std::map<std::string, std::string> kClasses = [] {
    std::map<std::string, std::string> m;
    for (const char* t : {"qwen2", "qwen2_moe", "qwen2_vl", "qwen2_5_vl", "qwen2_audio",
                          "qwen2_5_omni", "qwen3", "qwen3_moe", "qwen3_next", "qwen3_vl",
                          "qwen3_vl_moe", "qwen3_omni_moe", "qwen3_asr"}) {
      m[t] = "Qwen2Tokenizer";
    }
    for (const char* t : {"qwen3_5", "qwen3_5_moe", "qwen3_5_moe_text", "qwen3_5_text"}) {
      m[t] = "Qwen3_5Tokenizer";
    }
    for (const char* t : {"gpt2", "gpt_neo", "gptj", "codegen", "opt", "phi", "dbrx"}) {
      m[t] = "GPT2Tokenizer";
    }
    for (const char* t : {"gpt_neox", "olmo", "olmoe", "mpt", "mamba", "mamba2", "falcon_mamba"}) {
      m[t] = "GPTNeoXTokenizer";
    }
    m["cohere"] = "CohereTokenizer";
    return m;
  }();
  return kClasses;
}

// The model types whose hub tokenizer_class transformers 5.24 overrules.
bool distrusted_hub_class(const std::string& model_type) {
  static const std::set<std::string> kTypes = {
      "arctic", "chatlm", "ernie4_5", "ernie4_5_moe", "fuyu", "h2ovl_chat", "hyperclovax",
      "hyperclovax_vlm", "hyperclovax_vision_v2", "internlm2", "internlm3", "iquestcoder", "jamba",
      "llava", "llava_next", "minicpm3", "minicpmv", "minimax_m2", "modernbert",
      "modernbert-decoder", "molmo", "molmo2", "nemotron", "nvfp4", "opencua", "openvla",
      "paddleocr_vl", "phi3", "phi3_v", "phimoe", "qwen2", "qwen3_5", "qwen3_5_moe",
      "qwen3_5_moe_text", "qwen4_exp", "step3_vl", "vipllava", "cohere_asr", "camembertv2-base",
      "siglip2", "smolvlm"};
  return kTypes.count(model_type) != 0;
}

bool is_generic(const std::string& name) {
  return name == kGeneric || name == "PreTrainedTokenizer";
}

std::string strip_fast(std::string name) {
  if (name.size() > 4 && name.compare(name.size() - 4, 4, "Fast") == 0) name.resize(name.size() - 4);
  return name == "PreTrainedTokenizer" ? kGeneric : name;
}

std::string string_at(const Json& j, const char* key) {
  return j.is_object() && j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : "";
}

TokenizerClass named(const std::string& name, std::string why) {
  return {name, is_generic(name), std::move(why)};
}

Json byte_level(bool add_prefix_space, bool use_regex) {
  return {{"type", "ByteLevel"}, {"add_prefix_space", add_prefix_space}, {"trim_offsets", true},
          {"use_regex", use_regex}};
}

}  // namespace

TokenizerClass tokenizer_class_of(const std::string& dir, const Json& tokenizer_json) {
  const Json tc = read_json(fs::path(dir) / "tokenizer_config.json");
  const Json config = read_json(fs::path(dir) / "config.json");
  std::string hub = string_at(tc, "tokenizer_class");
  if (hub.empty()) hub = string_at(config, "tokenizer_class");
  if (!hub.empty()) hub = strip_fast(hub);
  const std::string type = string_at(config, "model_type");
  const auto family = family_classes().find(type);
  const std::string mapped = family == family_classes().end() ? "" : family->second;
  if (hub == "LlamaTokenizer" && tokenizer_json.dump().find("\"ByteLevel\"") != std::string::npos &&
      !distrusted_hub_class(type)) {
    return named(kGeneric, "tokenizer_class LlamaTokenizer over a byte-level tokenizer.json");
  }
  if (!mapped.empty() && !hub.empty() && hub != mapped) {
    if (distrusted_hub_class(type)) {
      return named(mapped, "model_type " + type + " (its tokenizer_class " + hub + " overruled)");
    }
    return named(hub, "tokenizer_class " + hub);
  }
  if (!hub.empty()) return named(hub, "tokenizer_class " + hub);
  if (!mapped.empty()) return named(mapped, "model_type " + type);
  return named(kGeneric, "no tokenizer_class and no model_type with a class of its own");
}

Json with_class_pipeline(Json j, const TokenizerClass& c, const Json& tokenizer_config,
                         const std::string& where) {
  if (c.generic) return j;
  const bool prefix = tokenizer_config.is_object() &&
                      tokenizer_config.value("add_prefix_space", Json(false)).is_boolean() &&
                      tokenizer_config.value("add_prefix_space", false);
  Json normalizer, pre;
  if (c.name == "Qwen2Tokenizer") {
    normalizer = {{"type", "NFC"}};
    const std::string qwen2 =
        "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
        "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
    pre = {{"type", "Sequence"},
           {"pretokenizers",
            {{{"type", "Split"}, {"pattern", {{"Regex", qwen2}}}, {"behavior", "Isolated"},
              {"invert", false}},
             byte_level(prefix, false)}}};
  } else if (c.name == "GPT2Tokenizer" || c.name == "GPTNeoXTokenizer") {
    if (c.name == "GPTNeoXTokenizer") normalizer = {{"type", "NFC"}};
    pre = byte_level(prefix, true);
  } else {
    throw ConfigError(str(where, ": transformers builds ", c.name, " for this folder (", c.why,
                          "), whose own pipeline ZeroRT does not implement: its ids would differ "
                          "from transformers'"));
  }
  j["normalizer"] = normalizer;
  j["pre_tokenizer"] = pre;
  j["decoder"] = byte_level(true, true);
  if (j.contains("model") && j["model"].is_object()) {
    Json& model = j["model"];
    for (const char* key : {"dropout", "unk_token", "continuing_subword_prefix",
                            "end_of_word_suffix"}) {
      model[key] = nullptr;
    }
    model["fuse_unk"] = false;
    model["byte_fallback"] = false;
    model["ignore_merges"] = false;
  }
  return j;
}

}  // namespace zrt::text
