// DistributedSampler semantics (torch.utils.data.DistributedSampler): every rank gets
// num_samples() indices of a dataset of `size` examples — a seeded permutation per epoch when
// shuffling (torch.randperm with a generator seeded seed + epoch, so the same permutation as
// Python's), padded by repeating the first indices or, with drop_last, truncated so that every
// rank gets the same count; rank r takes every world-th index starting at r.
//
// Note [The HF Trainer's batch order]
// transformers' Trainer draws differently (accelerate's SeedableRandomSampler and
// BatchSamplerShard, even_batches): the epoch's one permutation of the whole dataset (randperm,
// generator seeded seed + epoch) is cut into batches of the per-device batch size, and batch k
// goes to rank k % world. When the last round of batches is short, its last batch is completed
// and the round filled with the epoch's first indices again, so every rank gets the same number
// of full batches; with drop_last, only full rounds. hf_trainer() gives that order, flattened:
// this rank's batches back to back, every one `batch` long.
#pragma once

#include <cstdint>
#include <vector>

namespace zrt {

class DistributedSampler {
 public:
  DistributedSampler(int64_t size, int world_size, int rank, bool shuffle, uint64_t seed,
                     bool drop_last);
  // Note [The HF Trainer's batch order], in batches of `batch`.
  static DistributedSampler hf_trainer(int64_t size, int world_size, int rank, bool shuffle,
                                       uint64_t seed, bool drop_last, int64_t batch);
  void set_epoch(int64_t epoch) { epoch_ = epoch; }
  int64_t num_samples() const { return num_samples_; }
  // This rank's indices for the current epoch.
  std::vector<int64_t> indices() const;

 private:
  std::vector<int64_t> epoch_order() const;
  std::vector<int64_t> hf_trainer_indices() const;

  int64_t size_;
  int world_size_;
  int rank_;
  bool shuffle_;
  uint64_t seed_;
  bool drop_last_;
  int64_t num_samples_ = 0;
  int64_t epoch_ = 0;
  int64_t batch_ = 0;  // > 0: the HF Trainer's order in batches of this size
};

}  // namespace zrt
