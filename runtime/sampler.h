// DistributedSampler semantics (torch.utils.data.DistributedSampler): every rank gets
// num_samples() indices of a dataset of `size` examples — a seeded permutation per epoch when
// shuffling (torch.randperm with a generator seeded seed + epoch, so the same permutation as
// Python's), padded by repeating the first indices or, with drop_last, truncated so that every
// rank gets the same count; rank r takes every world-th index starting at r.
#pragma once

#include <cstdint>
#include <vector>

namespace zrt {

class DistributedSampler {
 public:
  DistributedSampler(int64_t size, int world_size, int rank, bool shuffle, uint64_t seed,
                     bool drop_last);
  void set_epoch(int64_t epoch) { epoch_ = epoch; }
  int64_t num_samples() const { return num_samples_; }
  // This rank's indices for the current epoch.
  std::vector<int64_t> indices() const;

 private:
  int64_t size_;
  int world_size_;
  int rank_;
  bool shuffle_;
  uint64_t seed_;
  bool drop_last_;
  int64_t num_samples_ = 0;
  int64_t epoch_ = 0;
};

}  // namespace zrt
