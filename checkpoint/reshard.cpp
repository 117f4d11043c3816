#include "checkpoint/reshard.h"

#include <map>
#include <memory>

#include <limits>

#include "core/error.h"
#include "core/shard.h"

namespace zrt::ckpt {

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

int64_t checked_shape_numel(const Shape& shape, const std::string& context,
                            const std::string& name) {
  int64_t n = 1;
  for (int64_t d : shape) {
    ZRT_CHECK_AS(CheckpointError, d >= 0, context, ": parameter '", name,
                 "' has a negative dimension ", d);
    ZRT_CHECK_AS(CheckpointError, d == 0 || n <= std::numeric_limits<int64_t>::max() / 4 / d,
                 context, ": parameter '", name, "' has too many elements");
    n *= d;
  }
  return n;
}

int64_t group_numel(const NamedShapes& params) {
  int64_t total = 0;
  for (const auto& [name, shape] : params) total += shape_numel(shape);
  return total;
}

RankPartition rank_partition(PartitionLayout layout, const NamedShapes& params, int rank,
                             int world_size) {
  RankPartition out;
  if (layout == PartitionLayout::kFlat) {
    const FlatPartition flat = make_flat_partition(group_numel(params), world_size);
    out.partition_numel = flat.partition_size;
    out.valid_numel = flat.valid(rank).size;
    return out;
  }
  for (const auto& [name, shape] : params) {
    const int64_t n = shape_numel(shape);
    out.partition_numel += param_partition_size(n, world_size);
    out.valid_numel += param_shard(n, rank, world_size).size;
  }
  return out;
}

namespace {

NamedTensors merge_flat(const std::vector<at::Tensor>& parts, const NamedShapes& params,
                        const std::string& context, int group) {
  const at::Tensor full = parts.size() == 1 ? parts[0] : at::cat(parts, 0);
  NamedTensors out;
  int64_t offset = 0;
  for (const auto& [name, shape] : params) {
    const int64_t n = checked_shape_numel(shape, context, name);
    ZRT_CHECK_AS(CheckpointError, offset + n <= full.numel(), context, ": parameter '", name,
                 "' needs elements [", offset, ", ", offset + n, ") of group ", group,
                 " but the ranks' partitions hold only ", full.numel());
    out.emplace_back(name, full.narrow(0, offset, n).view(shape));
    offset += n;
  }
  return out;
}

NamedTensors merge_per_param(const std::vector<at::Tensor>& parts, const NamedShapes& params,
                             const std::string& context, const std::string& tensor) {
  const int world = static_cast<int>(parts.size());
  NamedTensors out;
  int64_t offset = 0;
  for (const auto& [name, shape] : params) {
    const int64_t n = checked_shape_numel(shape, context, name);
    const int64_t pn = param_partition_size(n, world);
    std::vector<at::Tensor> pieces;
    for (int r = 0; r < world; ++r) {
      ZRT_CHECK_AS(CheckpointError, offset + pn <= parts[r].numel(), context, ": parameter '", name,
                   "' needs elements [", offset, ", ", offset + pn, ") of rank ", r, "'s ", tensor,
                   " partition, which has only ", parts[r].numel());
      pieces.push_back(parts[r].narrow(0, offset, pn));
    }
    out.emplace_back(name, at::cat(pieces, 0).narrow(0, 0, n).view(shape));
    offset += pn;
  }
  return out;
}

}  // namespace

NamedTensors merge_partitions(PartitionLayout layout, const std::vector<at::Tensor>& parts,
                              const NamedShapes& params, const std::string& context, int group,
                              const std::string& tensor) {
  ZRT_INTERNAL_ASSERT(!parts.empty(), "merge_partitions without partitions");
  std::vector<at::Tensor> flat;
  for (const at::Tensor& p : parts) flat.push_back(p.reshape({-1}));
  return layout == PartitionLayout::kFlat ? merge_flat(flat, params, context, group)
                                          : merge_per_param(flat, params, context, tensor);
}

void fill_partition(PartitionLayout layout, const NamedShapes& params, int rank, int world_size,
                    const RangeReader& read, at::Tensor& partition, const std::string& context) {
  const RankPartition mine = rank_partition(layout, params, rank, world_size);
  ZRT_INTERNAL_ASSERT(partition.dim() == 1 && partition.numel() >= mine.partition_numel,
                      "fill_partition: the partition has ", partition.numel(), " elements, needs ",
                      mine.partition_numel);
  // `range`: the parameter's elements in the group's coordinates (kFlat: the flat group;
  // kPerParam: the parameter itself); `held`: this rank's range there; `base`: where `held`
  // starts in `partition`.
  auto copy = [&](const std::string& name, int64_t numel, ShardInfo range, ShardInfo held,
                  int64_t base) {
    const ShardInfo overlap = intersect(range, held);
    if (overlap.empty()) return;
    const at::Tensor t = read(name, numel, ShardInfo{overlap.offset - range.offset, overlap.size});
    if (!t.defined()) return;
    ZRT_CHECK_AS(CheckpointError, t.numel() == overlap.size, context, ": parameter '", name,
                 "': asked for ", overlap.size, " elements, got ", t.numel());
    partition.narrow(0, base + overlap.offset - held.offset, overlap.size).copy_(t.reshape({-1}));
  };
  if (layout == PartitionLayout::kFlat) {
    const ShardInfo held = make_flat_partition(group_numel(params), world_size).partition(rank);
    int64_t offset = 0;
    for (const auto& [name, shape] : params) {
      const int64_t n = shape_numel(shape);
      copy(name, n, ShardInfo{offset, n}, held, 0);
      offset += n;
    }
    return;
  }
  int64_t base = 0;
  for (const auto& [name, shape] : params) {
    const int64_t n = shape_numel(shape);
    const int64_t pn = param_partition_size(n, world_size);
    copy(name, n, ShardInfo{0, n}, ShardInfo{rank * pn, pn}, base);
    base += pn;
  }
}

RangeReader whole_from_partitions(PartitionLayout layout, const NamedShapes& params,
                                  int world_size, PartReader part, const std::string& context) {
  // Where each parameter lies: kFlat its offset in the group; kPerParam its offset in every
  // rank's partition (the pieces before it are pn-sized each).
  struct Where {
    int64_t offset = 0;
    int64_t numel = 0;
  };
  auto where = std::make_shared<std::map<std::string, Where>>();
  int64_t offset = 0;
  for (const auto& [name, shape] : params) {
    const int64_t n = shape_numel(shape);
    (*where)[name] = Where{offset, n};
    offset += layout == PartitionLayout::kFlat ? n : param_partition_size(n, world_size);
  }
  const int64_t total = group_numel(params);
  return [=](const std::string& name, int64_t numel, ShardInfo range) -> at::Tensor {
    const auto it = where->find(name);
    ZRT_CHECK_AS(CheckpointError, it != where->end(), context, ": no parameter '", name,
                 "' in the group");
    const Where w = it->second;
    ZRT_CHECK_AS(CheckpointError,
                 numel == w.numel && range.offset >= 0 && range.size >= 0 &&
                     range.offset + range.size <= w.numel,
                 context, ": parameter '", name, "' of ", w.numel, " elements: asked for ",
                 range.size, " elements at ", range.offset, " of ", numel);
    std::vector<at::Tensor> pieces;
    for (int r = 0; r < world_size; ++r) {
      // `held`: rank r's elements in the parameter's coordinates; `start`: where they begin in
      // its partition.
      ShardInfo held;
      int64_t start = 0;
      if (layout == PartitionLayout::kFlat) {
        const ShardInfo p = make_flat_partition(total, world_size).partition(r);
        held = ShardInfo{p.offset - w.offset, p.size};
        start = 0;
      } else {
        held = param_shard(w.numel, r, world_size);
        start = w.offset;
      }
      const ShardInfo overlap = intersect(range, held);
      if (overlap.empty()) continue;
      at::Tensor t = part(r, start + overlap.offset - held.offset, overlap.size);
      ZRT_CHECK_AS(CheckpointError, t.defined() && t.numel() == overlap.size, context,
                   ": parameter '", name, "': rank ", r, "'s partition gave ",
                   t.defined() ? t.numel() : 0, " elements for ", overlap.size);
      pieces.push_back(t.reshape({-1}));
    }
    if (pieces.size() == 1) return pieces.front();
    if (pieces.empty()) return at::empty({0});
    return at::cat(pieces);
  };
}

at::Tensor partition_from_whole(PartitionLayout layout, const NamedShapes& params, int rank,
                                int world_size,
                                const std::function<at::Tensor(const std::string&)>& whole,
                                at::ScalarType dtype, const std::string& context) {
  at::Tensor out = at::zeros({rank_partition(layout, params, rank, world_size).partition_numel},
                             at::TensorOptions().dtype(dtype));
  RangeReader read = [&](const std::string& name, int64_t numel, ShardInfo range) {
    const at::Tensor t = whole(name);
    ZRT_CHECK_AS(CheckpointError, t.defined() && t.numel() == numel, context, ": parameter '", name,
                 "' has ", t.defined() ? t.numel() : 0, " elements, its shape needs ", numel);
    return t.reshape({-1}).narrow(0, range.offset, range.size);
  };
  fill_partition(layout, params, rank, world_size, read, out, context);
  return out;
}

}  // namespace zrt::ckpt
