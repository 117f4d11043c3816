#include "core/shard.h"

#include <algorithm>

#include "core/error.h"

namespace zrt {

std::ostream& operator<<(std::ostream& os, const ShardInfo& s) {
  return os << "[" << s.offset << ", " << s.end() << ")";
}

int64_t ceil_div(int64_t value, int64_t divisor) {
  ZRT_INTERNAL_ASSERT(value >= 0 && divisor > 0, "ceil_div(", value, ", ", divisor, ")");
  return value / divisor + (value % divisor != 0 ? 1 : 0);
}

int64_t round_up(int64_t value, int64_t multiple) { return ceil_div(value, multiple) * multiple; }

ShardInfo intersect(const ShardInfo& a, const ShardInfo& b) {
  const int64_t lo = std::max(a.offset, b.offset);
  const int64_t hi = std::min(a.end(), b.end());
  return ShardInfo{lo, std::max<int64_t>(0, hi - lo)};
}

int64_t flat_alignment(int world_size) {
  ZRT_INTERNAL_ASSERT(world_size > 0);
  return 2 * static_cast<int64_t>(world_size);
}

FlatPartition make_flat_partition(int64_t numel, int world_size, int64_t alignment) {
  ZRT_INTERNAL_ASSERT(numel >= 0 && world_size > 0 && alignment > 0 && alignment % world_size == 0,
                      "numel=", numel, " world_size=", world_size, " alignment=", alignment);
  FlatPartition p;
  p.numel = numel;
  p.world_size = world_size;
  p.padded_numel = round_up(numel, alignment);
  p.partition_size = p.padded_numel / world_size;
  return p;
}

ShardInfo FlatPartition::partition(int rank) const {
  ZRT_INTERNAL_ASSERT(rank >= 0 && rank < world_size, "rank ", rank, " of ", world_size);
  return ShardInfo{rank * partition_size, partition_size};
}

ShardInfo FlatPartition::valid(int rank) const {
  return intersect(partition(rank), ShardInfo{0, numel});
}

int64_t FlatPartition::padding(int rank) const { return partition_size - valid(rank).size; }

int64_t param_partition_size(int64_t numel, int world_size) {
  ZRT_INTERNAL_ASSERT(world_size > 0);
  return ceil_div(numel, world_size);
}

ShardInfo param_shard(int64_t numel, int rank, int world_size) {
  ZRT_INTERNAL_ASSERT(rank >= 0 && rank < world_size, "rank ", rank, " of ", world_size);
  const int64_t pn = param_partition_size(numel, world_size);
  return intersect(ShardInfo{rank * pn, pn}, ShardInfo{0, numel});
}

}  // namespace zrt
