// zrt-train's run_clm.py flags for a LLaMA's text data (Note [run_clm's data] in text_data.h):
// the tokenizer, the block size and the training and validation blocks.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

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

}  // namespace zrt::tools
