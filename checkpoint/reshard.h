// Resharding arithmetic: whole parameter tensors from the partitions of every rank, and one rank's
// partition from whole tensors, for the two ZeRO layouts (Note [Partition layouts]). The one home
// of this arithmetic for consolidation (consolidate.h), loading at another world size or stage
// (runtime/checkpoint_state.h), `zrt-ckpt verify` and loading whole (e.g. pretrained) weights
// straight into partitions. Built on core/shard.h; pure functions of tensors, no files, no comm.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>

#include "checkpoint/value.h"
#include "core/shard.h"

namespace zrt::ckpt {

using Shape = std::vector<int64_t>;
// Parameter names with their shapes, in flattening order (one `param_shapes` group).
using NamedShapes = std::vector<std::pair<std::string, Shape>>;

// Note [Partition layouts]
// A group of parameters (names and shapes in order) is partitioned over W ranks in one of two
// ways (core/shard.h has the integer rules, docs/DEEPSPEED.md §4.7 DeepSpeed's code):
//  * kFlat (stages 1/2; stage 0 is W = 1): the parameters are packed back to back from element 0
//    of one flat group, zero-padded to a multiple of 2·W and cut into W equal partitions of P
//    elements. Padding is only at the end of the group, so concatenating the ranks' partitions in
//    rank order gives the group whether they are all padded (the Adam moments, P elements each)
//    or all "lean" (padding dropped: single_partition_of_fp32_groups, P - padding(r)); with
//    alignment 2·W the padding may span several ranks (1 element over 5 ranks: 10 padded).
//  * kPerParam (stage 3): every parameter on its own: pn = ceil(numel/W); rank r holds elements
//    [r·pn, (r+1)·pn) ∩ [0, numel) zero-padded to pn, and a rank's flat group is its pieces
//    back to back (fp32_flat_groups, moments alike). DeepSpeed's zero_to_fp32 concatenates the
//    sub-groups of a rank, which is the same layout over the concatenated parameter list.
enum class PartitionLayout { kFlat, kPerParam };

// The number of elements of `shape` (no checks; see checked_shape_numel for untrusted shapes).
int64_t shape_numel(const Shape& shape);
// As shape_numel, but a negative dimension or a count past 2^61 is a CheckpointError naming
// `context` and parameter `name`.
int64_t checked_shape_numel(const Shape& shape, const std::string& context,
                            const std::string& name);
int64_t group_numel(const NamedShapes& params);

// What one rank holds of a group.
struct RankPartition {
  int64_t partition_numel = 0;  // the padded partition, the same on every rank
  int64_t valid_numel = 0;      // its real elements (the lean partition for kFlat)
  int64_t padding() const { return partition_numel - valid_numel; }
};
RankPartition rank_partition(PartitionLayout layout, const NamedShapes& params, int rank,
                             int world_size);

// Whole tensors ← the partitions of all ranks. `parts[r]` is rank r's 1-D partition of the group
// (W = parts.size()), padded or, for kFlat, lean; any dtype, which the results keep. Returns the
// parameters in `params` order with their shapes, as views of one concatenated buffer (kFlat; of
// parts[0] itself when W = 1) or of one new buffer each (kPerParam): clone what outlives them.
// Elements of the parts beyond the parameters (padding) are ignored; callers that must account
// for every element compare with rank_partition themselves.
// Throws CheckpointError naming `context` when a shape is invalid or the parts are too short:
// kFlat "... needs elements [a, b) of group <group> but the ranks' partitions hold only N",
// kPerParam "... needs elements [a, b) of rank r's <tensor> partition, which has only N".
NamedTensors merge_partitions(PartitionLayout layout, const std::vector<at::Tensor>& parts,
                              const NamedShapes& params, const std::string& context, int group = 0,
                              const std::string& tensor = "fp32");

// Elements `range` of parameter `name`'s flattened whole tensor (`numel` elements in all) as a
// 1-D tensor of range.size elements, any dtype; or an undefined tensor to leave those elements of
// the partition as they are (e.g. a parameter the weights do not have).
using RangeReader =
    std::function<at::Tensor(const std::string& name, int64_t numel, ShardInfo range)>;

// Writes this rank's share of every parameter of the group into `partition` (1-D, at least
// rank_partition(...).partition_numel elements, any dtype: values are converted), asking `read`
// only for the elements this rank holds, one parameter at a time, so that no whole tensor need
// ever exist (e.g. ranged reads of a safetensors file). Elements outside the parameters (padding)
// are left as they are. Throws CheckpointError naming `context` and the parameter when `read`
// returns a tensor of the wrong size.
void fill_partition(PartitionLayout layout, const NamedShapes& params, int rank, int world_size,
                    const RangeReader& read, at::Tensor& partition, const std::string& context);

// Elements [offset, offset + count) of rank `rank`'s 1-D partition of the group, any dtype.
using PartReader = std::function<at::Tensor(int rank, int64_t offset, int64_t count)>;

// The inverse of fill_partition: a RangeReader of the group's whole parameters that asks `part`
// only for the requested elements, rank by rank (each parameter's range may span several ranks),
// so that no partition need ever be read whole (e.g. ranged reads of every rank's file). For
// kFlat, lean and padded partitions have the same coordinates (the padding is at the end). The
// reader throws CheckpointError naming `context` for a parameter not in `params`, a range outside
// it, or a part of the wrong size.
RangeReader whole_from_partitions(PartitionLayout layout, const NamedShapes& params,
                                  int world_size, PartReader part, const std::string& context);

// This rank's partition ← whole tensors (the inverse of merge_partitions): `whole(name)` returns
// parameter `name`'s whole tensor (any shape with the right number of elements, any dtype).
// Returns a new 1-D `dtype` tensor of rank_partition(...).partition_numel elements, its padding
// zero. Touches only the elements this rank holds (no whole flat group is ever built) and calls
// `whole` only for parameters this rank holds elements of, so it may load them lazily.
// Throws CheckpointError naming `context` when such a tensor has the wrong number of elements.
at::Tensor partition_from_whole(PartitionLayout layout, const NamedShapes& params, int rank,
                                int world_size,
                                const std::function<at::Tensor(const std::string&)>& whole,
                                at::ScalarType dtype, const std::string& context);

}  // namespace zrt::ckpt
