#include "text/bpe_tokenizer.h"

#include <algorithm>
#include <deque>

#include "core/error.h"
#include "text/hf_tokenizer_files.h"
#include "text/tokenizer.h"
#include "text/unicode_text.h"

namespace zrt::text {

// --- added tokens (steps 1 and 3 of Note [Byte-level BPE pipeline]) ---

void BpeTokenizer::AddedMatcher::add(std::string_view content, int32_t token) {
  if (content.empty()) return;
  uint32_t node = 0;
  for (unsigned char b : content) {
    auto& next = nodes_[node].next;
    auto it = std::find_if(next.begin(), next.end(), [&](const auto& e) { return e.first == b; });
    if (it != next.end()) {
      node = it->second;
      continue;
    }
    nodes_.emplace_back();
    const auto child = static_cast<uint32_t>(nodes_.size() - 1);
    nodes_[node].next.emplace_back(b, child);
    node = child;
  }
  nodes_[node].token = token;
  first_byte_[static_cast<unsigned char>(content[0])] = true;
}

std::pair<size_t, int32_t> BpeTokenizer::AddedMatcher::longest_at(std::string_view text,
                                                                  size_t i) const {
  std::pair<size_t, int32_t> best{0, -1};
  uint32_t node = 0;
  for (size_t k = i; k < text.size(); ++k) {
    const auto& next = nodes_[node].next;
    const auto b = static_cast<unsigned char>(text[k]);
    auto it = std::find_if(next.begin(), next.end(), [&](const auto& e) { return e.first == b; });
    if (it == next.end()) break;
    node = it->second;
    if (nodes_[node].token >= 0) best = {k + 1 - i, nodes_[node].token};
  }
  return best;
}

void BpeTokenizer::AddedMatcher::split(std::string_view text, const std::vector<AddedToken>& tokens,
                                       std::vector<Segment>* out) const {
  size_t done = 0;  // text before it is in segments
  for (size_t i = 0; i < text.size();) {
    if (!first_byte_[static_cast<unsigned char>(text[i])]) {
      ++i;
      continue;
    }
    const auto [length, token] = longest_at(text, i);
    if (token < 0) {
      ++i;
      continue;
    }
    size_t start = i, stop = i + length;
    i = stop;  // a match left out (single_word) is not searched again for shorter tokens
    const AddedToken& t = tokens[token];
    if (t.single_word) {
      size_t before = start, after = stop;
      const bool word_before =
          start > 0 && unicode::is_word_char(unicode::previous_code_point(text, &before));
      const bool word_after =
          stop < text.size() && unicode::is_word_char(unicode::next_code_point(text, &after));
      if (word_before || word_after) continue;
    }
    if (t.lstrip) {
      size_t s = start;
      while (s > 0) {
        size_t p = s;
        if (!unicode::is_white_space(unicode::previous_code_point(text, &p))) break;
        s = p;
      }
      start = std::max(s, done);
    }
    if (t.rstrip) {
      while (stop < text.size()) {
        size_t n = stop;
        if (!unicode::is_white_space(unicode::next_code_point(text, &n))) break;
        stop = n;
      }
      i = stop;
    }
    if (done < start) out->push_back({done, start, -1});
    out->push_back({start, stop, token});
    done = stop;
  }
  if (done < text.size()) out->push_back({done, text.size(), -1});
}

// --- encode ---

void BpeTokenizer::encode_piece(std::string_view piece, std::vector<int64_t>* ids) const {
  thread_local std::vector<std::string_view> words, next;
  std::deque<std::string> prefixed;  // pieces with the space ByteLevel puts before them
  words.assign(1, piece);
  for (const PreTokenizeStep& step : steps_) {
    next.clear();
    for (std::string_view w : words) {
      if (w.empty()) continue;  // nothing to split or prefix (split_words makes no empty words)
      if (step.split) {
        split_words(*step.split, w, &next);
        continue;
      }
      if (step.add_prefix_space && w[0] != ' ') {
        prefixed.push_back(" " + std::string(w));
        w = prefixed.back();
      }
      if (step.use_regex) {
        split_words(SplitPattern::kGpt2, w, &next);
      } else {
        next.push_back(w);
      }
    }
    words.swap(next);
  }
  for (std::string_view w : words) model_.encode_word(w, ids);
}

void BpeTokenizer::encode_text(std::string_view text, std::vector<int64_t>* ids) const {
  std::string normalized;
  if (nfc_) {
    normalized = unicode::nfc(text);
    text = normalized;
  }
  if (normalized_added_.empty()) {
    encode_piece(text, ids);
    return;
  }
  std::vector<AddedMatcher::Segment> segments;
  normalized_added_.split(text, added_, &segments);
  for (const auto& s : segments) {
    if (s.token >= 0) {
      ids->push_back(added_[s.token].id);
    } else {
      encode_piece(text.substr(s.begin, s.end - s.begin), ids);
    }
  }
}

std::vector<int64_t> BpeTokenizer::encode(const std::string& text, bool add_special_tokens) const {
  ZRT_CHECK_AS(UsageError, valid_utf8(text), file_, ": the text to encode is not valid UTF-8");
  std::vector<int64_t> ids;
  if (add_special_tokens) ids = prefix_;
  std::vector<AddedMatcher::Segment> segments;
  raw_added_.split(text, added_, &segments);
  const std::string_view all(text);
  for (const auto& s : segments) {
    if (s.token >= 0) {
      ids.push_back(added_[s.token].id);
    } else {
      encode_text(all.substr(s.begin, s.end - s.begin), &ids);
    }
  }
  if (add_special_tokens) ids.insert(ids.end(), suffix_.begin(), suffix_.end());
  return ids;
}

// --- decode ---

std::string BpeTokenizer::decode(const std::vector<int64_t>& ids, bool skip_special_tokens,
                                 int64_t* dropped) const {
  std::string bytes;
  for (int64_t id : ids) {
    if (id < 0 || id >= static_cast<int64_t>(kind_.size()) || kind_[id] == 0) {
      if (dropped != nullptr) *dropped += 1;
      continue;
    }
    if (skip_special_tokens && kind_[id] == 2) continue;
    bytes += bytes_[id];
  }
  return unicode::utf8_lossy(bytes);
}

std::string BpeTokenizer::describe() const {
  std::string pre;
  for (const PreTokenizeStep& s : steps_) {
    if (!pre.empty()) pre += " + ";
    pre += s.split ? str(split_pattern_name(*s.split), " split")
                   : str("ByteLevel", s.add_prefix_space ? " (prefix space)" : "",
                         s.use_regex ? " (GPT-2 split)" : "");
  }
  const auto specials = std::count(kind_.begin(), kind_.end(), uint8_t{2});
  return str(file_, ": byte-level BPE", class_.empty() ? "" : str(" as ", class_), ", ",
             vocab_size_, " tokens (", model_tokens_,
             " in the model, ", added_.size(), " added, ", specials, " special), ", model_.merges(),
             " merges", model_.ignore_merges() ? " (ignore_merges)" : "", "; normalizer ",
             nfc_ ? "NFC" : "none", "; pre-tokenizer ", pre, "; each text gets ", ids_text(prefix_),
             " before and ", ids_text(suffix_), " after it (", special_source_, ")");
}

}  // namespace zrt::text
