#include "text/unicode_text.h"

#include <algorithm>
#include <unordered_map>
#include <utility>
#include <vector>

namespace zrt::text::unicode {
namespace {

constexpr uint32_t kCodePoints = 0x110000;
// Per code point flags: the CharClass in the low two bits, then these.
constexpr uint8_t kWordFlag = 4;
constexpr uint8_t kNfcFlag = 8;  // NFC may change the text around it (Note [NFC fast path])

// Hangul syllables decompose and compose by arithmetic (Unicode 3.12).
constexpr uint32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr uint32_t kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount;
constexpr uint32_t kSCount = kLCount * kNCount;

std::vector<uint32_t> unpack(const char* s) {
  std::vector<uint32_t> out;
  uint32_t acc = 0;
  for (; *s != '\0'; ++s) {
    const char c = *s;
    if (c >= 'g' && c <= 'v') {
      acc = acc * 16 + static_cast<uint32_t>(c - 'g');
      continue;
    }
    acc = acc * 16 + static_cast<uint32_t>(c <= '9' ? c - '0' : c - 'a' + 10);
    out.push_back(acc);
    acc = 0;
  }
  return out;
}

struct ClassRange {
  uint32_t first, last;
  uint8_t ccc;
};

struct Tables {
  std::vector<uint8_t> flags = std::vector<uint8_t>(kCodePoints, 0);
  std::vector<ClassRange> classes;
  // The full canonical decomposition of a code point: (offset, length) in `pool`.
  std::unordered_map<uint32_t, std::pair<uint32_t, uint32_t>> decompositions;
  std::vector<uint32_t> pool;
  std::unordered_map<uint64_t, uint32_t> compositions;  // (first << 21 | second) -> composite

  Tables() {
    mark_ranges(kLetters, [](uint8_t& f) { f = (f & ~3) | uint8_t(CharClass::kLetter); });
    mark_ranges(kNumbers, [](uint8_t& f) { f = (f & ~3) | uint8_t(CharClass::kNumber); });
    mark_ranges(kWhiteSpace, [](uint8_t& f) { f = (f & ~3) | uint8_t(CharClass::kSpace); });
    mark_ranges(kWordChars, [](uint8_t& f) { f |= kWordFlag; });
    const std::vector<uint32_t> c = unpack(kCombiningClasses);
    uint32_t next = 0;
    for (size_t i = 0; i + 2 < c.size(); i += 3) {
      const uint32_t first = next + c[i], last = first + c[i + 1];
      classes.push_back({first, last, static_cast<uint8_t>(c[i + 2])});
      for (uint32_t cp = first; cp <= last; ++cp) flags[cp] |= kNfcFlag;
      next = last + 1;
    }
    read_decompositions();
    for (uint32_t v = 0; v < kVCount; ++v) flags[kVBase + v] |= kNfcFlag;
    for (uint32_t t = 1; t < kTCount; ++t) flags[kTBase + t] |= kNfcFlag;
  }

  template <typename Mark>
  void mark_ranges(const char* packed, Mark mark) {
    const std::vector<uint32_t> r = unpack(packed);
    uint32_t next = 0;
    for (size_t i = 0; i + 1 < r.size(); i += 2) {
      const uint32_t first = next + r[i], last = first + r[i + 1];
      for (uint32_t cp = first; cp <= last; ++cp) mark(flags[cp]);
      next = last + 1;
    }
  }

  // One level of canonical mappings from the table, then each expanded to its full
  // decomposition; the mappings NFC composes back become `compositions`.
  void read_decompositions() {
    const std::vector<uint32_t> d = unpack(kDecompositions);
    std::unordered_map<uint32_t, std::vector<uint32_t>> mapping;
    uint32_t cp = static_cast<uint32_t>(-1);
    for (size_t i = 0; i < d.size();) {
      cp += d[i];
      const uint32_t length = d[i + 1] / 2;
      const bool composes = d[i + 1] % 2 == 1;
      std::vector<uint32_t> m(d.begin() + i + 2, d.begin() + i + 2 + length);
      if (composes) {
        compositions[uint64_t(m[0]) << 21 | m[1]] = cp;
        flags[m[1]] |= kNfcFlag;  // may compose with what comes before it
      } else {
        flags[cp] |= kNfcFlag;  // NFC replaces it
      }
      mapping[cp] = std::move(m);
      i += 2 + length;
    }
    for (const auto& [from, m] : mapping) {
      const uint32_t offset = static_cast<uint32_t>(pool.size());
      expand(mapping, m);
      decompositions[from] = {offset, static_cast<uint32_t>(pool.size()) - offset};
    }
  }

  void expand(const std::unordered_map<uint32_t, std::vector<uint32_t>>& mapping,
              const std::vector<uint32_t>& m) {
    for (uint32_t c : m) {
      const auto it = mapping.find(c);
      if (it == mapping.end()) {
        pool.push_back(c);
      } else {
        expand(mapping, it->second);
      }
    }
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

uint8_t flags_of(uint32_t cp) { return cp < kCodePoints ? tables().flags[cp] : 0; }

void decompose(uint32_t cp, std::vector<uint32_t>* out) {
  const Tables& t = tables();
  if (cp >= kSBase && cp < kSBase + kSCount) {
    const uint32_t s = cp - kSBase;
    out->push_back(kLBase + s / kNCount);
    out->push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount != 0) out->push_back(kTBase + s % kTCount);
    return;
  }
  const auto it = t.decompositions.find(cp);
  if (it == t.decompositions.end()) {
    out->push_back(cp);
    return;
  }
  out->insert(out->end(), t.pool.begin() + it->second.first,
              t.pool.begin() + it->second.first + it->second.second);
}

// The primary composite of (first, second), or 0.
uint32_t compose(uint32_t first, uint32_t second) {
  if (first >= kLBase && first < kLBase + kLCount && second >= kVBase &&
      second < kVBase + kVCount) {
    return kSBase + ((first - kLBase) * kVCount + (second - kVBase)) * kTCount;
  }
  if (first >= kSBase && first < kSBase + kSCount && (first - kSBase) % kTCount == 0 &&
      second > kTBase && second < kTBase + kTCount) {
    return first + (second - kTBase);
  }
  const auto& c = tables().compositions;
  const auto it = c.find(uint64_t(first) << 21 | second);
  return it == c.end() ? 0 : it->second;
}

// Canonical composition of a decomposed, canonically ordered `cps` (Unicode 3.11, D117).
void compose_all(std::vector<uint32_t>* cps) {
  std::vector<uint32_t>& b = *cps;
  if (b.empty()) return;
  size_t starter = 0, out = 1;
  bool has_starter = combining_class(b[0]) == 0;
  int last_class = combining_class(b[0]);  // of b[out - 1], the last code point kept
  for (size_t i = 1; i < b.size(); ++i) {
    const uint32_t c = b[i];
    const int cls = combining_class(c);
    // Blocked: something kept between the starter and c has class 0 or >= c's (canonical order
    // makes the last kept one the largest).
    const bool blocked = out != starter + 1 && last_class >= cls;
    if (has_starter && !blocked) {
      if (const uint32_t composite = compose(b[starter], c)) {
        b[starter] = composite;
        continue;
      }
    }
    if (cls == 0) {
      starter = out;
      has_starter = true;
    }
    last_class = cls;
    b[out++] = c;
  }
  b.resize(out);
}

}  // namespace

CharClass char_class(uint32_t cp) { return static_cast<CharClass>(flags_of(cp) & 3); }
bool is_white_space(uint32_t cp) { return char_class(cp) == CharClass::kSpace; }
bool is_word_char(uint32_t cp) { return (flags_of(cp) & kWordFlag) != 0; }

int combining_class(uint32_t cp) {
  const auto& c = tables().classes;
  auto it = std::upper_bound(c.begin(), c.end(), cp,
                             [](uint32_t v, const ClassRange& r) { return v < r.first; });
  if (it == c.begin()) return 0;
  --it;
  return cp <= it->last ? it->ccc : 0;
}

uint32_t previous_code_point(std::string_view s, size_t* end) {
  size_t start = *end - 1;
  while (start > 0 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
  size_t i = start;
  const uint32_t cp = next_code_point(s, &i);
  *end = start;
  return cp;
}

void append_utf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

// Note [NFC fast path]
// Text in which no code point may change under NFC is its own NFC. A code point may change it
// when it has a non-zero combining class (reordering, composition with what precedes it), is the
// second half of a composition (U+0301 after 'e', a Hangul vowel after a leading consonant), or
// has a canonical decomposition NFC does not compose back (singletons, exclusions). Everything
// below U+0300 is stable, so ASCII and Latin-1 text are passed through after one byte scan.
std::string nfc(std::string_view s) {
  bool stable = true;
  for (size_t i = 0; i < s.size() && stable;) {
    if (static_cast<unsigned char>(s[i]) < 0xCC) {
      ++i;
      continue;
    }
    stable = (flags_of(next_code_point(s, &i)) & kNfcFlag) == 0;
  }
  if (stable) return std::string(s);
  std::vector<uint32_t> cps;
  for (size_t i = 0; i < s.size();) decompose(next_code_point(s, &i), &cps);
  // Canonical ordering: a stable sort by class of each run of non-starters.
  for (size_t i = 0; i < cps.size();) {
    if (combining_class(cps[i]) == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < cps.size() && combining_class(cps[j]) != 0) ++j;
    std::stable_sort(cps.begin() + i, cps.begin() + j, [](uint32_t a, uint32_t b) {
      return combining_class(a) < combining_class(b);
    });
    i = j;
  }
  compose_all(&cps);
  std::string out;
  out.reserve(s.size());
  for (uint32_t cp : cps) append_utf8(cp, &out);
  return out;
}

std::string utf8_lossy(std::string_view bytes) {
  static const std::string kReplacement = "\xEF\xBF\xBD";
  std::string out;
  out.reserve(bytes.size());
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  const size_t n = bytes.size();
  for (size_t i = 0; i < n;) {
    const unsigned char b = p[i];
    if (b < 0x80) {
      out.push_back(static_cast<char>(b));
      ++i;
      continue;
    }
    // The length of the sequence b starts and the range of its second byte.
    size_t length = 0;
    unsigned char low = 0x80, high = 0xBF;
    if (b >= 0xC2 && b <= 0xDF) {
      length = 2;
    } else if (b >= 0xE0 && b <= 0xEF) {
      length = 3;
      if (b == 0xE0) low = 0xA0;
      if (b == 0xED) high = 0x9F;
    } else if (b >= 0xF0 && b <= 0xF4) {
      length = 4;
      if (b == 0xF0) low = 0x90;
      if (b == 0xF4) high = 0x8F;
    }
    size_t good = 1;  // the bytes of a valid prefix of a sequence
    if (length > 0 && i + 1 < n && p[i + 1] >= low && p[i + 1] <= high) {
      good = 2;
      while (good < length && i + good < n && (p[i + good] & 0xC0) == 0x80) ++good;
    }
    if (good == length) {
      out.append(bytes.substr(i, length));
    } else {
      out += kReplacement;  // one U+FFFD for the maximal ill-formed prefix
    }
    i += good;
  }
  return out;
}

}  // namespace zrt::text::unicode
