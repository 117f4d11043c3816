#include "zero/zeropp.h"

#include <algorithm>
#include <map>

#include "core/error.h"
#include "kernels/quantize.h"
#include "kernels/quantize_launch.h"

namespace zrt::zero {

// Note [ZeRO++]
// Plain ZeRO-3 moves 3Ψ per step over every link (Ψ: the model's bytes in the communication
// dtype): the forward's all-gather, the backward's all-gather and the gradients' reduce-scatter.
// Between hosts that link is the slow one. ZeRO++ changes all three:
//
// * hpZ (zero_hpz_partition_size: K). After a unit's gather from the primary (W-way) partitions,
//   each rank keeps a secondary partition of the unit, sharded over the K ranks of its hpZ group
//   (ranks of one host, ZeroPPGroups): chunk j of K of every parameter, ceil(numel/K) elements,
//   in the model dtype: Ψ/K more memory per rank, as DeepSpeed's. Later gathers of the unit are
//   all-gathers within the group until the partitions change (the optimizer step, a load): the
//   backward's gathers, a recompute's, a second micro-step's forward. The secondary holds exact
//   copies of the values gathered, so hpZ alone is bitwise plain ZeRO-3.
// * qwZ (zero_quantized_weights). A gather from the primary partitions sends each rank's chunk
//   as int8 in groups with one fp32 scale each (QuantizedChunk; the group rule is DeepSpeed's,
//   kernels/quantize.h) and dequantizes what arrives: about Ψ/2 of a bf16 model, Ψ/4 of fp32, per
//   gather. Quantization is deterministic, so every gather of the same partitions gives the same
//   values (forward and backward agree). Gathers within an hpZ group send the secondary's values
//   as they are: they are already what the forward used.
// * qgZ (zero_quantized_gradients). The reduce-scatter becomes two all-to-alls of 4-bit values
//   (QuantizedReduceScatter): each rank quantizes the chunk meant for every rank and sends, to
//   each rank of its host, the chunks of the ranks with that rank's local index on every host;
//   the receiver dequantizes, sums in fp32 (one partial per host), quantizes those N partials
//   again and sends partial n to its peer on host n; that peer dequantizes and sums the N
//   partials. The slow link carries (N−1)/N of the chunk per rank, quantized, once. No error
//   feedback, as DeepSpeed's qgZ: each quantization's error reaches the gradient. Groups are
//   kGroupSize elements of the flat chunks (DeepSpeed groups each tensor by rows: max(d0, d1, W)
//   groups); the error bound is kernels/quantize.h's per group and hop.
//
// Persistent parameters (refreshed after every step by a plain world all-gather) and frozen
// parameters (kept whole, never gathered) are not affected.

namespace {

[[noreturn]] void host_layout_error(const char* key, const std::string& what) {
  throw ConfigError(str("zero_optimization.", key, ": ", what));
}

}  // namespace

ZeroPPGroups ZeroPPGroups::make(comm::Comm& world, const ZeroPPOptions& options) {
  ZeroPPGroups g;
  if (!options.hpz() && !options.quantized_gradients) return g;
  std::shared_ptr<comm::Comm> host = world.split_by_host();
  // Each host is named by its lowest world rank; every rank learns every rank's host, local
  // index and host size.
  const at::Tensor mine = at::full({1}, world.rank(), at::kInt);
  const at::Tensor on_host = at::empty({host->size()}, at::kInt);
  host->all_gather(on_host, mine);
  const int leader = on_host.min().item<int>();
  const at::Tensor info = at::tensor({leader, host->rank(), host->size()}, at::kInt);
  const at::Tensor infos = at::empty({3 * world.size()}, at::kInt);
  world.all_gather(infos, info);
  const auto* all = infos.data_ptr<int>();
  std::map<int, int> host_size;  // leader → ranks
  for (int r = 0; r < world.size(); ++r) host_size[all[3 * r]] = all[3 * r + 2];
  std::string layout;
  for (const auto& [first, size] : host_size) {
    layout += str(layout.empty() ? "" : ", ", size, " (host of rank ", first, ")");
  }
  if (options.hpz()) {
    const int64_t k = options.hpz_partition_size;
    for (const auto& [first, size] : host_size) {
      if (size % k != 0) {
        host_layout_error("zero_hpz_partition_size",
                          str(k, " does not divide the ranks of every host; ranks per host: ",
                              layout, ". hpZ groups are ranks of one host."));
      }
    }
    g.hpz = host->split(static_cast<int>(host->rank() / k), host->rank());
  }
  if (options.quantized_gradients) {
    const int local = host->size();
    for (const auto& [first, size] : host_size) {
      if (size != local) {
        host_layout_error("zero_quantized_gradients",
                          str("qgZ needs the same number of ranks on every host; ranks per host: ",
                              layout));
      }
    }
    std::vector<int> leaders;
    for (const auto& [first, size] : host_size) leaders.push_back(first);
    g.world_rank_of.assign(world.size(), -1);
    for (int r = 0; r < world.size(); ++r) {
      const int n = static_cast<int>(std::lower_bound(leaders.begin(), leaders.end(), all[3 * r]) -
                                     leaders.begin());
      g.world_rank_of[n * local + all[3 * r + 1]] = r;
    }
    g.cross = world.split(host->rank(), leader);
    g.host = std::move(host);
  }
  return g;
}

QuantizedChunk QuantizedChunk::for_numel(int64_t numel) {
  QuantizedChunk c;
  c.numel = numel;
  c.padded = (numel + 7) / 8 * 8;
  c.groups = c.padded == 0 ? 0 : kernels::qwz_group_count(c.padded);
  c.bytes = c.padded + 4 * c.groups;
  return c;
}

void QuantizedChunk::pack(const at::Tensor& values, const at::Tensor& dest) const {
  ZRT_INTERNAL_ASSERT(values.numel() == padded && dest.numel() == bytes, "qwZ chunk of ", padded,
                      " elements / ", bytes, " bytes got ", values.numel(), " / ", dest.numel());
  if (padded == 0) return;
  kernels::quantize(values, padded / groups, 8, dest.narrow(0, 0, padded),
                    dest.narrow(0, padded, 4 * groups).view(at::kFloat));
}

void QuantizedChunk::unpack(const at::Tensor& src, const at::Tensor& values) const {
  if (padded == 0) return;
  kernels::dequantize(src.narrow(0, 0, padded), src.narrow(0, padded, 4 * groups).view(at::kFloat),
                      padded / groups, 8, values);
}

QuantizedReduceScatter::QuantizedReduceScatter(const ZeroPPGroups& groups) : groups_(groups) {
  ZRT_INTERNAL_ASSERT(groups.host && groups.cross, "qgZ without its host groups");
  hosts_ = groups.cross->size();
  local_ = groups.host->size();
}

namespace {

int64_t groups_of(int64_t chunk) {
  return (chunk + QuantizedReduceScatter::kGroupSize - 1) / QuantizedReduceScatter::kGroupSize;
}
// Where a 4-bit slot's values end and its scales begin (4-byte aligned).
int64_t scales_offset(int64_t chunk) { return ((chunk + 1) / 2 + 3) / 4 * 4; }

void quantize_slot(const at::Tensor& values, const at::Tensor& slot) {
  const int64_t c = values.numel();
  const int64_t s = scales_offset(c);
  kernels::quantize(values, QuantizedReduceScatter::kGroupSize, QuantizedReduceScatter::kBits,
                    slot.narrow(0, 0, (c + 1) / 2),
                    slot.narrow(0, s, 4 * groups_of(c)).view(at::kFloat));
}

void add_slot(const at::Tensor& slot, const at::Tensor& acc) {
  const int64_t c = acc.numel();
  const int64_t s = scales_offset(c);
  kernels::dequantize_add(slot.narrow(0, 0, (c + 1) / 2),
                          slot.narrow(0, s, 4 * groups_of(c)).view(at::kFloat),
                          QuantizedReduceScatter::kGroupSize, QuantizedReduceScatter::kBits, acc);
}

}  // namespace

int64_t QuantizedReduceScatter::slot_bytes(int64_t chunk) const {
  return scales_offset(chunk) + 4 * groups_of(chunk);
}

std::unique_ptr<QuantizedReduceScatter::InFlight> QuantizedReduceScatter::start(
    const at::Tensor& send) const {
  auto f = std::make_unique<InFlight>();
  const int n_hosts = hosts_;
  f->chunk = send.numel() / (n_hosts * local_);
  const int64_t s = slot_bytes(f->chunk);
  // Block l of the packed buffer goes to local rank l: the chunks of (host n, local l), n in order.
  f->packed = at::empty({local_ * n_hosts * s}, send.options().dtype(at::kByte));
  for (int n = 0; n < n_hosts; ++n) {
    for (int l = 0; l < local_; ++l) {
      const int r = groups_.world_rank_of[n * local_ + l];
      quantize_slot(send.narrow(0, r * f->chunk, f->chunk),
                    f->packed.narrow(0, (l * n_hosts + n) * s, s));
    }
  }
  f->received = at::empty_like(f->packed);
  f->work = groups_.host->all_to_all_async(f->received, f->packed);
  return f;
}

void QuantizedReduceScatter::finish(InFlight& f, const at::Tensor& out) const {
  f.work->wait();
  const int n_hosts = hosts_;
  const int64_t c = f.chunk;
  const int64_t s = slot_bytes(c);
  // This host's partial sums of the chunks of (host n, this local index), n in order.
  at::Tensor partial = at::zeros({n_hosts * c}, out.options().dtype(at::kFloat));
  for (int l = 0; l < local_; ++l) {
    for (int n = 0; n < n_hosts; ++n) {
      add_slot(f.received.narrow(0, (l * n_hosts + n) * s, s), partial.narrow(0, n * c, c));
    }
  }
  f.packed = at::Tensor();
  f.received = at::Tensor();
  if (n_hosts == 1) {
    out.copy_(partial);
    return;
  }
  at::Tensor packed = at::empty({n_hosts * s}, out.options().dtype(at::kByte));
  for (int n = 0; n < n_hosts; ++n) {
    quantize_slot(partial.narrow(0, n * c, c), packed.narrow(0, n * s, s));
  }
  at::Tensor received = at::empty_like(packed);
  groups_.cross->all_to_all(received, packed);
  at::Tensor total = at::zeros({c}, out.options().dtype(at::kFloat));
  for (int n = 0; n < n_hosts; ++n) add_slot(received.narrow(0, n * s, s), total);
  out.copy_(total);
}

}  // namespace zrt::zero
