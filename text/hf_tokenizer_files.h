// Reading a Hugging Face model folder's tokenizer files (tokenizer.json, tokenizer_config.json):
// the pieces the SentencePiece and the byte-level BPE tokenizers of text/tokenizer.h share.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "core/json.h"

namespace zrt::text {

// The JSON document in `file`, or null when there is no such file; ConfigError when it does not
// read or parse.
Json read_json(const std::filesystem::path& file);

// A token as tokenizer_config.json writes it: a string or an AddedToken {"content": ...}.
std::optional<std::string> token_text(const Json& config, const char* key);

// tokenizer_config.json's boolean `key`, `fallback` when absent or null; ConfigError (naming
// `file`) when it is something else.
bool config_flag(const Json& config, const std::filesystem::path& file, const char* key,
                 bool fallback);

// One special token of a TemplateProcessing's `single` template.
struct TemplateToken {
  std::string name;  // as the template names it ("<|begin_of_text|>")
  int64_t id;
  bool after_text;  // after "$A" (an EOS) rather than before it (a BOS)
};

// The special tokens of tokenizer.json's `post_processor` `single` template, when it is a
// TemplateProcessing or a Sequence holding one; nullopt when it has none (null, ByteLevel, ...).
// ConfigError, naming `where`, for a template that does not read.
std::optional<std::vector<TemplateToken>> template_tokens(const Json& post_processor,
                                                          const std::string& where);

// "[1, 2, 3]".
std::string ids_text(const std::vector<int64_t>& ids);

}  // namespace zrt::text
