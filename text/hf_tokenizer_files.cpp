#include "text/hf_tokenizer_files.h"

#include <fstream>

#include "core/error.h"

namespace zrt::text {

namespace fs = std::filesystem;

Json read_json(const fs::path& file) {
  std::error_code ec;
  if (!fs::exists(file, ec)) return nullptr;
  std::ifstream in(file);
  ZRT_CHECK_AS(ConfigError, in.good(), file.string(), ": cannot read it");
  try {
    return Json::parse(in);
  } catch (const Json::exception& e) {
    throw ConfigError(str(file.string(), ": not valid JSON: ", e.what()));
  }
}

std::optional<std::string> token_text(const Json& config, const char* key) {
  if (!config.is_object() || !config.contains(key)) return std::nullopt;
  const Json& t = config[key];
  if (t.is_string()) return t.get<std::string>();
  if (t.is_object() && t.contains("content") && t["content"].is_string())
    return t["content"].get<std::string>();
  return std::nullopt;
}

bool config_flag(const Json& config, const fs::path& file, const char* key, bool fallback) {
  if (!config.is_object() || !config.contains(key) || config[key].is_null()) return fallback;
  ZRT_CHECK_AS(ConfigError, config[key].is_boolean(), file.string(), ": '", key,
               "' must be true or false, got ", config[key].dump());
  return config[key].get<bool>();
}

namespace {
// The TemplateProcessing of a post_processor: itself or one inside a Sequence.
const Json* find_template(const Json& pp) {
  if (!pp.is_object()) return nullptr;
  const std::string type = pp.value("type", "");
  if (type == "TemplateProcessing") return &pp;
  if (type == "Sequence" && pp.contains("processors") && pp["processors"].is_array()) {
    for (const Json& p : pp["processors"]) {
      if (const Json* t = find_template(p)) return t;
    }
  }
  return nullptr;
}
}  // namespace

std::optional<std::vector<TemplateToken>> template_tokens(const Json& post_processor,
                                                          const std::string& where) {
  const Json* tp = find_template(post_processor);
  if (tp == nullptr) return std::nullopt;
  ZRT_CHECK_AS(ConfigError, tp->contains("single") && (*tp)["single"].is_array(), where,
               " has no 'single' template");
  const Json& specials = tp->value("special_tokens", Json::object());
  std::vector<TemplateToken> out;
  bool after_text = false;
  for (const Json& item : (*tp)["single"]) {
    if (item.contains("Sequence")) {
      after_text = true;
      continue;
    }
    ZRT_CHECK_AS(ConfigError,
                 item.contains("SpecialToken") && item["SpecialToken"].contains("id") &&
                     item["SpecialToken"]["id"].is_string(),
                 where, ": unexpected template item ", item.dump());
    const std::string name = item["SpecialToken"]["id"].get<std::string>();
    ZRT_CHECK_AS(ConfigError, specials.contains(name) && specials[name].contains("ids"), where,
                 ": the template's token '", name, "' is not among its special_tokens");
    for (const Json& id : specials[name]["ids"]) {
      ZRT_CHECK_AS(ConfigError, id.is_number_integer() && id.get<int64_t>() >= 0, where,
                   ": token '", name, "' has the id ", id.dump());
      out.push_back({name, id.get<int64_t>(), after_text});
    }
  }
  return out;
}

std::string ids_text(const std::vector<int64_t>& ids) {
  std::string s = "[";
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? ", " : "") + std::to_string(ids[i]);
  return s + "]";
}

}  // namespace zrt::text
