// The regex splits of byte-level BPE pre-tokenizers (text/bpe_tokenizer.h), matched by
// hand-written scanners over code points: the three patterns below, nothing else.
//
// Note [Pre-tokenizer patterns]
// tokenizers runs these patterns with Oniguruma: alternatives tried left to right at each
// position, greedy quantifiers backtracking, and every match (with the text between matches, which
// these patterns never leave) its own piece. Each pattern matches at every position, so a scanner
// only has to know where the match that starts at i ends:
//   GPT-2        's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//   LLaMA-3      (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
//   (cl100k)       ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//   Qwen2        LLaMA-3's with \p{N} (one digit per piece) for \p{N}{1,3}
// The backtracking cases worth writing down: a run of white space not at the end of the text
// gives up its last character to what follows (`\s+(?!\S)`: "  x" is " ", " x"), unless the run
// is one character (`\s+`); LLaMA-3's `\s*[\r\n]+` ends a run of white space just after its last
// \r or \n. (?i:) lets U+017F (long s) match 's' as Oniguruma's case folding does.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace zrt::text {

enum class SplitPattern { kGpt2, kLlama3, kQwen2 };

// Which known pattern `regex` (as tokenizer.json writes it) is, or nullopt.
std::optional<SplitPattern> known_split_pattern(const std::string& regex);
// "GPT-2", "LLaMA-3/cl100k", "Qwen2".
const char* split_pattern_name(SplitPattern p);

// Appends the pieces of valid UTF-8 `text` (each a view into it, in order, together all of it).
void split_words(SplitPattern p, std::string_view text, std::vector<std::string_view>* out);

}  // namespace zrt::text
