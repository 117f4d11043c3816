#include "runtime/sampler.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include "core/error.h"

namespace zrt {

DistributedSampler::DistributedSampler(int64_t size, int world_size, int rank, bool shuffle,
                                       uint64_t seed, bool drop_last)
    : size_(size),
      world_size_(world_size),
      rank_(rank),
      shuffle_(shuffle),
      seed_(seed),
      drop_last_(drop_last) {
  ZRT_CHECK(size >= 0 && world_size >= 1 && rank >= 0 && rank < world_size,
            "DistributedSampler: bad size ", size, ", world size ", world_size, " or rank ", rank);
  if (drop_last_ && size_ % world_size_ != 0) {
    num_samples_ = (size_ - world_size_ + world_size_ - 1) / world_size_;  // ceil((n - W) / W)
  } else {
    num_samples_ = (size_ + world_size_ - 1) / world_size_;
  }
  ZRT_CHECK(size_ > 0, "the dataset is empty");
}

std::vector<int64_t> DistributedSampler::indices() const {
  std::vector<int64_t> all;
  if (shuffle_) {
    at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed_ + epoch_);
    at::Tensor perm = at::randperm(size_, gen, at::kLong);
    all.assign(perm.data_ptr<int64_t>(), perm.data_ptr<int64_t>() + size_);
  } else {
    for (int64_t i = 0; i < size_; ++i) all.push_back(i);
  }
  const int64_t total = num_samples_ * world_size_;
  if (!drop_last_) {
    for (int64_t i = 0; static_cast<int64_t>(all.size()) < total; ++i)
      all.push_back(all[i % size_]);
  } else {
    all.resize(static_cast<size_t>(total));
  }
  std::vector<int64_t> mine;
  for (int64_t i = rank_; i < total; i += world_size_) mine.push_back(all[i]);
  return mine;
}

}  // namespace zrt
