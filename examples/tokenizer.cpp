#include "examples/tokenizer.h"

#include <filesystem>
#include <fstream>
#include <optional>

#include "core/error.h"
#include "core/json.h"
#include "zrt/build_config.h"

#if ZRT_WITH_SENTENCEPIECE
#include <sentencepiece_processor.h>
#endif

namespace zrt::examples {

bool valid_utf8(const std::string& s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const auto* end = p + s.size();
  while (p < end) {
    const unsigned char c = *p;
    int more = 0;
    uint32_t cp = 0;
    if (c < 0x80) {
      ++p;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      more = 1, cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      more = 2, cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      more = 3, cp = c & 0x07;
    } else {
      return false;
    }
    if (end - p <= more) return false;
    for (int i = 1; i <= more; ++i) {
      if ((p[i] & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (p[i] & 0x3F);
    }
    static constexpr uint32_t kSmallest[] = {0, 0x80, 0x800, 0x10000};
    if (cp < kSmallest[more] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    p += more + 1;
  }
  return true;
}

#if !ZRT_WITH_SENTENCEPIECE

struct TextTokenizer::Impl {};

std::unique_ptr<TextTokenizer> TextTokenizer::open(const std::string&, std::string* why) {
  *why =
      "this zrt-generate was built without SentencePiece (install libsentencepiece-dev and "
      "reconfigure with -DZRT_WITH_SENTENCEPIECE=ON)";
  return nullptr;
}
std::vector<int64_t> TextTokenizer::encode(const std::string&) const { return {}; }
std::string TextTokenizer::decode(const std::vector<int64_t>&, int64_t*) const { return {}; }
int64_t TextTokenizer::pieces() const { return 0; }
std::string TextTokenizer::describe() const { return {}; }

#else  // ZRT_WITH_SENTENCEPIECE

namespace {

namespace fs = std::filesystem;

// The BOS/EOS ids put before and after every encoded text, and which file said so.
struct SpecialTokens {
  std::vector<int64_t> prefix, suffix;
  std::string source;
};

// The JSON document in `file`, or null when there is no such file.
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

// A token as tokenizer_config.json writes it: a string or an AddedToken {"content": ...}.
std::optional<std::string> token_text(const Json& config, const char* key) {
  if (!config.is_object() || !config.contains(key)) return std::nullopt;
  const Json& t = config[key];
  if (t.is_string()) return t.get<std::string>();
  if (t.is_object() && t.contains("content") && t["content"].is_string())
    return t["content"].get<std::string>();
  return std::nullopt;
}

// The TemplateProcessing of a tokenizers post_processor: itself or one inside a Sequence.
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

// Rule 1 (tokenizer.h): the special tokens around "$A" in tokenizer.json's `single` template.
SpecialTokens template_tokens(const Json& tokenizer, const fs::path& file,
                              const sentencepiece::SentencePieceProcessor& sp) {
  SpecialTokens out;
  out.source = str(file.filename().string(), "'s post_processor");
  const Json* tp = find_template(tokenizer["post_processor"]);
  if (tp == nullptr) return out;  // no template: transformers adds nothing either
  const std::string where = str(file.string(), ": post_processor");
  ZRT_CHECK_AS(ConfigError, tp->contains("single") && (*tp)["single"].is_array(), where,
               " has no 'single' template");
  const Json& specials = tp->value("special_tokens", Json::object());
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
      const auto v = id.get<int64_t>();
      ZRT_CHECK_AS(ConfigError, v >= sp.GetPieceSize() || sp.IdToPiece(static_cast<int>(v)) == name,
                   where, ": token '", name, "' has id ", v, ", which is '",
                   sp.IdToPiece(static_cast<int>(v)), "' in tokenizer.model");
      (after_text ? out.suffix : out.prefix).push_back(v);
    }
  }
  return out;
}

// The model's BOS (or EOS) id, checked against the token tokenizer_config.json names.
int64_t model_special(const sentencepiece::SentencePieceProcessor& sp, const Json& config,
                      const fs::path& file, bool bos) {
  const char* what = bos ? "BOS" : "EOS";
  const int id = bos ? sp.bos_id() : sp.eos_id();
  ZRT_CHECK_AS(ConfigError, id >= 0, file.string(), " asks for a ", what,
               " token, but tokenizer.model defines none");
  if (const auto named = token_text(config, bos ? "bos_token" : "eos_token")) {
    ZRT_CHECK_AS(ConfigError, *named == sp.IdToPiece(id), file.string(), ": ",
                 bos ? "bos_token" : "eos_token", " is '", *named, "', but tokenizer.model's ",
                 what, " piece is '", sp.IdToPiece(id), "'");
  }
  return id;
}

SpecialTokens special_tokens(const fs::path& dir, const sentencepiece::SentencePieceProcessor& sp) {
  const fs::path tokenizer_json = dir / "tokenizer.json";
  const Json tokenizer = read_json(tokenizer_json);
  if (tokenizer.is_object() && tokenizer.contains("post_processor"))
    return template_tokens(tokenizer, tokenizer_json, sp);
  const fs::path config_file = dir / "tokenizer_config.json";
  const Json config = read_json(config_file);
  auto flag = [&](const char* key, bool fallback) {
    if (!config.is_object() || !config.contains(key) || config[key].is_null()) return fallback;
    ZRT_CHECK_AS(ConfigError, config[key].is_boolean(), config_file.string(), ": '", key,
                 "' must be true or false, got ", config[key].dump());
    return config[key].get<bool>();
  };
  SpecialTokens out;
  const bool ruled =
      config.is_object() && (config.contains("add_bos_token") || config.contains("add_eos_token"));
  out.source = ruled ? "tokenizer_config.json" : "the LLaMA default";
  if (flag("add_bos_token", true))
    out.prefix.push_back(model_special(sp, config, config_file, true));
  if (flag("add_eos_token", false))
    out.suffix.push_back(model_special(sp, config, config_file, false));
  return out;
}

std::string ids_text(const std::vector<int64_t>& ids) {
  std::string s = "[";
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? ", " : "") + std::to_string(ids[i]);
  return s + "]";
}

}  // namespace

struct TextTokenizer::Impl {
  sentencepiece::SentencePieceProcessor sp;
  SpecialTokens special;
  std::string file;
};

std::unique_ptr<TextTokenizer> TextTokenizer::open(const std::string& dir, std::string* why) {
  const fs::path model = fs::path(dir) / "tokenizer.model";
  std::error_code ec;
  if (!fs::exists(model, ec)) {
    *why = str(dir, " has no tokenizer.model (SentencePiece)",
               fs::exists(fs::path(dir) / "tokenizer.json", ec)
                   ? "; a tokenizer.json alone (e.g. LLaMA 3's byte-level BPE) is not read"
                   : "");
    return nullptr;
  }
  auto impl = std::make_unique<Impl>();
  impl->file = model.string();
  const auto status = impl->sp.Load(impl->file);
  if (!status.ok()) {
    *why = str(impl->file, " is not a SentencePiece model (", status.ToString(), ")");
    return nullptr;
  }
  impl->special = special_tokens(dir, impl->sp);
  return std::unique_ptr<TextTokenizer>(new TextTokenizer(std::move(impl)));
}

std::vector<int64_t> TextTokenizer::encode(const std::string& text) const {
  std::vector<int> pieces;
  const auto status = impl_->sp.Encode(text, &pieces);
  ZRT_CHECK_AS(UsageError, status.ok(), impl_->file,
               ": cannot encode the text: ", status.ToString());
  std::vector<int64_t> ids = impl_->special.prefix;
  ids.insert(ids.end(), pieces.begin(), pieces.end());
  ids.insert(ids.end(), impl_->special.suffix.begin(), impl_->special.suffix.end());
  return ids;
}

std::string TextTokenizer::decode(const std::vector<int64_t>& ids, int64_t* dropped) const {
  // libsentencepiece 0.1.97 does not range-check ids in Decode: out-of-range ones are ours to drop.
  std::vector<int> known;
  for (int64_t id : ids) {
    if (id >= 0 && id < pieces()) {
      known.push_back(static_cast<int>(id));
    } else if (dropped != nullptr) {
      *dropped += 1;
    }
  }
  std::string text;
  const auto status = impl_->sp.Decode(known, &text);
  ZRT_CHECK(status.ok(), impl_->file, ": cannot decode ", ids_text(ids), ": ", status.ToString());
  return text;
}

int64_t TextTokenizer::pieces() const { return impl_->sp.GetPieceSize(); }

std::string TextTokenizer::describe() const {
  return str(impl_->file, ": ", pieces(), " pieces; each text gets ",
             ids_text(impl_->special.prefix), " before and ", ids_text(impl_->special.suffix),
             " after it (", impl_->special.source, ")");
}

#endif  // ZRT_WITH_SENTENCEPIECE

TextTokenizer::TextTokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
TextTokenizer::~TextTokenizer() = default;

std::string TextTokenizer::continuation(const std::vector<int64_t>& prompt,
                                        const std::vector<int64_t>& generated,
                                        int64_t* dropped) const {
  std::vector<int64_t> all = prompt;
  all.insert(all.end(), generated.begin(), generated.end());
  const std::string full = decode(all, dropped);
  const std::string head = decode(prompt);
  // The prompt's own text is a prefix of the whole one unless a byte run or a merge crosses the
  // boundary; then the generated ids alone are decoded.
  if (full.compare(0, head.size(), head) == 0) return full.substr(head.size());
  return decode(generated);
}

}  // namespace zrt::examples
