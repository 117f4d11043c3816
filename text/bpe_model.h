// The model of a byte-level BPE tokenizer (text/bpe_tokenizer.h): its vocabulary and merges,
// kept over raw bytes, and the merging of one pre-tokenized word into token ids.
//
// Note [Byte-level BPE over raw bytes]
// tokenizer.json writes tokens in GPT-2's byte-to-character map (bytes 0x21-0x7E, 0xA1-0xAC and
// 0xAE-0xFF are the characters of the same number; the other 68 bytes, in order, are U+0100
// onwards: a space is "Ġ"), and tokenizers maps every word through it before the model sees it.
// The map is a bijection, so BpeModel maps the vocabulary back to bytes once, at load time, and
// merges words as they are: no per-character strings on the hot path. A vocabulary entry with a
// character outside the map can never be the result of merging bytes, and is left out of the
// model (it stays decodable: BpeTokenizer keeps every id's text).
//
// Merging is tokenizers': the word starts as one symbol per byte (a byte without a vocabulary
// entry is dropped, or becomes the unknown token when there is one); then, repeatedly, the
// adjacent pair with the lowest merge rank, the leftmost of equal ranks, becomes its merged
// token, until no adjacent pair has a merge. A priority queue of (rank, position) makes that
// O(n log n). With ignore_merges (LLaMA 3) a word that is itself a vocabulary entry is that one
// token. Words of up to kMaxCachedWord bytes are cached.
#pragma once

#include <array>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace zrt::text {

// The code point GPT-2's byte-to-character map gives each byte.
const std::array<uint32_t, 256>& byte_chars();
// `token` (UTF-8 in the byte-to-character map) as the bytes it stands for; nullopt when one of
// its characters is not in the map.
std::optional<std::string> token_bytes(std::string_view token);

// An open-addressing map from byte strings to uint32 values; the keys are copied into it.
class StringTable {
 public:
  std::optional<uint32_t> find(std::string_view key) const;
  // Adds or replaces key's value.
  void put(std::string_view key, uint32_t value);
  size_t size() const { return entries_.size(); }

 private:
  struct Entry {
    uint64_t hash;
    uint32_t offset, length, value;
  };
  size_t slot_of(std::string_view key, uint64_t hash) const;
  void grow();
  std::string keys_;
  std::vector<Entry> entries_;
  std::vector<uint32_t> slots_;  // index + 1 into entries_, 0 for empty
};

class BpeModel {
 public:
  static constexpr size_t kMaxCachedWord = 256;
  static constexpr size_t kMaxCachedWords = 1 << 20;

  // A vocabulary entry as bytes (token_bytes of its text).
  void add_token(std::string_view bytes, int32_t id);
  // The next merge: rank = the number of merges added before it. A pair added again takes the
  // later rank, as tokenizers' map of merges does.
  void add_merge(int32_t left, int32_t right, int32_t merged);
  void set_ignore_merges(bool on) { ignore_merges_ = on; }
  // The unknown token (-1: none, unknown bytes are dropped); `fuse`: a run of them is one.
  void set_unknown(int32_t id, bool fuse) { unknown_ = id, fuse_unknown_ = fuse; }

  // Appends the ids of one pre-tokenized word (raw bytes). Thread-safe.
  void encode_word(std::string_view word, std::vector<int64_t>* out) const;
  size_t merges() const { return merge_count_; }
  bool ignore_merges() const { return ignore_merges_; }

 private:
  struct Merge {
    uint64_t key;  // left << 32 | right; kEmpty for a free slot
    uint32_t rank;
    int32_t merged;
  };
  static constexpr uint64_t kEmpty = ~uint64_t{0};
  static std::array<int32_t, 256> filled(int32_t v) {
    std::array<int32_t, 256> a;
    a.fill(v);
    return a;
  }
  const Merge* find_merge(int32_t left, int32_t right) const;
  void merge_word(std::string_view word, std::vector<int32_t>* ids) const;

  StringTable words_;  // the vocabulary, by bytes
  std::array<int32_t, 256> byte_ids_ = filled(-1);
  std::vector<Merge> merge_slots_;
  size_t merge_count_ = 0, merge_used_ = 0;
  bool ignore_merges_ = false, fuse_unknown_ = false;
  int32_t unknown_ = -1;

  mutable std::mutex cache_mutex_;
  mutable StringTable cache_;               // word -> offset in cache_ids_
  mutable std::vector<int32_t> cache_ids_;  // at each offset: the count, then the ids
};

}  // namespace zrt::text
