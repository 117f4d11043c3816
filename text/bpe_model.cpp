#include "text/bpe_model.h"

#include <algorithm>
#include <functional>

#include "text/unicode_text.h"

namespace zrt::text {

const std::array<uint32_t, 256>& byte_chars() {
  static const std::array<uint32_t, 256> chars = [] {
    std::array<uint32_t, 256> c{};
    uint32_t next = 256;
    for (uint32_t b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      c[b] = printable ? b : next++;
    }
    return c;
  }();
  return chars;
}

std::optional<std::string> token_bytes(std::string_view token) {
  static const std::vector<int> byte_of = [] {
    std::vector<int> m(256 + 68, -1);
    for (int b = 0; b < 256; ++b) m[byte_chars()[b]] = b;
    return m;
  }();
  std::string out;
  out.reserve(token.size());
  for (size_t i = 0; i < token.size();) {
    const uint32_t cp = unicode::next_code_point(token, &i);
    if (cp >= byte_of.size() || byte_of[cp] < 0) return std::nullopt;
    out.push_back(static_cast<char>(byte_of[cp]));
  }
  return out;
}

// --- StringTable ---

std::optional<uint32_t> StringTable::find(std::string_view key) const {
  if (slots_.empty()) return std::nullopt;
  const uint32_t s = slots_[slot_of(key, std::hash<std::string_view>{}(key))];
  if (s == 0) return std::nullopt;
  return entries_[s - 1].value;
}

size_t StringTable::slot_of(std::string_view key, uint64_t hash) const {
  const size_t mask = slots_.size() - 1;
  for (size_t i = hash & mask;; i = (i + 1) & mask) {
    const uint32_t s = slots_[i];
    if (s == 0) return i;
    const Entry& e = entries_[s - 1];
    if (e.hash == hash && e.length == key.size() &&
        std::string_view(keys_).substr(e.offset, e.length) == key) {
      return i;
    }
  }
}

void StringTable::put(std::string_view key, uint32_t value) {
  if ((entries_.size() + 1) * 4 > slots_.size() * 3) grow();
  const uint64_t hash = std::hash<std::string_view>{}(key);
  const size_t i = slot_of(key, hash);
  if (slots_[i] != 0) {
    entries_[slots_[i] - 1].value = value;
    return;
  }
  entries_.push_back(
      {hash, static_cast<uint32_t>(keys_.size()), static_cast<uint32_t>(key.size()), value});
  keys_.append(key);
  slots_[i] = static_cast<uint32_t>(entries_.size());
}

void StringTable::grow() {
  slots_.assign(std::max<size_t>(16, slots_.size() * 2), 0);
  const size_t mask = slots_.size() - 1;
  for (size_t k = 0; k < entries_.size(); ++k) {
    size_t i = entries_[k].hash & mask;
    while (slots_[i] != 0) i = (i + 1) & mask;
    slots_[i] = static_cast<uint32_t>(k + 1);
  }
}

// --- BpeModel ---

namespace {
uint64_t pair_key(int32_t left, int32_t right) {
  return uint64_t(uint32_t(left)) << 32 | uint32_t(right);
}
size_t pair_hash(uint64_t key) { return static_cast<size_t>((key * 0x9E3779B97F4A7C15ull) >> 20); }
}  // namespace

void BpeModel::add_token(std::string_view bytes, int32_t id) {
  words_.put(bytes, static_cast<uint32_t>(id));
  if (bytes.size() == 1) byte_ids_[static_cast<unsigned char>(bytes[0])] = id;
}

void BpeModel::add_merge(int32_t left, int32_t right, int32_t merged) {
  if ((merge_used_ + 1) * 2 > merge_slots_.size()) {  // keep it at most half full
    std::vector<Merge> old = std::move(merge_slots_);
    merge_slots_.assign(std::max<size_t>(64, old.size() * 2), Merge{kEmpty, 0, 0});
    const size_t mask = merge_slots_.size() - 1;
    for (const Merge& m : old) {
      if (m.key == kEmpty) continue;
      size_t i = pair_hash(m.key) & mask;
      while (merge_slots_[i].key != kEmpty) i = (i + 1) & mask;
      merge_slots_[i] = m;
    }
  }
  const uint64_t key = pair_key(left, right);
  const size_t mask = merge_slots_.size() - 1;
  size_t i = pair_hash(key) & mask;
  while (merge_slots_[i].key != kEmpty && merge_slots_[i].key != key) i = (i + 1) & mask;
  if (merge_slots_[i].key == kEmpty) ++merge_used_;
  merge_slots_[i] = Merge{key, static_cast<uint32_t>(merge_count_++), merged};
}

const BpeModel::Merge* BpeModel::find_merge(int32_t left, int32_t right) const {
  if (merge_slots_.empty()) return nullptr;
  const uint64_t key = pair_key(left, right);
  const size_t mask = merge_slots_.size() - 1;
  for (size_t i = pair_hash(key) & mask;; i = (i + 1) & mask) {
    const Merge& m = merge_slots_[i];
    if (m.key == key) return &m;
    if (m.key == kEmpty) return nullptr;
  }
}

void BpeModel::merge_word(std::string_view word, std::vector<int32_t>* ids) const {
  struct Symbol {
    int32_t id, prev, next;  // id -1: merged into the symbol before it
  };
  struct Candidate {
    uint32_t rank;
    int32_t pos, merged;
    // std::push_heap keeps the largest first: the lowest rank, then the leftmost, is largest.
    bool operator<(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  thread_local std::vector<Symbol> symbols;
  thread_local std::vector<Candidate> heap;
  symbols.clear();
  heap.clear();
  for (unsigned char b : word) {
    int32_t id = byte_ids_[b];
    if (id < 0) {
      if (unknown_ < 0) continue;  // no unknown token: the byte is dropped
      if (fuse_unknown_ && !symbols.empty() && symbols.back().id == unknown_) continue;
      id = unknown_;
    }
    const auto n = static_cast<int32_t>(symbols.size());
    symbols.push_back({id, n - 1, n + 1});
  }
  if (symbols.empty()) return;
  symbols.back().next = -1;
  auto consider = [&](int32_t pos) {
    const Symbol& s = symbols[pos];
    if (s.next < 0) return;
    if (const Merge* m = find_merge(s.id, symbols[s.next].id)) {
      heap.push_back({m->rank, pos, m->merged});
      std::push_heap(heap.begin(), heap.end());
    }
  };
  for (int32_t pos = 0; pos + 1 < static_cast<int32_t>(symbols.size()); ++pos) consider(pos);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end());
    const Candidate top = heap.back();
    heap.pop_back();
    Symbol& s = symbols[top.pos];
    if (s.id < 0 || s.next < 0) continue;
    const Merge* m = find_merge(s.id, symbols[s.next].id);
    if (m == nullptr || m->merged != top.merged) continue;  // a stale candidate
    Symbol& right = symbols[s.next];
    s.id = top.merged;
    s.next = right.next;
    right.id = -1;
    if (s.next >= 0) symbols[s.next].prev = top.pos;
    if (s.prev >= 0) consider(s.prev);
    consider(top.pos);
  }
  for (int32_t pos = 0; pos >= 0; pos = symbols[pos].next) ids->push_back(symbols[pos].id);
}

void BpeModel::encode_word(std::string_view word, std::vector<int64_t>* out) const {
  if (ignore_merges_) {
    if (const auto id = words_.find(word)) {
      out->push_back(static_cast<int32_t>(*id));
      return;
    }
  }
  const bool cacheable = word.size() <= kMaxCachedWord;
  if (cacheable) {
    const std::lock_guard<std::mutex> lock(cache_mutex_);
    if (const auto at = cache_.find(word)) {
      const int32_t* p = cache_ids_.data() + *at;
      out->insert(out->end(), p + 1, p + 1 + p[0]);
      return;
    }
  }
  thread_local std::vector<int32_t> ids;
  ids.clear();
  merge_word(word, &ids);
  out->insert(out->end(), ids.begin(), ids.end());
  if (!cacheable) return;
  const std::lock_guard<std::mutex> lock(cache_mutex_);
  if (cache_.size() >= kMaxCachedWords) return;  // full: as tokenizers' cache, stop adding
  cache_.put(word, static_cast<uint32_t>(cache_ids_.size()));
  cache_ids_.push_back(static_cast<int32_t>(ids.size()));
  cache_ids_.insert(cache_ids_.end(), ids.begin(), ids.end());
}

}  // namespace zrt::text
