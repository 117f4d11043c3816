// Text in and out of zrt-generate through a model folder's tokenizer: a byte-level BPE
// tokenizer.json (GPT-2, LLaMA 3, Qwen2: text/bpe_tokenizer.h, exactly as the tokenizers
// library encodes and decodes), else a SentencePiece model (tokenizer.model, as LLaMA 1/2, Mistral
// and TinyLlama ship it), read by Debian's libsentencepiece. The rest of this comment is about
// SentencePiece.
//
// Encoding is SentencePiece's own (the model's normalizer and dummy prefix), with the BOS/EOS
// tokens a Hugging Face tokenizer loaded from the same folder adds:
//   1. tokenizer.json's post_processor, when it is a TemplateProcessing (or a Sequence holding
//      one): the special tokens before and after "$A" in its `single` template;
//   2. otherwise tokenizer_config.json's add_bos_token / add_eos_token;
//   3. otherwise BOS and no EOS (LLaMA's convention, and transformers 4's; transformers 5 adds no
//      BOS for a folder with tokenizer.model alone).
// Text is never scanned for special tokens: "<s>" in a prompt is the characters '<', 's', '>'
// (transformers would turn it into the BOS id); give such prompts as ids. transformers also
// differs from SentencePiece for text that starts with a space (it adds no second one).
//
// Decoding skips control pieces (<s>, </s>: transformers' skip_special_tokens=True), joins byte
// pieces <0xNN> into UTF-8 and writes U+FFFD for each byte that is not valid UTF-8 (the output is
// always valid UTF-8), and leaves out ids the SentencePiece model does not have (a vocabulary
// padded past it), counting them.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace zrt::text {

class TextTokenizer {
 public:
  // The tokenizer of the model folder `dir`: its tokenizer.json when that is a byte-level BPE,
  // else its tokenizer.model; null with the reason in *why when neither is there or reads (this
  // build has no SentencePiece, the file is not a SentencePiece model). Throws ConfigError for a
  // byte-level BPE BpeTokenizer cannot honour, and when tokenizer.model loads but the folder's
  // JSON files contradict it (a BOS/EOS token that is not the model's piece).
  static std::unique_ptr<TextTokenizer> open(const std::string& dir, std::string* why);
  ~TextTokenizer();
  TextTokenizer(const TextTokenizer&) = delete;
  TextTokenizer& operator=(const TextTokenizer&) = delete;

  // The ids of `text` (valid UTF-8), with the folder's BOS/EOS tokens when add_special_tokens
  // (a BPE also finds its added tokens in the text: "<|endoftext|>" is one id).
  std::vector<int64_t> encode(const std::string& text, bool add_special_tokens = true) const;
  // The text of `ids`, special tokens left out unless !skip_special_tokens (a BPE only;
  // SentencePiece always leaves its control pieces out: UsageError); ids that are no token are
  // left out and added to *dropped.
  std::string decode(const std::vector<int64_t>& ids, int64_t* dropped = nullptr,
                     bool skip_special_tokens = true) const;
  // The text that `generated` adds to `prompt`, with the space that starts its first word (unlike
  // decode(generated) alone, which drops it as transformers' text-generation pipeline does).
  std::string continuation(const std::vector<int64_t>& prompt,
                           const std::vector<int64_t>& generated, int64_t* dropped) const;
  // The number of pieces of the SentencePiece model (ids 0 .. pieces() - 1); a BPE's tokens,
  // added ones included.
  int64_t pieces() const;
  // A one-line description: the pieces and the BOS/EOS ids added and where that rule came from.
  std::string describe() const;

 private:
  struct Impl;
  explicit TextTokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Whether `s` is valid UTF-8 (no overlong forms, surrogates or code points past U+10FFFF).
bool valid_utf8(const std::string& s);

}  // namespace zrt::text
