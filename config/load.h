// Reading a DeepSpeed config into a Json object: from a file, a JSON string, a urlsafe-base64
// string, or an existing Json (docs/DEEPSPEED.md §1.1 and §3.1).
//
// DeepSpeed reads files with hjson. ZeroRT accepts JSON plus // and /* */ comments, which covers
// the configs people actually ship; hjson's other relaxations (unquoted keys or strings, trailing
// or missing commas, ''' multi-line strings) are NOT supported and give a parse error that says so.
// Duplicate keys anywhere in the document are an error listing all of them (DeepSpeed checks
// files this way). Inputs are bounded: kMaxConfigBytes of text, kMaxConfigDepth of nesting.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "core/json.h"

namespace zrt::config {

inline constexpr std::size_t kMaxConfigBytes = 16u << 20;  // 16 MiB
inline constexpr int kMaxConfigDepth = 64;

// Parses config text. `source` names the input in messages (a path, "<string>", "<base64>").
// Throws ConfigError: not JSON (with line and column), duplicate keys
// ("Duplicate keys in DeepSpeed config: ['a', 'zero_optimization.stage']"), too big, too deep,
// or not a JSON object at the top level.
Json parse_config_text(std::string_view text, const std::string& source);

// Reads and parses a file. Throws ConfigError when it cannot be read.
Json load_config_file(const std::string& path);

// accelerate's rules for a string: an existing file path, else a JSON string, else urlsafe
// base64 of a JSON document. Anything else: ConfigError("Expected a string path to an existing
// deepspeed config, or a dictionary, or a base64 encoded string. Received: ...").
Json load_config_source(const std::string& path_json_or_base64);

// A copy of `config`, which must be a JSON object (ConfigError otherwise).
Json load_config_json(const Json& config);

// Decodes base64 (urlsafe "-_" or standard "+/" alphabet; padding optional; ASCII whitespace
// ignored). nullopt when the text is not base64.
std::optional<std::string> decode_base64(std::string_view text);

}  // namespace zrt::config
