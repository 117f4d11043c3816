// A Hugging Face tokenizer.json byte-level BPE (GPT-2, LLaMA 3, Qwen2 and their kin), encoding
// and decoding exactly as the `tokenizers` library does (tests/peers/hf_tokenizer.py checks it).
//
// Note [Byte-level BPE pipeline]
// encode(text) runs tokenizers' steps in its order:
//   1. added tokens: the added_tokens with normalized=false (special tokens, as a rule) are found
//      in the raw text, leftmost first and the longest at a position, never split further;
//      single_word (no word character, Rust regex's \w, on either side), lstrip and rstrip (the
//      token takes the white space before / after it) as tokenizers applies them;
//   2. normalize each piece between them: none, or NFC (Qwen2), by Unicode 14 data (unicode_text.h;
//      tokenizers' own NFC data is older, about Unicode 9: it leaves marks assigned since, such
//      as U+10F50, in place where canonical ordering moves them);
//   3. the added tokens with normalized=true (AddedToken's default for non-special tokens), found
//      the same way in the normalized pieces;
//   4. pre-tokenize the rest: the pre_tokenizer's steps in order, each on every piece the step
//      before left: Split with one of the known patterns (Note [Pre-tokenizer patterns] in
//      bpe_pretokenize.h, behavior Isolated, not inverted), and ByteLevel (last), which puts a
//      space before a piece that does not start with one when add_prefix_space and splits with
//      GPT-2's pattern when use_regex;
//   5. the byte map and BPE: each piece's bytes merged by the model (Note [Byte-level BPE over raw
//      bytes] in bpe_model.h), ignore_merges honoured;
//   6. post-process (add_special_tokens): the special tokens of a TemplateProcessing's `single`
//      template (alone or in a Sequence, next to ByteLevel); with no template, the BOS/EOS
//      tokenizer_config.json's add_bos_token / add_eos_token ask for (none by default).
// decode(ids) maps each id to its token (an added token's content first), leaves out special
// tokens when asked and ids that are no token, and applies the ByteLevel decoder: a token all of
// whose characters are in the byte map is those bytes, any other (an added token such as " x")
// its UTF-8; the joined bytes become UTF-8 with U+FFFD for each ill-formed sequence.
//
// open() answers null (with the reason) for a folder without tokenizer.json or whose
// tokenizer.json is no byte-level BPE: another model type (WordPiece, Unigram), or a BPE without
// a ByteLevel pre-tokenizer (LLaMA 2's and Mistral's Metaspace / byte_fallback BPE, which
// tokenizer.model holds as SentencePiece). It throws ConfigError, naming the file and key, for a
// byte-level BPE it cannot honour: a Split pattern other than the known three, a non-Isolated or
// inverted Split, other pre-tokenizers (Digits, Whitespace, Metaspace, ...), ByteLevel not last, a
// normalizer other than NFC, byte_fallback, dropout, a subword prefix or suffix, a post_processor
// other than TemplateProcessing / ByteLevel / Sequence (RobertaProcessing, BertProcessing), a
// decoder other than ByteLevel, merges naming tokens the vocabulary lacks. tokenizer.json's
// truncation and padding are not applied (transformers sets its own per call). When transformers
// would build a family's class for the folder (Qwen2Tokenizer, GPT2Tokenizer, GPTNeoXTokenizer),
// that class's normalizer, pre-tokenizer, decoder and BPE options replace the file's (Note [The
// tokenizer class transformers picks] in tokenizer_class.h).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/json.h"
#include "text/bpe_model.h"
#include "text/bpe_pretokenize.h"

namespace zrt::text {

class BpeTokenizer {
 public:
  // The tokenizer of `dir`'s tokenizer.json, or null with the reason in *why (Note [Byte-level
  // BPE pipeline]: what is no byte-level BPE, what throws).
  static std::unique_ptr<BpeTokenizer> open(const std::string& dir, std::string* why);

  // tokenizers' Tokenizer.encode(text, add_special_tokens).ids. UsageError for invalid UTF-8.
  std::vector<int64_t> encode(const std::string& text, bool add_special_tokens = true) const;
  // tokenizers' Tokenizer.decode(ids, skip_special_tokens); ids that are no token are left out
  // and counted in *dropped.
  std::string decode(const std::vector<int64_t>& ids, bool skip_special_tokens = true,
                     int64_t* dropped = nullptr) const;
  // The number of distinct tokens, added ones included (get_vocab_size(with_added_tokens=True)).
  int64_t vocab_size() const { return vocab_size_; }
  // One line: the kind, the vocabulary, the pipeline and the BOS/EOS rule.
  std::string describe() const;

 private:
  BpeTokenizer() = default;

  struct AddedToken {
    std::string content;
    int64_t id = 0;
    bool special = false, lstrip = false, rstrip = false, single_word = false;
    bool normalized = false;
  };
  // Finds added tokens in text (steps 1 and 3): a byte trie of their contents.
  class AddedMatcher {
   public:
    struct Segment {
      size_t begin, end;
      int32_t token;  // index into the added tokens; -1: text between tokens
    };
    void add(std::string_view content, int32_t token);
    bool empty() const { return nodes_.size() <= 1; }
    // The segments of `text`, in order (empty segments left out).
    void split(std::string_view text, const std::vector<AddedToken>& tokens,
               std::vector<Segment>* out) const;

   private:
    struct Node {
      std::vector<std::pair<unsigned char, uint32_t>> next;
      int32_t token = -1;
    };
    // The length and token of the longest added token at text[i], or {0, -1}.
    std::pair<size_t, int32_t> longest_at(std::string_view text, size_t i) const;
    std::vector<Node> nodes_ = std::vector<Node>(1);
    bool first_byte_[256] = {};
  };
  struct PreTokenizeStep {
    std::optional<SplitPattern> split;  // a Split; else ByteLevel
    bool add_prefix_space = false, use_regex = false;
  };

  // Steps 4-5 for one piece of normalized text.
  void encode_piece(std::string_view piece, std::vector<int64_t>* ids) const;
  // Steps 2-5 for the text between two raw-matched added tokens.
  void encode_text(std::string_view text, std::vector<int64_t>* ids) const;

  // Loading (bpe_load.cpp), each for its tokenizer.json key.
  void read_model(const Json& model, const std::string& file);
  void read_normalizer(const Json& normalizer, const std::string& file);
  void read_pre_tokenizer(const Json& pre, const std::string& file);
  void read_added_tokens(const Json& added, const std::string& file);
  void read_post_processor(const Json& tokenizer, const std::string& dir);
  void read_decoder(const Json& decoder, const std::string& file);
  void set_token_text(int64_t id, const std::string& text);
  std::optional<int64_t> token_id(const std::string& text) const;

  std::string file_;
  std::string class_;  // a family class whose pipeline replaced the file's, with why; "" if none
  BpeModel model_;
  bool nfc_ = false;
  std::vector<PreTokenizeStep> steps_;
  std::vector<AddedToken> added_;
  AddedMatcher raw_added_, normalized_added_;
  std::vector<int64_t> prefix_, suffix_;  // the post-processor's BOS/EOS
  std::string special_source_;            // where prefix_ and suffix_ came from
  // Per id: the token's text (an added token's content over the vocabulary's), its decoded bytes,
  // and 0 (no token), 1 (a token) or 2 (a special token).
  std::vector<std::string> text_, bytes_;
  std::vector<uint8_t> kind_;
  int64_t vocab_size_ = 0, model_tokens_ = 0;
};

}  // namespace zrt::text
