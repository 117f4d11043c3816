// The seam between the engine's step and the ZeRO stage in use: who holds parameters, gradients
// and fp32 master weights, and where the optimizer's inputs come from. FlatModelStates
// (runtime/flat_model_states.h) implements stages 0–2 over flat groups; stage 3 has its own.
// Internal to runtime/.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "aio/options.h"
#include "checkpoint/reshard.h"
#include "runtime/engine_options.h"
#include "zero/options.h"

namespace zrt::optim {
class SwapSpace;
}  // namespace zrt::optim

namespace zrt::runtime {

// What the optimizer updates for one parameter group on this rank.
struct OptimTarget {
  // fp32 weights of this rank's partition (on the CPU when offloaded). A stage-3 engine without
  // an optimizer (inference) has no masters: this is the partition itself, in the model's dtype.
  // With NVMe offload a meta tensor: the values are in the swap space (Note [Swapped masters]).
  at::Tensor master;
  // The reduced gradient of the same elements (grad-accumulation dtype); undefined in inference.
  at::Tensor grad;
  at::Tensor lp;  // low-precision weights to refresh in the same pass, or undefined
};

// One optimizer group as checkpoints and whole-tensor loads see it: its parameters in flattening
// order, how they are cut over the ranks (Note [Partition layouts] in checkpoint/reshard.h) and
// this rank's partition of the parameters themselves.
struct GroupPartition {
  ckpt::NamedShapes params;
  ckpt::PartitionLayout layout = ckpt::PartitionLayout::kFlat;
  int rank = 0;  // stage 0: rank 0 of 1, every rank holds the whole group
  int world_size = 1;
  // 1-D: this rank's partition of the parameters in the model dtype (stage 0: the whole group,
  // padded); at least rank_partition(layout, params, rank, world_size).partition_numel elements.
  // A meta tensor when the partitions are on disk (offload_param "nvme"): its values are read and
  // written through ModelStates::read_lp / write_lp.
  at::Tensor lp;
};

class ModelStates {
 public:
  virtual ~ModelStates() = default;

  // Collective (reductions): around every micro-step's autograd pass.
  virtual void begin_backward(bool boundary) = 0;
  virtual void end_backward() = 0;

  // The optimizer's inputs, one per group. Valid between the boundary micro-step's
  // end_backward() and zero_grad().
  virtual std::vector<OptimTarget>& targets() = 0;
  // With offload_optimizer.device "nvme": where the masters (and the optimizer's moments) live.
  // Null otherwise.
  virtual std::shared_ptr<optim::SwapSpace> swap_space() const { return nullptr; }
  // Before the optimizer pass (e.g. copy gradients to the CPU when the optimizer is offloaded).
  virtual void before_optimizer_step() = 0;
  // Collective: after the optimizer pass (e.g. all-gather the updated parameters).
  virtual void after_optimizer_step() = 0;
  virtual void zero_grad() = 0;

  // True when every rank holds the same full gradients (stage 0): the global norm is local.
  virtual bool grads_replicated() const = 0;
  virtual ModelStateBytes memory() const = 0;
  // One entry per optimizer group, in the order of targets().
  virtual std::vector<GroupPartition> group_partitions() const = 0;

  // Stage 3: the frozen parameters' partitions (Note [Frozen parameters under ZeRO-3] in
  // zero/stage3_layout.cpp), one entry per frozen flat, described as group_partitions() describes
  // the groups, and read and written through read_lp / write_lp at index
  // group_partitions().size() + f. None at stages 0-2, where frozen parameters stay whole.
  virtual std::vector<GroupPartition> frozen_partitions() const { return {}; }
  // Collective at stage 3: after write_lp wrote frozen partitions, the persistent frozen
  // parameters are gathered from them. Stages 0-2: nothing to do.
  virtual void frozen_partitions_written() {}

  // Whether the parameters themselves are partitioned (stage 3): between uses a parameter has no
  // storage, and checkpoints write an empty tensor for it.
  virtual bool partitions_params() const = 0;
  // Collective at stage 3 (all-gathers every partitioned parameter); until
  // release_gathered_params() every parameter holds its whole value on every rank. Stages 0-2
  // hold them whole already: nothing to do.
  virtual void gather_all_params() = 0;
  // Collective at stage 3 (releases what gather_all_params gathered, then refreshes the persistent
  // parameters from the partitions). Stages 0-2: nothing to do.
  virtual void release_gathered_params() = 0;
  // The whole value of trainable parameter `name` (`param`: the model's parameter, whose numel it
  // has, any shape), or an undefined tensor to leave that parameter as it is.
  using WholeParamFn = std::function<at::Tensor(const std::string& name, const at::Tensor& param)>;
  // Elements [offset, offset + n) of group g's partition of the parameters (GroupPartition::lp):
  // a view of it, or a CPU copy read from disk (offload_param "nvme"); and the same written from
  // `values` (any floating dtype, converted; nothing when `values` is that memory already).
  virtual at::Tensor read_lp(size_t group, int64_t offset, int64_t n) const;
  virtual void write_lp(size_t group, int64_t offset, const at::Tensor& values);

  // Not collective. Writes whole values into every parameter these states hold — the trainable
  // ones, and at stage 3 the frozen ones — in no particular order: this rank's partition of it and, where the parameter has storage, the
  // parameter itself (a value that is that storage is not copied). The fp32 masters are not
  // touched (masters_from_params follows).
  virtual void write_whole_params(const WholeParamFn& whole) = 0;
};

// Note [Swapped masters]:
// With offload_optimizer.device "nvme" a group's master is a meta tensor (Note [Swapped params] in
// optim/optimizer.h) and its values are in the states' swap space. Code outside the optimizer
// reads and writes masters through these two, never through OptimTarget::master directly.
//
// Group g's master: the tensor itself, or a new fp32 CPU tensor read back from the swap space.
at::Tensor master_values(ModelStates& states, size_t group);
// Group g's master for one pass of reading, e.g. by a checkpoint being written: the master, or a
// view of its swap file that is never whole in memory (SwapSpace::map_state); read it before the
// next step.
at::Tensor master_to_read(ModelStates& states, size_t group);
// Makes `values` (any floating dtype) elements [offset, offset + values.numel()) of group g's
// master: copied into it, written to the swap space, or nothing when `values` is that memory.
void store_master(ModelStates& states, size_t group, const at::Tensor& values, int64_t offset = 0);
// Elements [offset, offset + n) of group g's master: a view, or read from the swap space.
at::Tensor master_range(ModelStates& states, size_t group, int64_t offset, int64_t n);
// The device the optimizer of a target runs on: the master's, the CPU for a swapped master.
c10::Device optimizer_device(const OptimTarget& target);
// Bytes a tensor holds in memory (0 for a meta tensor).
int64_t resident_bytes(const at::Tensor& t);

// Adds a swap space's buffers and on-disk bytes to `m` (nothing for null).
void count_swap(const optim::SwapSpace* swap, ModelStateBytes& m);
// Not collective. Makes this rank's swap space for offload_optimizer.device "nvme" with
// the groups' partition sizes (optim/swap_space.h), from the config's sections.
std::shared_ptr<optim::SwapSpace> make_swap_space(const zero::ZeroOptions& zero,
                                                  const aio::AioOptions& aio, int rank,
                                                  const std::vector<int64_t>& group_numels);

// Copies every group's partition of the parameters into its fp32 master (after the parameters were
// written, e.g. by a load), skipping masters that are the partition itself. Both run in chunks of
// kStateChunk elements, so swapped states are never whole in memory.
constexpr int64_t kStateChunk = int64_t{16} << 20;
void masters_from_params(ModelStates& states);
// Collective: copies the fp32 masters into the parameters' partitions, then refreshes every rank's
// parameters from them (the all-gather of stages 1/2, the persistent parameters of stage 3).
void params_from_masters(ModelStates& states);

// Stage 3: where each frozen parameter's partition is — name → (the index read_lp / write_lp take,
// the element offset in that flat). Empty at stages 0-2.
using FrozenPlaces = std::map<std::string, std::pair<size_t, int64_t>>;
FrozenPlaces frozen_places(const ModelStates& states);
// Stage 3: writes this rank's frozen partitions from whole values, asking `read` (as
// fill_partition does) only for the elements this rank holds, one parameter at a time; a
// parameter `read` has no value for keeps its own. Not collective: every rank then calls
// states.frozen_partitions_written(). Stages 0-2: nothing.
void fill_frozen_partitions(ModelStates& states, const ckpt::RangeReader& read,
                            const std::string& context);

}  // namespace zrt::runtime
