// Generation with a LLaMA-family model (models/llama.h) over the ranks of a job, as transformers'
// `generate` picks tokens: greedy, or sampled (temperature, then top-k, then top-p) from a
// generator per prompt seeded with seed + i, so the tokens depend neither on the number of ranks
// nor on how prompts are batched.
//
// Each rank generates its share of the prompts (prompt i on rank i mod N), as each DeepSpeed rank
// feeds its own inputs; `replicate` makes every rank run every prompt instead (rank 0 picks the
// tokens, which every rank then feeds). A rank's prompts of one length form one batch (the KV
// cache of a batch shares its positions) and its batches run one after the other. Under ZeRO-3
// every forward gathers each layer from all ranks, so generate() is collective: ranks run forwards
// in step, and a rank that has finished runs one-token forwards until every rank has. Generation
// of a prompt stops at max_new_tokens or at any id of `eos`.
#pragma once

#include <cstdint>
#include <set>
#include <vector>

#include <torch/torch.h>

#include "comm/comm.h"
#include "models/llama.h"

namespace zrt::models {

struct SamplingOptions {
  bool do_sample = false;  // false: greedy (the argmax)
  double temperature = 1.0;
  int64_t top_k = 50;  // 0: no top-k filter
  double top_p = 1.0;  // 1: no nucleus filter
};

// The next token of every row of `logits` (batch, vocab), as transformers' generate picks it.
at::Tensor next_tokens(const at::Tensor& logits, const SamplingOptions& s, at::Generator& gen);

struct GenerateOptions {
  SamplingOptions sampling;
  int64_t max_new_tokens = 20;
  std::set<int64_t> eos;   // generation of a prompt stops at any of these
  bool replicate = false;  // every rank runs every prompt (rank 0 picks the tokens)
  bool keep_logits = false;
  int64_t vocab_size = 0;  // the logits' width (with keep_logits)
};

struct GenerateResult {
  std::vector<std::vector<int64_t>> generated;  // per prompt, on every rank
  std::vector<at::Tensor> first_logits;         // per prompt, (length, vocab), with keep_logits
  int64_t new_tokens = 0;                       // summed over the prompts
};

// Collective over `comm`: every prompt's new tokens (and, with keep_logits, the logits of its
// first forward), the same on every rank. `model` is in eval mode, its parameters loaded.
GenerateResult generate(LlamaForCausalLMImpl& model, comm::Comm& comm,
                        const std::vector<std::vector<int64_t>>& prompts,
                        const GenerateOptions& options, uint64_t seed);

}  // namespace zrt::models
