// The stage-3 layout (docs/DEEPSPEED.md §4.7, §5.3): every parameter is partitioned on its own —
// pn = ceil(numel/W), rank r holds elements [r·pn, (r+1)·pn) zero-padded — and each optimizer
// group keeps this rank's partitions concatenated in one flat buffer (no extra padding), which is
// also the layout of its fp32 master, its gradient partition and DeepSpeed's fp32_flat_groups.
// Units (zero/shard_unit.h) are the sets of parameters gathered and released together.
//
// Parameter storage: a released parameter keeps its shape but its storage is resized to zero
// bytes (its data may not be touched); gathering re-allocates the same storage and fills it.
// Views that autograd saved in forward share that storage and become valid again when the unit
// is re-gathered for backward (see Note [Releasing parameter storage] in stage3_layout.cpp).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "core/malloc_tuning.h"
#include "zero/flat_layout.h"
#include "zero/param_swapper.h"

namespace zrt::zero {

struct Stage3Param {
  std::string name;
  at::Tensor param;  // the model's parameter
  std::vector<int64_t> shape;
  int64_t numel = 0;
  int64_t pn = 0;            // partition size ceil(numel / W)
  int group = 0;             // optimizer group; -1 for a frozen parameter (requires_grad false)
  int flat = 0;              // its partition flat: the group's, or a frozen flat (Note [Frozen])
  int64_t group_offset = 0;  // offset of its partition in that flat
  int unit = -1;             // owning unit; the root unit (params outside units) is num_units
  bool persistent = false;   // always gathered (small, tied, or outside every unit)
  bool quantized = false;    // an int8 partition (Note [Quantized frozen partitions])

  bool frozen() const { return group < 0; }

  int64_t bytes() const { return numel * static_cast<int64_t>(param.element_size()); }
};

struct Stage3Unit {
  std::vector<int> params;       // indices into Stage3Layout::params, gathered together
  std::vector<int> trainable;    // indices whose gradients this unit reduce-scatters
  int64_t gather_numel = 0;      // Σ numel of the gathered (non-persistent) params
  int64_t gather_partition = 0;  // Σ pn of the gathered params (all_gather chunk per rank)
  int64_t reduce_partition = 0;  // Σ pn of the trainable params (reduce_scatter chunk)
};

class Stage3Layout {
 public:
  // `groups`: trainable parameters per optimizer group; `frozen`: the rest, partitioned alike
  // into frozen flats of their own, one per dtype (Note [Frozen parameters under ZeRO-3]);
  // `unit_of`: the unit of each parameter name (-1 or absent: outside every unit);
  // `persistence_threshold`: params with numel ≤ it stay gathered (DeepSpeed's
  // stage3_param_persistence_threshold), within `model_persistence_threshold` elements in all.
  // `offload_partitions`: keep the partition flats in (pinned, when CUDA is in use) CPU memory —
  // offload_param — and move partitions to the parameters' device only to gather them.
  // `swap` (offload_param.device "nvme"): the partition flats live in a ParamSwapper and are meta
  // tensors (Note [Swapped partitions] in zero/param_swapper.h); values are read and written
  // through read_partition / write_partition / read_flat / write_flat, and a unit's partitions
  // through swapper()->acquire.
  // `quantize_frozen` (zero_quantized_nontrainable_weights): the frozen non-persistent parameters'
  // partitions are stored in int8 (Note [Quantized frozen partitions]); not with `swap`.
  Stage3Layout(const std::vector<std::vector<NamedParam>>& groups,
               const std::vector<NamedParam>& frozen,
               const std::vector<std::pair<std::string, int>>& unit_of, int num_units,
               int world_size, int rank, int64_t persistence_threshold,
               int64_t model_persistence_threshold, bool offload_partitions = false,
               const ParamSwapOptions* swap = nullptr, bool quantize_frozen = false);

  bool swapped() const { return swapper_ != nullptr; }
  ParamSwapper* swapper() const { return swapper_.get(); }

  // Copies this rank's partition of every parameter into its partition flat (model dtype) and
  // releases the storage of every non-persistent parameter.
  void partition();

  const std::vector<Stage3Param>& params() const { return params_; }
  const std::vector<Stage3Unit>& units() const { return units_; }  // last one is the root unit
  int num_units() const { return static_cast<int>(units_.size()) - 1; }
  // The optimizer groups' flats are flats 0 .. num_groups() - 1; the frozen flats follow, up to
  // num_flats() - 1.
  int num_groups() const { return num_groups_; }
  int num_flats() const { return static_cast<int>(partition_flats_.size()); }
  // This rank's partitions of flat f's parameters, concatenated (model dtype). A meta tensor
  // when swapped, or when the flat holds quantized partitions (each parameter's stored on its
  // own): read and write those through read_flat / write_flat.
  const at::Tensor& partition_flat(int f) const { return partition_flats_[f]; }
  // Σ pn over flat f (the flat's numel).
  int64_t group_partition_numel(int f) const { return partition_flats_[f].numel(); }
  int world_size() const { return world_size_; }
  int rank() const { return rank_; }
  int64_t persistent_numel() const { return persistent_numel_; }

  // This rank's partition of parameter i (a view of its group's flat, or of its own storage).
  // Not when swapped(), nor for a quantized parameter.
  at::Tensor partition_of(int i) const;
  // Parameter i's partition (pn elements): a view as partition_of, read from the swapper, or
  // dequantized (a new tensor).
  at::Tensor read_partition(int i) const;
  // Writes parameter i's partition (pn elements, or its first elements; any dtype, converted).
  void write_partition(int i, const at::Tensor& values);
  // Elements [offset, offset + n) of flat g: a view, or read from the swapper; and the same
  // written. In a flat of quantized partitions, offset must be a parameter's partition start and
  // n at most its pn.
  at::Tensor read_flat(int g, int64_t offset, int64_t n) const;
  void write_flat(int g, int64_t offset, const at::Tensor& values);
  // Bytes of the partitions stored per parameter (int8 codes and scales, and the plain
  // partitions beside them in a quantized flat); they are not in partition_flat().
  int64_t own_partition_bytes() const;
  // Where each gathered parameter sits in its unit's slab (Note [Reusing gather buffers] in
  // zero/param_coordinator.cpp): byte offsets per parameter, each 64-byte aligned at the
  // parameters' current dtypes (0 for persistent ones); *unit_bytes gets each unit's total.
  std::vector<int64_t> slab_offsets(std::vector<int64_t>* unit_bytes) const;

 private:
  void swap_partitions(const ParamSwapOptions& options);
  // Gives each parameter of the flats marked in `per_param` its own partition storage.
  void quantize_frozen_flats(const std::vector<char>& per_param,
                             const std::vector<at::TensorOptions>& options);
  int param_at(int flat, int64_t offset) const;  // in a flat of partitions stored per parameter
  void write_own(int i, const at::Tensor& values);

  std::vector<Stage3Param> params_;
  std::vector<Stage3Unit> units_;
  std::vector<at::Tensor> partition_flats_;
  // Per parameter: its partition stored on its own (defined in flats with quantized partitions):
  // packed int8 codes and fp32 scales (zero/zeropp.h QuantizedChunk) when quantized, else pn
  // elements in the model dtype. own_at_[{flat, offset}] = the parameter there.
  std::vector<at::Tensor> own_partitions_;
  std::map<std::pair<int, int64_t>, int> own_at_;
  std::unique_ptr<ParamSwapper> swapper_;
  int num_groups_ = 0;
  int world_size_ = 1;
  int rank_ = 0;
  int64_t persistent_numel_ = 0;
};

// Storage helpers (see the file comment).
// Note [Returning released memory] (core/malloc_tuning.h): the memory ZeRO-3 releases on purpose
// comes from mappings of its own: allocate_storage() and mapped_empty() map CPU blocks of at
// least kOwnMappingBytes with mmap, and releasing them unmaps them, whatever malloc does, so the
// library needs no process-wide malloc setting for its own blocks. The one deliberate exception
// is bounded: the stage-3 coordinator keeps idle gather buffers and parameter slabs for the next
// gathers, at most one or two of any size and others within kHeapTrimBytes (Note [Reusing gather
// buffers] in zero/param_storage.h). Other large blocks (autograd's gradients and activations,
// load-time temporaries) are the host's malloc's: programs that need them returned opt in with
// zrt::tune_malloc_for_large_models().
constexpr size_t kOwnMappingBytes = 128 * 1024;
void release_storage(const at::Tensor& param);
void allocate_storage(const at::Tensor& param);
// Gives the parameter's storage (the same StorageImpl, see the file comment) the memory of `slab`
// from `byte_offset` on, keeping the slab's storage referenced until the parameter is released:
// parameters gathered into one pooled slab (Note [Reusing gather buffers]). `slab` is a byte
// tensor on the parameter's device with room for the parameter at that offset. On CUDA the
// caching allocator's recordStream does not see such a DataPtr: a collective that reads a
// parameter after its call returns must record its stream on the slab instead (today parameters
// reach only blocking collectives).
void point_storage(const at::Tensor& param, const at::Tensor& slab, size_t byte_offset);
bool storage_allocated(const at::Tensor& param);
// An uninitialised 1-D tensor of `numel` elements; on the CPU from a mapping of its own (above).
at::Tensor mapped_empty(int64_t numel, const at::TensorOptions& options);

}  // namespace zrt::zero
