// zrt-train's text data, as HF's run_clm.py builds it from --train_file / --validation_file.
//
// Note [run_clm's data]
// 1. Documents. A .txt file is datasets' "text" loader: the file read as UTF-8 with universal
//    newlines ("\r\n" and "\r" become "\n"), one document per line as Python's str.splitlines
//    cuts it (also at \v \f \x1c-\x1e U+0085 U+2028 U+2029), each keeping its line break
//    (run_clm's keep_linebreaks, default true). A .json/.jsonl file is JSON Lines (one object
//    per line, blank lines skipped) or a .json holding one array of objects; the document is the
//    --text_column_name field (default "text"), which must be a string.
// 2. Splits. Without --validation_file, validation is the first --validation_split_percentage
//    percent of the documents and training the rest, cut where datasets' percent slicing cuts
//    ("train[:P%]": round(P * N / 100), halves to even).
// 3. Tokens. Every document is encoded with the tokenizer's special tokens (run_clm's
//    `tokenizer(texts)`), in order.
// 4. Blocks (run_clm's group_texts, mapped in batches of 1000 documents): each run of 1000
//    documents of a split is concatenated and cut into --block_size tokens, the run's remainder
//    dropped. A block is an example whose labels are its input ids (the causal-LM loss shifts them).
// 5. Packed documents (zrt-train --packed_documents, not run_clm's): the same blocks, each token
//    with its position in its document (restarting at 0 where a document starts, and at the
//    block's start), so that attention stays within documents (Note [Packed sequences] in
//    models/attention.h); a document's first token is not a label (-100), as transformers'
//    DataCollatorWithFlattening labels a flattened batch. The example's input is then (2, block):
//    the ids, then the positions.
//
// The tokens are cached next to the data file, in "<file>.<key>.zrt-tokens" (key: SHA-1 of the
// data, the tokenizer's files and the reading options), so a second run and every rank read the
// cache instead of tokenizing again. Rank 0 writes it (to a temporary name, renamed when complete);
// a rank that does not see it afterwards (no shared file system) writes its own. The cache is
// mapped, not read: a rank touches only the blocks it draws.
//
// Bad data is refused naming file and line: invalid UTF-8, a JSON line that does not parse or
// lacks the text field, an empty file, a split with no whole block.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "hf/trainer.h"

namespace zrt::comm {
class Comm;
}

namespace zrt::hf {

struct TextDataOptions {
  std::string train_file;
  std::optional<std::string> validation_file;
  std::string text_column_name = "text";
  int64_t validation_split_percentage = 5;
  bool keep_linebreaks = true;
  int64_t block_size = 0;
  bool packed_documents = false;  // Note [run_clm's data] 5
};

// The tokenizer as the data needs it: one document's ids with its special tokens, and the bytes
// that identify it for the cache key (its files' contents).
struct DocumentTokenizer {
  std::function<std::vector<int64_t>(const std::string&)> encode;
  std::string identity;
};

// The documents of a .txt/.json/.jsonl file (Note [run_clm's data] 1), with each one's first line.
struct Document {
  std::string text;
  int64_t line = 0;
};
std::vector<Document> read_documents(const std::string& path, const TextDataOptions& options);

// Whether `path` names a file run_clm reads as text (.txt, .json, .jsonl).
bool is_text_data_file(const std::string& path);

// datasets' "train[:P%]" boundary among n examples.
int64_t percent_boundary(int64_t percent, int64_t n);

// One data file's documents as token ids, cached (mapped read-only).
class TokenizedFile {
 public:
  // The cache of `path` for `tokenizer`, written first when missing (by rank 0, then by any rank
  // that does not see it). Collective over `comm`.
  static std::shared_ptr<TokenizedFile> open(const std::string& path, const TextDataOptions& options,
                                             const DocumentTokenizer& tokenizer, comm::Comm& comm);
  ~TokenizedFile();
  TokenizedFile(const TokenizedFile&) = delete;
  TokenizedFile& operator=(const TokenizedFile&) = delete;

  int64_t documents() const { return documents_; }
  int64_t tokens() const { return tokens_; }
  // Token offset of document d (d = documents() gives tokens()).
  int64_t offset(int64_t d) const { return static_cast<int64_t>(offsets_[d]); }
  const int32_t* ids() const { return ids_; }
  // The offset of the last document that starts at or before token `token` (< tokens()).
  int64_t document_start(int64_t token) const;

 private:
  TokenizedFile() = default;
  void map(const std::string& cache_path, const std::string& key);
  void* mapping_ = nullptr;
  size_t mapped_bytes_ = 0;
  int64_t documents_ = 0, tokens_ = 0;
  const uint64_t* offsets_ = nullptr;
  const int32_t* ids_ = nullptr;
};

// The blocks of documents [first, last) of a tokenized file (Note [run_clm's data] 4): example i
// is (ids, ids), `block_size` int64 token ids each; with `packed`, (ids and positions, labels)
// (Note [run_clm's data] 5).
class TokenBlocks : public Dataset {
 public:
  TokenBlocks(std::shared_ptr<TokenizedFile> file, int64_t first, int64_t last, int64_t block_size,
              bool packed = false);
  int64_t size() const override { return static_cast<int64_t>(starts_.size()); }
  std::pair<at::Tensor, at::Tensor> get(int64_t index) const override;
  // The token offset of block i in the file.
  int64_t start(int64_t i) const { return starts_[i]; }
  // SHA-1 (hex) of every block's ids in order, as little-endian int32: one line of a log that
  // says which blocks a run trained on.
  std::string digest() const;

 private:
  std::shared_ptr<TokenizedFile> file_;
  int64_t block_size_;
  bool packed_;
  std::vector<int64_t> starts_;
};

struct TextSplits {
  std::shared_ptr<TokenBlocks> train, validation;
};

// The training and validation blocks of Note [run_clm's data].
TextSplits load_text_data(const TextDataOptions& options, const DocumentTokenizer& tokenizer,
                          comm::Comm& comm);

}  // namespace zrt::hf
