// BpeTokenizer::open: tokenizer.json read key by key (Note [Byte-level BPE pipeline] in
// bpe_tokenizer.h says what is supported and what is refused).
#include <filesystem>
#include <unordered_map>
#include <unordered_set>

#include "core/error.h"
#include "text/bpe_tokenizer.h"
#include "text/hf_tokenizer_files.h"
#include "text/tokenizer_class.h"
#include "text/unicode_text.h"

namespace zrt::text {
namespace {

namespace fs = std::filesystem;

std::string type_of(const Json& j) {
  if (j.is_null()) return "null";
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string()) return j.dump();
  return j["type"].get<std::string>();
}

bool has_byte_level(const Json& pre) {
  if (type_of(pre) == "ByteLevel") return true;
  if (type_of(pre) != "Sequence" || !pre.contains("pretokenizers")) return false;
  for (const Json& p : pre["pretokenizers"]) {
    if (has_byte_level(p)) return true;
  }
  return false;
}

bool flag(const Json& j, const char* key, bool fallback, const std::string& where) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  ZRT_CHECK_AS(ConfigError, j[key].is_boolean(), where, ".", key, " must be true or false, got ",
               j[key].dump());
  return j[key].get<bool>();
}

// A merge as "a b" or ["a", "b"].
std::pair<std::string, std::string> merge_pair(const Json& m, const std::string& where) {
  if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string())
    return {m[0].get<std::string>(), m[1].get<std::string>()};
  ZRT_CHECK_AS(ConfigError, m.is_string(), where, ": a merge is ", m.dump(),
               ", neither \"a b\" nor [\"a\", \"b\"]");
  const std::string s = m.get<std::string>();
  const size_t space = s.find(' ');
  ZRT_CHECK_AS(ConfigError, space != std::string::npos && s.find(' ', space + 1) == s.npos, where,
               ": the merge \"", s, "\" is not two tokens separated by one space");
  return {s.substr(0, space), s.substr(space + 1)};
}

}  // namespace

std::unique_ptr<BpeTokenizer> BpeTokenizer::open(const std::string& dir, std::string* why) {
  const fs::path path = fs::path(dir) / "tokenizer.json";
  std::error_code ec;
  if (!fs::exists(path, ec)) {
    *why = str(dir, " has no tokenizer.json");
    return nullptr;
  }
  const std::string file = path.string();
  const Json raw = read_json(path);
  ZRT_CHECK_AS(ConfigError, raw.is_object() && raw.contains("model") && raw["model"].is_object(),
               file, ": no 'model' object");
  const std::string type = raw["model"].contains("type") ? type_of(raw["model"]) : "BPE";
  if (type != "BPE") {
    *why = str(file, ": the model is ", type, ", not a byte-level BPE");
    return nullptr;
  }
  if (!has_byte_level(raw.value("pre_tokenizer", Json()))) {
    *why = str(file, ": a BPE without a ByteLevel pre-tokenizer (pre_tokenizer ",
               type_of(raw.value("pre_tokenizer", Json())),
               flag(raw["model"], "byte_fallback", false, file + ": model") ? ", byte_fallback" : "",
               "), not byte-level: SentencePiece-style, as LLaMA 2's");
    return nullptr;
  }
  // Note [The tokenizer class transformers picks]: a family's class brings its own pipeline.
  const TokenizerClass cls = tokenizer_class_of(dir, raw);
  const Json j = with_class_pipeline(raw, cls, read_json(fs::path(dir) / "tokenizer_config.json"),
                                     file);
  const Json& model = j["model"];
  const Json pre = j.value("pre_tokenizer", Json());
  std::unique_ptr<BpeTokenizer> t(new BpeTokenizer());
  t->file_ = file;
  t->class_ = cls.generic ? "" : str(cls.name, " (", cls.why, ")");
  t->read_model(model, file);
  t->read_normalizer(j.value("normalizer", Json()), file);
  t->read_pre_tokenizer(pre, file);
  t->read_added_tokens(j.value("added_tokens", Json::array()), file);
  t->read_post_processor(j, dir);
  t->read_decoder(j.value("decoder", Json()), file);
  return t;
}

void BpeTokenizer::set_token_text(int64_t id, const std::string& text) {
  if (id >= static_cast<int64_t>(text_.size())) {
    text_.resize(id + 1), bytes_.resize(id + 1), kind_.resize(id + 1, 0);
  }
  text_[id] = text;
  bytes_[id] = token_bytes(text).value_or(text);  // the ByteLevel decoder's rule
  kind_[id] = 1;
}

void BpeTokenizer::read_model(const Json& model, const std::string& file) {
  const std::string where = file + ": model";
  ZRT_CHECK_AS(ConfigError, !flag(model, "byte_fallback", false, where), where,
               ".byte_fallback is true: not supported with a ByteLevel pre-tokenizer");
  const Json dropout = model.value("dropout", Json());
  ZRT_CHECK_AS(ConfigError, dropout.is_null() || (dropout.is_number() && dropout == 0), where,
               ".dropout is ", dropout.dump(), ": BPE dropout is not supported");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    const Json v = model.value(key, Json());
    ZRT_CHECK_AS(ConfigError, v.is_null() || v == "", where, ".", key, " is ", v.dump(),
                 ": not supported");
  }
  ZRT_CHECK_AS(ConfigError, model.contains("vocab") && model["vocab"].is_object(), where,
               ".vocab is not an object");
  std::unordered_map<std::string, int32_t> vocab;
  for (const auto& [token, id] : model["vocab"].items()) {
    ZRT_CHECK_AS(ConfigError, id.is_number_integer() && id >= 0 && id < (int64_t{1} << 31), where,
                 ".vocab: the token '", token, "' has the id ", id.dump());
    vocab[token] = id.get<int32_t>();
    set_token_text(id.get<int64_t>(), token);
    if (const auto bytes = token_bytes(token)) model_.add_token(*bytes, id.get<int32_t>());
  }
  model_tokens_ = static_cast<int64_t>(vocab.size());
  auto id_of = [&](const std::string& token, const std::string& what) {
    const auto it = vocab.find(token);
    ZRT_CHECK_AS(ConfigError, it != vocab.end(), where, ".merges: ", what, " '", token,
                 "' is not in the vocabulary");
    return it->second;
  };
  for (const Json& m : model.value("merges", Json::array())) {
    const auto [a, b] = merge_pair(m, where + ".merges");
    const int32_t left = id_of(a, "the token"), right = id_of(b, "the token");
    model_.add_merge(left, right, id_of(a + b, "the merged token"));
  }
  model_.set_ignore_merges(flag(model, "ignore_merges", false, where));
  const Json unk = model.value("unk_token", Json());
  if (!unk.is_null()) {
    ZRT_CHECK_AS(ConfigError, unk.is_string(), where, ".unk_token is ", unk.dump());
    model_.set_unknown(id_of(unk.get<std::string>(), "unk_token"),
                       flag(model, "fuse_unk", false, where));
  }
}

void BpeTokenizer::read_normalizer(const Json& normalizer, const std::string& file) {
  const std::string type = type_of(normalizer);
  if (type == "null") return;
  if (type == "Sequence" && normalizer.contains("normalizers")) {
    for (const Json& n : normalizer["normalizers"]) read_normalizer(n, file);
    return;
  }
  ZRT_CHECK_AS(ConfigError, type == "NFC", file, ": normalizer ", type,
               " is not supported (only none or NFC)");
  nfc_ = true;
}

void BpeTokenizer::read_pre_tokenizer(const Json& pre, const std::string& file) {
  const std::string where = file + ": pre_tokenizer";
  if (type_of(pre) == "Sequence") {
    for (const Json& p : pre["pretokenizers"]) read_pre_tokenizer(p, file);
    return;
  }
  ZRT_CHECK_AS(ConfigError, steps_.empty() || steps_.back().split, where,
               ": ByteLevel must be the last pre-tokenizer");
  PreTokenizeStep step;
  const std::string type = type_of(pre);
  if (type == "ByteLevel") {
    step.add_prefix_space = flag(pre, "add_prefix_space", true, where);
    step.use_regex = flag(pre, "use_regex", true, where);
    steps_.push_back(step);
    return;
  }
  ZRT_CHECK_AS(ConfigError, type == "Split", where, ": ", type,
               " is not supported (only Split and ByteLevel)");
  const Json pattern = pre.value("pattern", Json());
  ZRT_CHECK_AS(ConfigError, pattern.is_object() && pattern.contains("Regex"), where, ".pattern is ",
               pattern.dump(), ": only {\"Regex\": ...} patterns are supported");
  const std::string regex = pattern["Regex"].get<std::string>();
  step.split = known_split_pattern(regex);
  ZRT_CHECK_AS(ConfigError, step.split.has_value(), where, ".pattern: the regex ", regex,
               " is none of the known ones (GPT-2, LLaMA-3/cl100k, Qwen2)");
  ZRT_CHECK_AS(ConfigError, pre.value("behavior", "") == "Isolated", where, ".behavior is ",
               pre.value("behavior", Json()).dump(), ": only Isolated is supported");
  ZRT_CHECK_AS(ConfigError, !flag(pre, "invert", false, where), where,
               ".invert is true: not supported");
  steps_.push_back(step);
}

void BpeTokenizer::read_added_tokens(const Json& added, const std::string& file) {
  const std::string where = file + ": added_tokens";
  ZRT_CHECK_AS(ConfigError, added.is_array(), where, " is not a list");
  for (const Json& a : added) {
    AddedToken t;
    ZRT_CHECK_AS(ConfigError,
                 a.is_object() && a.contains("content") && a["content"].is_string() &&
                     a.contains("id") && a["id"].is_number_integer() && a["id"] >= 0,
                 where, ": the entry ", a.dump(), " has no content and id");
    t.content = a["content"].get<std::string>();
    t.id = a["id"].get<int64_t>();
    t.special = flag(a, "special", false, where);
    t.lstrip = flag(a, "lstrip", false, where);
    t.rstrip = flag(a, "rstrip", false, where);
    t.single_word = flag(a, "single_word", false, where);
    t.normalized = flag(a, "normalized", !t.special, where);
    set_token_text(t.id, t.content);
    const auto index = static_cast<int32_t>(added_.size());
    if (t.normalized) {
      normalized_added_.add(nfc_ ? unicode::nfc(t.content) : t.content, index);
    } else {
      raw_added_.add(t.content, index);
    }
    added_.push_back(std::move(t));
  }
  std::unordered_set<std::string> specials, all;
  for (const AddedToken& t : added_) {
    if (t.special) specials.insert(t.content);
  }
  for (size_t id = 0; id < text_.size(); ++id) {
    if (kind_[id] == 0) continue;
    all.insert(text_[id]);
    if (specials.count(text_[id]) != 0) kind_[id] = 2;
  }
  vocab_size_ = static_cast<int64_t>(all.size());
}

std::optional<int64_t> BpeTokenizer::token_id(const std::string& text) const {
  for (const AddedToken& t : added_) {
    if (t.content == text) return t.id;
  }
  for (size_t id = 0; id < text_.size(); ++id) {
    if (kind_[id] != 0 && text_[id] == text) return static_cast<int64_t>(id);
  }
  return std::nullopt;
}

void BpeTokenizer::read_post_processor(const Json& tokenizer, const std::string& dir) {
  const Json pp = tokenizer.value("post_processor", Json());
  const std::string where = file_ + ": post_processor";
  std::vector<const Json*> parts{&pp};
  if (type_of(pp) == "Sequence") {
    parts.clear();
    for (const Json& p : pp["processors"]) parts.push_back(&p);
  }
  for (const Json* p : parts) {
    const std::string type = type_of(*p);
    ZRT_CHECK_AS(ConfigError, type == "null" || type == "ByteLevel" || type == "TemplateProcessing",
                 where, ": ", type,
                 " is not supported (TemplateProcessing, ByteLevel or a Sequence)");
  }
  if (const auto tokens = template_tokens(pp, where)) {
    for (const TemplateToken& t : *tokens) (t.after_text ? suffix_ : prefix_).push_back(t.id);
    special_source_ = "tokenizer.json's post_processor";
    return;
  }
  // Rule 6 of Note [Byte-level BPE pipeline]: no template, tokenizer_config.json's flags.
  const fs::path config_file = fs::path(dir) / "tokenizer_config.json";
  const Json config = read_json(config_file);
  special_source_ = "no template in tokenizer.json, no flags in tokenizer_config.json";
  for (const bool bos : {true, false}) {
    const char* key = bos ? "add_bos_token" : "add_eos_token";
    if (config.is_object() && config.contains(key) && !config[key].is_null())
      special_source_ = "tokenizer_config.json";
    if (!config_flag(config, config_file, key, false)) continue;
    const char* name_key = bos ? "bos_token" : "eos_token";
    const auto name = token_text(config, name_key);
    ZRT_CHECK_AS(ConfigError, name.has_value(), config_file.string(), ": ", key, " is true but ",
                 name_key, " names no token");
    const auto id = token_id(*name);
    ZRT_CHECK_AS(ConfigError, id.has_value(), config_file.string(), ": ", name_key, " '", *name,
                 "' is not a token of ", file_);
    (bos ? prefix_ : suffix_).push_back(*id);
  }
}

void BpeTokenizer::read_decoder(const Json& decoder, const std::string& file) {
  const std::string type = type_of(decoder);
  if (type == "Sequence" && decoder.contains("decoders")) {
    for (const Json& d : decoder["decoders"]) read_decoder(d, file);
    return;
  }
  ZRT_CHECK_AS(ConfigError, type == "ByteLevel", file, ": decoder ", type,
               " is not supported (only ByteLevel)");
}

}  // namespace zrt::text
