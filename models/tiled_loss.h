// A causal LM's head and cross entropy computed a tile of tokens at a time, so that the
// (tokens, vocab) logits never exist whole (DeepSpeed ALST's TiledFusedLogitsLoss).
//
// Note [Tiled logits and loss]
// The loss of N tokens needs their logits (N, vocab): at 32k tokens and a 128k vocabulary that is
// 16 GiB in fp32, more than a 1B model's weights, and autograd keeps it (and the fp32 copy the
// loss takes) until backward. tiled_linear_cross_entropy runs the head and the loss `tile` rows at
// a time without a graph, keeping only its inputs; its backward recomputes each tile's logits and
// takes that tile's gradients from torch's own cross entropy. The largest temporary is
// (tile, vocab). The result is cross_entropy(linear(h, w).float(), labels) with ignore_index -100
// and label smoothing, the mean over the labels that count; values and gradients equal the untiled
// computation's within fp32 rounding (the weight's gradient sums the tiles' parts in fp32, then
// takes the weight's dtype).
#pragma once

#include <cstdint>

#include <torch/torch.h>

#include "models/llama.h"

namespace zrt::models {

// h (N, hidden) in the model's dtype, w (vocab, hidden), labels (N) int64 (-100: not counted);
// `tile` rows at a time (≥ 1); `smoothing` as torch's label_smoothing. Gradients reach h and w.
at::Tensor tiled_linear_cross_entropy(const at::Tensor& h, const at::Tensor& w,
                                      const at::Tensor& labels, int64_t tile, double smoothing);

// The causal-LM loss of `model` from `hidden` (model.hidden(...): (b, t, hidden)) and `labels`
// (b, t; position i scores label i + 1, as transformers shifts them), through the model's head
// (lm_head, or the tied embedding) with its parameters gathered as forward() gathers them.
at::Tensor tiled_causal_lm_loss(LlamaForCausalLMImpl& model, const at::Tensor& hidden,
                                const at::Tensor& labels, int64_t tile, double smoothing);
// The same with labels already aligned: position i of `hidden` (b, t, hidden) scores `labels`
// (b, t) at i (e.g. shifted over a whole sequence before it was sliced, zero/sequence_parallel.h).
at::Tensor tiled_head_loss(LlamaForCausalLMImpl& model, const at::Tensor& hidden,
                           const at::Tensor& labels, int64_t tile, double smoothing);

}  // namespace zrt::models
