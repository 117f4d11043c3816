// ZeRO++ (Wang et al. 2023, "ZeRO++: Extremely Efficient Collective Communication for Giant
// Model Training"; DeepSpeed's zero_hpz_partition_size, zero_quantized_weights,
// zero_quantized_gradients) for the stage-3 data path: the host groups it communicates over, the
// quantized all-gather chunk (qwZ) and the hierarchical quantized reduce-scatter (qgZ). The
// gatherer and the gradient reducer (zero/unit_gatherer.h, zero/unit_grad_reducer.h) use them;
// Note [ZeRO++] says what each part does and what crosses the slow link.
#pragma once

#include <memory>
#include <vector>

#include <ATen/ATen.h>

#include "comm/comm.h"
#include "zero/options.h"

namespace zrt::zero {

// The sub-communicators ZeRO++ needs, made once from the world (collective over it).
struct ZeroPPGroups {
  // hpZ: the K = hpz_partition_size ranks of this host that share a secondary partition (the
  // host's ranks in order, cut into consecutive groups of K); null without hpZ.
  std::shared_ptr<comm::Comm> hpz;
  // qgZ: this host's ranks (rank l = the local index), and the ranks of every host with this
  // rank's local index (rank n = the host index, hosts ordered by their lowest world rank); null
  // without qgZ.
  std::shared_ptr<comm::Comm> host;
  std::shared_ptr<comm::Comm> cross;
  // qgZ: the world rank of (host n, local index l) at [n · L + l].
  std::vector<int> world_rank_of;

  // Collective over `world`. Throws ConfigError naming the key when the hosts do not fit: K
  // must divide every host's rank count, and qgZ needs the same rank count on every host.
  static ZeroPPGroups make(comm::Comm& world, const ZeroPPOptions& options);
};

// qwZ's wire form of one rank's all-gather chunk of `numel` elements: padded to a multiple of 8,
// int8 values in groups (DeepSpeed's group rule: kernels/quantize.h), then one fp32 scale per
// group. Every rank's chunk has the same layout.
struct QuantizedChunk {
  int64_t numel = 0;
  int64_t padded = 0;  // numel rounded up to a multiple of 8
  int64_t groups = 0;
  int64_t bytes = 0;  // padded + 4 · groups

  static QuantizedChunk for_numel(int64_t numel);
  // Quantizes `values` (numel elements, any float dtype) into `dest` (bytes, uint8).
  void pack(const at::Tensor& values, const at::Tensor& dest) const;
  // Dequantizes `src` (bytes) into `values` (padded elements, any float dtype).
  void unpack(const at::Tensor& src, const at::Tensor& values) const;
};

// qgZ: the reduce-scatter of a unit's gradients, quantized to 4 bits and reduced in two hops
// (Note [ZeRO++], qgZ). start() quantizes and starts the intra-host all-to-all; finish() does
// the rest and writes this rank's reduced chunk.
class QuantizedReduceScatter {
 public:
  explicit QuantizedReduceScatter(const ZeroPPGroups& groups);

  struct InFlight {
    int64_t chunk = 0;  // elements per rank
    at::Tensor packed;  // kept until the all-to-all is done
    at::Tensor received;
    std::shared_ptr<comm::Work> work;
  };
  // `send`: world-size chunks of `chunk` elements, chunk r for world rank r.
  std::unique_ptr<InFlight> start(const at::Tensor& send) const;
  // Waits and writes the sum over ranks of this rank's chunk into `out` (chunk elements).
  void finish(InFlight& f, const at::Tensor& out) const;

  static constexpr int kBits = 4;
  static constexpr int64_t kGroupSize = 512;

 private:
  int64_t slot_bytes(int64_t chunk) const;
  const ZeroPPGroups& groups_;
  int hosts_ = 1;
  int local_ = 1;
};

}  // namespace zrt::zero
