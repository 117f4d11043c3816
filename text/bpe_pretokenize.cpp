#include "text/bpe_pretokenize.h"

#include <algorithm>
#include <cstdint>

#include "text/unicode_text.h"

namespace zrt::text {
namespace {

using unicode::CharClass;

constexpr const char* kGpt2Regex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr const char* kLlama3Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kQwen2Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// A text as code points, their classes and byte offsets (offset[n] is the text's size).
struct CodePoints {
  std::vector<uint32_t> cp, offset;
  std::vector<CharClass> cls;
  size_t n = 0;

  void read(std::string_view text) {
    cp.clear(), offset.clear(), cls.clear();
    for (size_t i = 0; i < text.size();) {
      offset.push_back(static_cast<uint32_t>(i));
      const uint32_t c = unicode::next_code_point(text, &i);
      cp.push_back(c);
      cls.push_back(c < 0x80 ? ascii_class(c) : unicode::char_class(c));
    }
    offset.push_back(static_cast<uint32_t>(text.size()));
    n = cp.size();
  }
  static CharClass ascii_class(uint32_t c) {
    if ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') return CharClass::kLetter;
    if (c >= '0' && c <= '9') return CharClass::kNumber;
    if (c == ' ' || (c >= 0x09 && c <= 0x0D)) return CharClass::kSpace;
    return CharClass::kOther;
  }
  size_t run(size_t i, CharClass c) const {
    while (i < n && cls[i] == c) ++i;
    return i;
  }
  bool newline(size_t i) const { return cp[i] == '\r' || cp[i] == '\n'; }
};

// The length of the contraction ('s 't 're 've 'm 'll 'd) at i, 0 for none.
size_t contraction(const CodePoints& t, size_t i, bool ignore_case) {
  if (t.cp[i] != '\'' || i + 1 >= t.n) return 0;
  auto letter = [&](size_t k) -> uint32_t {
    if (k >= t.n) return 0;
    const uint32_t c = t.cp[k];
    if (!ignore_case) return c;
    if (c == 0x17F) return 's';  // LATIN SMALL LETTER LONG S folds to 's'
    return c < 0x80 && (c | 0x20) >= 'a' && (c | 0x20) <= 'z' ? (c | 0x20) : c;
  };
  const uint32_t a = letter(i + 1);
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
  const uint32_t b = letter(i + 2);
  if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
  return 0;
}

// `\s+(?!\S)|\s+` at white space i.
size_t white_space_end(const CodePoints& t, size_t i) {
  const size_t k = t.run(i, CharClass::kSpace);
  if (k == t.n || k - i < 2) return k;
  return k - 1;
}

size_t gpt2_match(const CodePoints& t, size_t i) {
  if (const size_t k = contraction(t, i, false)) return i + k;
  size_t j = i;
  if (t.cp[i] == ' ' && i + 1 < t.n && t.cls[i + 1] != CharClass::kSpace) j = i + 1;
  if (t.cls[j] != CharClass::kSpace) return t.run(j, t.cls[j]);  // ` ?\p{L}+` and the like
  return white_space_end(t, i);
}

size_t llama3_match(const CodePoints& t, size_t i, size_t max_digits) {
  if (const size_t k = contraction(t, i, true)) return i + k;
  const CharClass c = t.cls[i];
  if (c == CharClass::kLetter) return t.run(i, c);
  if (c != CharClass::kNumber && !t.newline(i) && i + 1 < t.n &&
      t.cls[i + 1] == CharClass::kLetter) {
    return t.run(i + 1, CharClass::kLetter);  // [^\r\n\p{L}\p{N}]?\p{L}+
  }
  if (c == CharClass::kNumber) return std::min(t.run(i, c), i + max_digits);
  size_t j = i;
  if (t.cp[i] == ' ' && i + 1 < t.n && t.cls[i + 1] == CharClass::kOther) j = i + 1;
  if (t.cls[j] == CharClass::kOther) {  // ` ?[^\s\p{L}\p{N}]+[\r\n]*`
    size_t k = t.run(j, CharClass::kOther);
    while (k < t.n && t.newline(k)) ++k;
    return k;
  }
  const size_t k = t.run(i, CharClass::kSpace);
  for (size_t m = k; m > i; --m) {
    if (t.newline(m - 1)) return m;  // `\s*[\r\n]+`
  }
  return white_space_end(t, i);
}

}  // namespace

std::optional<SplitPattern> known_split_pattern(const std::string& regex) {
  if (regex == kGpt2Regex) return SplitPattern::kGpt2;
  if (regex == kLlama3Regex) return SplitPattern::kLlama3;
  if (regex == kQwen2Regex) return SplitPattern::kQwen2;
  return std::nullopt;
}

const char* split_pattern_name(SplitPattern p) {
  switch (p) {
    case SplitPattern::kGpt2:
      return "GPT-2";
    case SplitPattern::kLlama3:
      return "LLaMA-3/cl100k";
    case SplitPattern::kQwen2:
      return "Qwen2";
  }
  return "?";
}

void split_words(SplitPattern p, std::string_view text, std::vector<std::string_view>* out) {
  thread_local CodePoints t;
  t.read(text);
  for (size_t i = 0; i < t.n;) {
    size_t end = 0;
    switch (p) {
      case SplitPattern::kGpt2:
        end = gpt2_match(t, i);
        break;
      case SplitPattern::kLlama3:
        end = llama3_match(t, i, 3);
        break;
      case SplitPattern::kQwen2:
        end = llama3_match(t, i, 1);
        break;
    }
    out->push_back(text.substr(t.offset[i], t.offset[end] - t.offset[i]));
    i = end;
  }
}

}  // namespace zrt::text
