#include "zero/stage3_layout.h"

#include <algorithm>
#include <memory>
#include <new>
#include <unordered_map>

#include "core/error.h"
#include "core/shard.h"
#include "zero/zeropp.h"
#include <sys/mman.h>

namespace zrt::zero {

// Note [Releasing parameter storage]
// FSDP's technique, in C++: release_storage() swaps the StorageImpl's data for nothing and sets
// its size to 0 bytes; allocate_storage() gives the same StorageImpl fresh memory of the full
// size. Every tensor sharing the StorageImpl — the parameter and the views autograd saved in
// forward (e.g. weight.t() saved by addmm) — sees the memory again once the unit is gathered for
// backward, while between forward and backward the memory is really free. The memory is either
// the parameter's own or, for gathers, a region of a pooled slab (point_storage); releasing drops
// the parameter's reference to the slab either way. Parameters are first
// given a private contiguous storage (set_data of a clone) so no other tensor shares it by
// accident.

namespace {

// Note [Returning released memory]: a block of its own anonymous mapping, unmapped when freed.
struct OwnMapping {
  void* data;
  size_t bytes;
};

void unmap(void* context) {
  auto* m = static_cast<OwnMapping*>(context);
  ::munmap(m->data, m->bytes);
  delete m;
}

at::DataPtr map_block(size_t bytes) {
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  return at::DataPtr(p, new OwnMapping{p, bytes}, &unmap, at::Device(at::kCPU));
}

bool own_mapping(const at::Device& device, size_t bytes) {
  return device.is_cpu() && bytes >= kOwnMappingBytes;
}

}  // namespace

at::Tensor mapped_empty(int64_t numel, const at::TensorOptions& options) {
  const size_t bytes = static_cast<size_t>(numel) * options.dtype().itemsize();
  if (!own_mapping(options.device(), bytes)) return at::empty({numel}, options);
  // The mapping's DataPtr owns it from the start (unmapped if building the tensor throws).
  c10::Storage storage(c10::Storage::use_byte_size_t(), bytes, map_block(bytes),
                       /*allocator=*/nullptr, /*resizable=*/false);
  return at::empty({0}, options).set_(storage, 0, {numel}, {1});
}

void release_storage(const at::Tensor& param) {
  c10::StorageImpl* s = param.storage().unsafeGetStorageImpl();
  s->set_data_ptr_noswap(at::DataPtr(nullptr, param.device()));
  s->set_nbytes(0);
}

void allocate_storage(const at::Tensor& param) {
  c10::StorageImpl* s = param.storage().unsafeGetStorageImpl();
  const size_t nbytes = static_cast<size_t>(param.numel()) * param.element_size();
  if (s->nbytes() == nbytes && (nbytes == 0 || s->data() != nullptr)) return;
  s->set_data_ptr_noswap(own_mapping(param.device(), nbytes) ? map_block(nbytes)
                                                             : s->allocator()->allocate(nbytes));
  s->set_nbytes(nbytes);
}

namespace {
void drop_slab_reference(void* context) { delete static_cast<c10::Storage*>(context); }
}  // namespace

void point_storage(const at::Tensor& param, const at::Tensor& slab, size_t byte_offset) {
  const size_t nbytes = static_cast<size_t>(param.numel()) * param.element_size();
  ZRT_INTERNAL_ASSERT(slab.scalar_type() == at::kByte && slab.device() == param.device() &&
                          byte_offset + nbytes <= static_cast<size_t>(slab.numel()),
                      "a slab of ", slab.numel(), " bytes on ", slab.device(),
                      " cannot hold a parameter of ", nbytes, " bytes at ", byte_offset);
  auto reference = std::make_unique<c10::Storage>(slab.storage());
  void* data = slab.data_ptr<uint8_t>() + byte_offset;
  c10::StorageImpl* s = param.storage().unsafeGetStorageImpl();
  s->set_data_ptr_noswap(
      at::DataPtr(data, reference.release(), &drop_slab_reference, param.device()));
  s->set_nbytes(nbytes);
}

bool storage_allocated(const at::Tensor& param) {
  return param.numel() == 0 || param.storage().nbytes() > 0;
}

// Note [Frozen parameters under ZeRO-3]
// A parameter that does not require grad (a LoRA fine-tune's frozen base, a frozen embedding) is
// partitioned exactly like a trainable one, as DeepSpeed's zero.Init partitions every parameter:
// pn = ceil(numel/W) elements per rank, gathered with its unit for forward and for the backward
// (or the recompute of a checkpointed unit) and released after; the persistence thresholds apply
// to it as to the rest. What it lacks is everything the optimizer needs: no group, no gradient
// reduce-scatter, no master, no optimizer state. Its partitions live in frozen flats of their own
// (one per dtype, after the optimizer groups' flats), which checkpoints write as DeepSpeed's
// frozen_param_fragments (docs/DEEPSPEED.md §4.3) and loads write back (ModelStates::
// frozen_partitions in runtime/model_states.h). Nothing but a load or a whole-model write
// (GatheredParameters with a modifier rank) changes them, so the after-step refresh of the
// persistent parameters skips the frozen ones.

Stage3Layout::Stage3Layout(const std::vector<std::vector<NamedParam>>& groups,
                           const std::vector<NamedParam>& frozen,
                           const std::vector<std::pair<std::string, int>>& unit_of, int num_units,
                           int world_size, int rank, int64_t persistence_threshold,
                           int64_t model_persistence_threshold, bool offload_partitions,
                           const ParamSwapOptions* swap, bool quantize_frozen)
    : num_groups_(static_cast<int>(groups.size())), world_size_(world_size), rank_(rank) {
  std::unordered_map<std::string, int> unit_by_name(unit_of.begin(), unit_of.end());
  units_.resize(num_units + 1);
  int64_t persisted = 0;
  std::vector<int64_t> flat_numel;
  std::vector<at::Tensor> flat_first;  // a parameter of each flat: its dtype and device
  auto add = [&](const NamedParam& np, int group, int flat) {
    Stage3Param p;
    p.name = np.name;
    p.param = np.param;
    p.shape = np.param.sizes().vec();
    p.numel = np.param.numel();
    p.pn = param_partition_size(p.numel, world_size);
    p.group = group;
    p.flat = flat;
    if (static_cast<size_t>(flat) == flat_numel.size()) {
      flat_numel.push_back(0);
      flat_first.push_back(np.param);
    }
    p.group_offset = flat_numel[flat];
    flat_numel[flat] += p.pn;
    auto it = unit_by_name.find(np.name);
    p.unit = it == unit_by_name.end() || it->second < 0 ? num_units : it->second;
    // Small parameters stay gathered while the total stays within the model threshold (as
    // DeepSpeed marks ds_persist at engine init); those outside units always.
    const bool small =
        p.numel <= persistence_threshold && persisted + p.numel <= model_persistence_threshold;
    // One rank holds every partition whole: gathering and releasing would only copy, so every
    // parameter stays gathered (Note [Stage 3 on one rank]), unless partitions live on the CPU
    // to save device memory (offload_param).
    const bool alone = world_size == 1 && !offload_partitions;
    p.persistent = p.unit == num_units || small || alone;
    if (p.persistent && p.unit != num_units && small) persisted += p.numel;
    if (p.persistent) persistent_numel_ += p.numel;
    p.quantized = quantize_frozen && group < 0 && !p.persistent && p.numel > 0;
    const int index = static_cast<int>(params_.size());
    Stage3Unit& u = units_[p.unit];
    u.params.push_back(index);
    if (!p.persistent) {
      u.gather_numel += p.numel;
      u.gather_partition += p.pn;
    }
    if (group >= 0) {
      u.trainable.push_back(index);
      u.reduce_partition += p.pn;
    }
    params_.push_back(std::move(p));
  };
  for (size_t g = 0; g < groups.size(); ++g) {
    for (const NamedParam& np : groups[g]) add(np, static_cast<int>(g), static_cast<int>(g));
  }
  std::vector<at::ScalarType> frozen_dtypes;  // of the frozen flats, in order
  for (const NamedParam& np : frozen) {
    auto it = std::find(frozen_dtypes.begin(), frozen_dtypes.end(), np.param.scalar_type());
    if (it == frozen_dtypes.end()) it = frozen_dtypes.insert(it, np.param.scalar_type());
    add(np, -1, num_groups_ + static_cast<int>(it - frozen_dtypes.begin()));
  }
  std::vector<char> per_param(flat_numel.size(), 0);  // Note [Quantized frozen partitions]
  for (const Stage3Param& p : params_) {
    if (p.quantized) per_param[p.flat] = 1;
  }
  std::vector<at::TensorOptions> flat_options;
  for (size_t f = 0; f < flat_numel.size(); ++f) {
    at::TensorOptions opts = flat_first[f].options().requires_grad(false);
    if (offload_partitions && !flat_first[f].is_cpu())
      opts = opts.device(at::kCPU).pinned_memory(true);
    // Swapped: never allocated (the values go to the swapper); per parameter: the options alone.
    const bool meta = swap != nullptr || per_param[f];
    partition_flats_.push_back(meta ? at::empty({flat_numel[f]}, opts.device(at::kMeta))
                                    : at::zeros({flat_numel[f]}, opts));
    flat_options.push_back(opts);
  }
  ZRT_INTERNAL_ASSERT(swap == nullptr || !quantize_frozen,
                      "quantized frozen partitions with swapped partitions");
  if (swap != nullptr) swap_partitions(*swap);
  if (quantize_frozen) quantize_frozen_flats(per_param, flat_options);
}

// Note [Quantized frozen partitions]
// zero_quantized_nontrainable_weights (ZeRO++; DeepSpeed quantizes each frozen parameter's
// partition, ds_tensor, when zero.Init partitions it): a frozen parameter that is gathered and
// released (not persistent) keeps its partition of pn elements as int8 codes with one fp32 scale
// per group — qwZ's chunk format and group rule (zero/zeropp.h QuantizedChunk, Note [qwZ group
// count] in kernels/quantize.h), pn padded to a multiple of 8 — so it holds about a quarter (fp32)
// or half (bf16/fp16) of its bytes at rest. A gather dequantizes it into the model dtype before
// the all-gather, so the wire and the computation are in the model dtype; the values the model
// computes with are the dequantized ones, within one quantization step (amax/128 of each group)
// of the original. The partitions of a flat that holds quantized ones are stored per parameter
// (the flat itself is a meta tensor); the persistent frozen parameters of that flat keep theirs in
// the model dtype. Writing a partition (a checkpoint load, a whole-model write) quantizes the
// values afresh unless they are the values it dequantizes to already: quantizing dequantized
// values again would move them (the scale of a group shrinks when its largest magnitude was
// positive, as the code 127 stands for 127/128 of it), so a resume into the same frozen base is
// bitwise, and frozen values that differ are quantized from the checkpoint's values.

void Stage3Layout::quantize_frozen_flats(const std::vector<char>& per_param,
                                         const std::vector<at::TensorOptions>& options) {
  own_partitions_.resize(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) {
    const Stage3Param& p = params_[i];
    if (!per_param[p.flat]) continue;
    const at::TensorOptions& opts = options[p.flat];
    const int64_t bytes = QuantizedChunk::for_numel(p.pn).bytes;
    own_partitions_[i] = p.quantized ? at::zeros({bytes}, opts.dtype(at::kByte))
                                     : at::zeros({p.pn}, opts);
    own_at_[{p.flat, p.group_offset}] = static_cast<int>(i);
  }
}

int Stage3Layout::param_at(int flat, int64_t offset) const {
  auto it = own_at_.find({flat, offset});
  ZRT_INTERNAL_ASSERT(it != own_at_.end(), "flat ", flat, " has no partition starting at ", offset);
  return it->second;
}

int64_t Stage3Layout::own_partition_bytes() const {
  int64_t bytes = 0;
  for (const at::Tensor& t : own_partitions_) bytes += t.defined() ? t.nbytes() : 0;
  return bytes;
}

void Stage3Layout::write_own(int i, const at::Tensor& values) {
  at::NoGradGuard no_grad;
  const Stage3Param& p = params_[i];
  const at::Tensor& own = own_partitions_[i];
  const at::Tensor flat = values.reshape({-1});
  ZRT_INTERNAL_ASSERT(flat.numel() <= p.pn, "write_partition(", p.name, "): ", flat.numel(),
                      " values for a partition of ", p.pn);
  if (!p.quantized) {
    own.narrow(0, 0, flat.numel()).copy_(flat);
    return;
  }
  const QuantizedChunk chunk = QuantizedChunk::for_numel(p.pn);
  const at::Tensor current = read_partition(i);
  at::Tensor next = at::zeros({chunk.padded}, current.options());
  next.narrow(0, 0, p.pn).copy_(current);
  next.narrow(0, 0, flat.numel()).copy_(flat);
  if (at::equal(next.narrow(0, 0, p.pn), current)) return;  // already these values
  chunk.pack(next, own);
}

at::Tensor Stage3Layout::partition_of(int i) const {
  const Stage3Param& p = params_.at(i);
  ZRT_INTERNAL_ASSERT(!swapped(), "partition_of(", p.name, ") of a swapped layout");
  ZRT_INTERNAL_ASSERT(!p.quantized, "partition_of(", p.name, "): a quantized partition");
  if (!own_partitions_.empty() && own_partitions_[i].defined()) return own_partitions_[i];
  return partition_flats_[p.flat].narrow(0, p.group_offset, p.pn);
}

void Stage3Layout::swap_partitions(const ParamSwapOptions& options) {
  std::vector<int64_t> numels;
  std::vector<at::ScalarType> dtypes;
  for (const at::Tensor& flat : partition_flats_) {
    numels.push_back(flat.numel());
    dtypes.push_back(flat.scalar_type());
  }
  // The pieces in the order UnitGatherer gathers them (its start()).
  std::vector<std::vector<SwapPiece>> pieces(static_cast<size_t>(num_units()));
  for (int u = 0; u < num_units(); ++u) {
    for (int i : units_[u].params) {
      const Stage3Param& p = params_[i];
      if (!p.persistent && p.numel > 0) pieces[u].push_back({p.flat, p.group_offset, p.pn});
    }
  }
  swapper_ = std::make_unique<ParamSwapper>(options, numels, dtypes, std::move(pieces));
}

at::Tensor Stage3Layout::read_partition(int i) const {
  const Stage3Param& p = params_.at(i);
  if (!own_partitions_.empty() && own_partitions_[i].defined() && !p.quantized)
    return own_partitions_[i];
  if (!p.quantized) return read_flat(p.flat, p.group_offset, p.pn);
  const QuantizedChunk chunk = QuantizedChunk::for_numel(p.pn);
  const at::Tensor& own = own_partitions_[i];
  at::Tensor out = at::empty({chunk.padded}, own.options().dtype(p.param.scalar_type()));
  chunk.unpack(own, out);
  return out.narrow(0, 0, p.pn);
}

void Stage3Layout::write_partition(int i, const at::Tensor& values) {
  const Stage3Param& p = params_.at(i);
  ZRT_INTERNAL_ASSERT(values.numel() <= p.pn, "write_partition(", p.name, "): ", values.numel(),
                      " values for a partition of ", p.pn);
  write_flat(p.flat, p.group_offset, values);
}

at::Tensor Stage3Layout::read_flat(int g, int64_t offset, int64_t n) const {
  if (!own_at_.empty() && partition_flats_.at(g).is_meta() && !swapped()) {
    return read_partition(param_at(g, offset)).narrow(0, 0, n);
  }
  if (!swapped()) return partition_flats_.at(g).narrow(0, offset, n);
  at::Tensor out = at::empty({n}, partition_flats_.at(g).options().device(at::kCPU));
  swapper_->read(g, offset, out);
  return out;
}

void Stage3Layout::write_flat(int g, int64_t offset, const at::Tensor& values) {
  at::NoGradGuard no_grad;
  if (!own_at_.empty() && partition_flats_.at(g).is_meta() && !swapped()) {
    write_own(param_at(g, offset), values);
  } else if (swapped()) {
    swapper_->write(g, offset, values);
  } else {
    partition_flats_.at(g).narrow(0, offset, values.numel()).copy_(values.reshape({-1}));
  }
}

std::vector<int64_t> Stage3Layout::slab_offsets(std::vector<int64_t>* unit_bytes) const {
  std::vector<int64_t> offsets(params_.size(), 0);
  unit_bytes->assign(num_units(), 0);
  for (int u = 0; u < num_units(); ++u) {
    int64_t& end = (*unit_bytes)[u];
    for (int i : units_[u].params) {
      if (params_[i].persistent || params_[i].numel == 0) continue;
      offsets[i] = end;
      end += (params_[i].bytes() + 63) / 64 * 64;
    }
  }
  return offsets;
}

// Note [Deferred parameters]
// A model built with zrt::defer_parameters (zero/shard_unit.h) has parameters with shapes but no
// storage, so that no rank ever holds all of it. partition() then gives each one a zero-filled
// private storage (one parameter at a time, released again at once unless persistent) and zero
// partitions; the values arrive later through the partitions (hf/pretrained.h writes the
// masters, then the parameters are refreshed from them), as DeepSpeed's zero.Init +
// from_pretrained.

void Stage3Layout::partition() {
  at::NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    Stage3Param& p = params_[i];
    const bool has_values = storage_allocated(p.param);
    // A private contiguous storage for each parameter (Note [Releasing parameter storage]).
    p.param.set_data(has_values ? p.param.detach().clone(at::MemoryFormat::Contiguous)
                                : at::zeros(p.shape, p.param.options()));
    const ShardInfo mine = param_shard(p.numel, rank_, world_size_);
    // A swapped or quantized partition is written from a staging tensor; deferred values stay
    // the zeros a fresh swap file reads as, or that zero codes and scales stand for.
    const bool staged = swapped() || p.quantized;
    at::Tensor part = staged ? at::zeros({p.pn}, p.param.options().device(at::kCPU))
                             : partition_of(static_cast<int>(i));
    part.zero_();
    if (has_values && mine.size > 0)
      part.narrow(0, 0, mine.size).copy_(p.param.reshape(-1).narrow(0, mine.offset, mine.size));
    if (staged && has_values) write_partition(static_cast<int>(i), part);
    // One rank (Note [Stage 3 on one rank]): the parameter becomes a view of its partition,
    // so that an updated partition is the updated parameter, with no copy at all.
    if (world_size_ == 1 && p.persistent && !swapped() &&
        part.scalar_type() == p.param.scalar_type() && part.device() == p.param.device()) {
      p.param.set_data(part.narrow(0, 0, p.numel).view(p.shape));
    }
    if (!p.persistent) release_storage(p.param);
  }
}

}  // namespace zrt::zero
