// Partition arithmetic shared by zero/ (which partitions) and checkpoint/ (which reads and
// reshards partitions). Pure integer functions; no tensors.
//
// Two rules, both DeepSpeed's (docs/DEEPSPEED.md §4.7):
//   * flat groups (stages 1/2, BF16 optimizer): the concatenated group is zero-padded to a
//     multiple of `alignment` (DeepSpeed: 2·W), then cut into W equal partitions; the padding
//     lives at the end, in the last partition(s).
//   * per-parameter (stage 3): pn = ceil(numel/W); rank r holds [r·pn, (r+1)·pn) ∩ [0, numel),
//     zero-padded to pn.
#pragma once

#include <cstdint>
#include <ostream>

namespace zrt {

// A half-open element range [offset, offset + size).
struct ShardInfo {
  int64_t offset = 0;
  int64_t size = 0;

  int64_t end() const { return offset + size; }
  bool empty() const { return size == 0; }
  bool operator==(const ShardInfo& o) const { return offset == o.offset && size == o.size; }
  bool operator!=(const ShardInfo& o) const { return !(*this == o); }
};

std::ostream& operator<<(std::ostream& os, const ShardInfo& s);

// Smallest multiple of `multiple` (> 0) that is >= value (>= 0).
int64_t round_up(int64_t value, int64_t multiple);
int64_t ceil_div(int64_t value, int64_t divisor);

// The overlap of two ranges; size 0 (at max(offsets)) when they do not overlap.
ShardInfo intersect(const ShardInfo& a, const ShardInfo& b);

// Partitioning of one flat group of `numel` elements over `world_size` ranks.
struct FlatPartition {
  int64_t numel = 0;           // real elements
  int64_t padded_numel = 0;    // numel rounded up to the alignment
  int64_t partition_size = 0;  // padded_numel / world_size, the same on every rank
  int world_size = 1;

  // Rank r's range in the padded flat buffer: [r·P, (r+1)·P).
  ShardInfo partition(int rank) const;
  // The part of rank r's range that holds real elements (may be empty).
  ShardInfo valid(int rank) const;
  // Padding elements inside rank r's partition (DeepSpeed's group_paddings entry).
  int64_t padding(int rank) const;
};

// DeepSpeed's default alignment for flat groups: 2 · world_size elements.
int64_t flat_alignment(int world_size);
FlatPartition make_flat_partition(int64_t numel, int world_size, int64_t alignment);
inline FlatPartition make_flat_partition(int64_t numel, int world_size) {
  return make_flat_partition(numel, world_size, flat_alignment(world_size));
}

// Stage-3 per-parameter rule: the partition size pn = ceil(numel / world_size).
int64_t param_partition_size(int64_t numel, int world_size);
// The real elements of `numel` held by `rank` (a prefix of its pn-sized partition).
ShardInfo param_shard(int64_t numel, int rank, int world_size);

}  // namespace zrt
