// zrt-train's long-sequence options for the LLaMA family: Ulysses sequence parallelism
// (--sequence_parallel_size, zero/sequence_parallel.h) and the tiled logits + loss
// (--tiled_loss_tokens, models/tiled_loss.h).
#pragma once

#include <memory>

#include <cxxopts.hpp>

#include "config/resolved.h"
#include "core/json.h"
#include "hf/trainer.h"
#include "models/llama.h"
#include "zero/sequence_parallel.h"

namespace zrt::tools {

void add_sequence_parallel_options(cxxopts::Options& options);
// --sequence_parallel_size K (accelerate's --parallelism_config_sp_size too) written into the
// DeepSpeed config's sequence_parallel_size, which it reads; UsageError when the two flags or the
// config's own value disagree, for K < 1, and for K > 1 with `do_predict` (each rank's forward
// gives a slice of the logits).
void apply_sequence_parallel_flag(const cxxopts::ParseResult& result, bool do_predict,
                                  Json& ds_config);

// --tiled_loss_tokens: the causal-LM loss a tile at a time (Note [Tiled logits and loss]).
LossFn tiled_loss(std::shared_ptr<models::LlamaForCausalLMImpl> llama, int64_t tile,
                  double smoothing);
// A micro-batch's causal-LM loss under sequence parallelism (Note [Ulysses sequence parallelism]):
// the input (b, block) ids or --packed_documents' (b, 2, block) sliced for this rank with the
// labels shifted over the whole block, the logits of the slice (a tile at a time with `tile` > 0),
// and the rank's share of the sample's mean.
LossFn sequence_parallel_loss(std::shared_ptr<models::LlamaForCausalLMImpl> llama,
                              std::shared_ptr<const SequenceParallel> sp, int64_t tile,
                              double smoothing);
// The loss a LLaMA trains with given the long-sequence flags: `plain` without them, else the
// tiled loss and/or sequence_parallel_loss (the config's sequence_parallel_size > 1: the model's
// attention then exchanges over this rank's group of `world`). `supported`: a LLaMA's text data
// without a router loss, which both need (UsageError naming the flag otherwise).
LossFn long_sequence_loss(const cxxopts::ParseResult& result, const Json& ds_config,
                          comm::Comm& world, LossFn plain, bool supported,
                          std::shared_ptr<models::LlamaForCausalLMImpl> llama, double smoothing);

}  // namespace zrt::tools
