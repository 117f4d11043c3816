#include "hf/sampler.h"

#include <algorithm>

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

DistributedSampler DistributedSampler::hf_trainer(int64_t size, int world_size, int rank,
                                                  bool shuffle, uint64_t seed, bool drop_last,
                                                  int64_t batch) {
  ZRT_CHECK(batch >= 1, "DistributedSampler: batch size ", batch, " must be at least 1");
  DistributedSampler s(size, world_size, rank, shuffle, seed, drop_last);
  s.batch_ = batch;
  const int64_t batches = drop_last ? size / batch : (size + batch - 1) / batch;
  const int64_t rounds = drop_last ? batches / world_size : (batches + world_size - 1) / world_size;
  s.num_samples_ = rounds * batch;
  return s;
}

std::vector<int64_t> DistributedSampler::epoch_order() const {
  std::vector<int64_t> all;
  if (shuffle_) {
    at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed_ + epoch_);
    at::Tensor perm = at::randperm(size_, gen, at::kLong);
    all.assign(perm.data_ptr<int64_t>(), perm.data_ptr<int64_t>() + size_);
  } else {
    for (int64_t i = 0; i < size_; ++i) all.push_back(i);
  }
  return all;
}

// Note [The HF Trainer's batch order]: the batches of full rounds, then (without drop_last) the
// short round's batches completed from the epoch's first indices (the first `world` batches',
// repeated while they are fewer than a round).
std::vector<int64_t> DistributedSampler::hf_trainer_indices() const {
  const std::vector<int64_t> order = epoch_order();
  const int64_t world = world_size_;
  std::vector<int64_t> mine;
  const int64_t full_batches = size_ / batch_;
  const int64_t full_rounds = full_batches / world;
  for (int64_t k = 0; k < full_rounds; ++k) {
    const int64_t lo = (k * world + rank_) * batch_;
    mine.insert(mine.end(), order.begin() + lo, order.begin() + lo + batch_);
  }
  if (drop_last_ || static_cast<int64_t>(mine.size()) == num_samples_) return mine;
  std::vector<int64_t> initial(order.begin(), order.begin() + std::min(size_, world * batch_));
  while (static_cast<int64_t>(initial.size()) < world * batch_) {
    const std::vector<int64_t> copy = initial;
    initial.insert(initial.end(), copy.begin(), copy.end());
  }
  // The short round: batch positions full_rounds * world ...; the indices left in the epoch,
  // then the cycled initial ones.
  std::vector<int64_t> rest(order.begin() + full_rounds * world * batch_, order.end());
  size_t cycle = 0;
  const int64_t round_entries = world * batch_;
  for (int64_t i = static_cast<int64_t>(rest.size()); i < round_entries; ++i) {
    rest.push_back(initial[cycle++]);
  }
  mine.insert(mine.end(), rest.begin() + rank_ * batch_, rest.begin() + (rank_ + 1) * batch_);
  return mine;
}

std::vector<int64_t> DistributedSampler::indices() const {
  if (batch_ > 0) return hf_trainer_indices();
  std::vector<int64_t> all = epoch_order();
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
