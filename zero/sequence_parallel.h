// Ulysses sequence parallelism: the ranks of a group share one sample, each holding a slice of
// its sequence; attention exchanges heads for positions by all-to-all. With the DeepSpeed config's
// "sequence_parallel_size": K (the batch triad and zrt::Trainer's sampler then count world / K
// data-parallel ranks), a model's training step:
//
//   auto sp = std::make_shared<zrt::SequenceParallel>(*comm, K);  // collective: groups of K ranks
//   auto s = sp->shard_causal_lm(ids, {}, labels);                 // this rank's slice
//   // attention, q k v (b, heads, t, d) after rotary at s.position_ids:
//   y = sp->scatter_sequence(attend(sp->gather_sequence(q), sp->gather_sequence(k),
//                                   sp->gather_sequence(v)));     // over all K·t positions
//   loss = sp->loss(cross_entropy(logits, s.labels, sum), s.label_count);
//
// The LLaMA family does this itself: LlamaForCausalLM::set_sequence_parallel (models/llama.h).
#pragma once

#include <memory>

#include <torch/torch.h>

#include "comm/comm.h"

namespace zrt {

// Note [Ulysses sequence parallelism]
// The world splits into groups of K consecutive ranks (DeepSpeed's layout: ranks g·K .. g·K+K−1
// form group g); a group's ranks get the same sample and data-parallel rank g, so the data loader
// and the batch triad see world / K data-parallel ranks. Rank r of a group holds positions
// [r·t, (r+1)·t) of a sequence padded at its end to K·t (padding at the end of a causal sequence
// changes no real position's output, and its labels are −100). Everything but attention is
// per-position and runs on the slice. Attention: after the projections and rotary (at the
// slice's global positions), q, k and v go from (b, heads, t, d) to (b, heads/K, K·t, d) by one
// all-to-all each, so each rank attends over the whole sequence for heads/K heads (causality,
// Mistral's window and packed documents as on one rank), and the output comes back the inverse
// way; each exchange's backward is the other. The heads must divide by K; key/value heads that
// do not are repeated (each f = K / gcd(kv_heads, K) times, which divides heads / kv_heads) so
// every rank's query heads find theirs.
// The loss (DeepSpeed ALST's rule): labels are shifted over the whole sequence before it is
// sliced (position i scores label i + 1, across slice boundaries), and each rank's loss is K ×
// the sum of its slice's token losses / the labels that count in the whole sample: the group's
// mean is the sample's mean loss, and the world-averaged gradients (ZeRO partitions and reduces
// over the whole world) are those of the data-parallel mean of the samples' losses.
class SequenceParallel {
 public:
  // Collective over `world` (its size a multiple of `size`): this rank's group of `size`
  // consecutive ranks. `size` 1: no group, no exchange.
  SequenceParallel(comm::Comm& world, int size);

  int size() const { return size_; }
  int rank() const { return rank_; }  // within the group
  int data_parallel_size() const { return data_parallel_size_; }
  int data_parallel_rank() const { return data_parallel_rank_; }
  comm::Comm* group() const { return group_.get(); }

  // (b, heads, t, d) of this rank's positions → (b, heads/K, K·t, d): every position of the
  // group's sequence for this rank's heads [rank·heads/K, (rank+1)·heads/K). Differentiable.
  at::Tensor gather_sequence(const at::Tensor& x) const;
  // The inverse: (b, heads/K, K·t, d) → (b, heads, t, d). Differentiable.
  at::Tensor scatter_sequence(const at::Tensor& x) const;
  // (b, t) of every rank → (b, K·t), in group order (not differentiable; e.g. position ids).
  at::Tensor all_positions(const at::Tensor& x) const;

  // A causal-LM micro-batch's slice for this rank (the Note's padding and shifted labels).
  struct Shard {
    at::Tensor ids;           // (b, t) int64
    at::Tensor position_ids;  // (b, t) int64: the sample's positions (0.. unless given)
    at::Tensor labels;        // (b, t): the label each position scores, −100 where none
    int64_t label_count = 0;  // labels that count (≠ −100) in the whole micro-batch
  };
  // From the whole micro-batch: `ids` (b, T), `position_ids` (b, T) or undefined (0 .. T−1),
  // `labels` (b, T) unshifted as transformers takes them (label i is the token at i).
  Shard shard_causal_lm(const at::Tensor& ids, const at::Tensor& position_ids,
                        const at::Tensor& labels) const;
  // This rank's loss from the sum of its slice's token losses: K · sum / max(label_count, 1).
  at::Tensor loss(const at::Tensor& slice_sum, int64_t label_count) const;

 private:
  int size_ = 1, rank_ = 0, data_parallel_size_ = 1, data_parallel_rank_ = 0;
  std::shared_ptr<comm::Comm> group_;
};

}  // namespace zrt
