// zrt-train's data: run_clm.py's flags for a LLaMA's text data (Note [run_clm's data] in
// text_data.h: the tokenizer, the block size, the training and validation blocks), and the bytes
// the other models train on.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include <cxxopts.hpp>

#include "hf/text_data.h"

namespace zrt::comm {
class Comm;
}

namespace zrt::tools {

// The tokenizer of --tokenizer_name, else of the model folder `model_dir`, for the data; refused
// when it has more tokens than the model's `vocab`.
hf::DocumentTokenizer data_tokenizer(const cxxopts::ParseResult& result, const std::string& model_dir,
                                 int64_t vocab);

// run_clm.py's block size: `asked` (--block_size or --context) capped at the tokenizer's
// model_max_length (tokenizer_config.json; unbounded when absent), with a warning; without one,
// model_max_length, or min(1024, max_position_embeddings) when that is larger.
int64_t clm_block_size(const cxxopts::ParseResult& result, std::optional<int64_t> asked,
                       const std::string& model_dir, int64_t max_position_embeddings);

// The blocks of --train_file (and --validation_file or the held-out percentage); *eval stays
// null when the validation split has no whole block.
void load_clm_data(const cxxopts::ParseResult& result, const hf::DocumentTokenizer& tokenizer,
                   int64_t context, comm::Comm& comm, std::shared_ptr<Dataset>* train,
                   std::shared_ptr<Dataset>* eval);

// Sentences from a small grammar (`bytes` of them, from `seed`): learnable structure with some
// randomness, the default corpus of the byte-level models.
std::string generate_corpus(int64_t bytes, uint64_t seed);

// The bytes of --train_file, or the generated corpus of --corpus_bytes without one.
std::string read_corpus(const cxxopts::ParseResult& result);

// --packed_documents, --tiled_loss_tokens and --tiled_mlp_tokens, given for a model `kind` other
// than llama: a usage error naming the flag.
void refuse_text_options(const cxxopts::ParseResult& result, const std::string& kind);

// --tiled_mlp_tokens or --tiled_loss_tokens (`flag`; models/tiled_mlp.h, tiled_loss.h), checked:
// 0 (off) or more.
int64_t tile_tokens(const cxxopts::ParseResult& result, const std::string& flag);

// The model's input of a micro-batch `x` of load_clm_data's examples: (ids, undefined) for
// (b, block) ids; (ids, position_ids) for --packed_documents' (b, 2, block) (Note [run_clm's
// data] 5 in hf/text_data.h).
std::pair<at::Tensor, at::Tensor> clm_input(const at::Tensor& x);

// With --packed_documents the micro-batches hold different numbers of labels: each one's loss is
// its labels' mean and a step averages the micro-batches (DeepSpeed's rule). transformers' Trainer
// divides the summed loss by the labels of the step's micro-batches (all ranks' with
// average_tokens_across_devices, the rank's own without). Warns where the two differ: more than
// one accumulation step, or `average_tokens` with more than one rank.
void warn_packed_loss_weights(const cxxopts::ParseResult& result, bool average_tokens, int world,
                              int64_t accumulation);

}  // namespace zrt::tools
