// UnitGatherer: ZeRO-3's gather path. It all-gathers a unit's parameters into their storage
// (one coalesced collective per unit, Note [Coalesced unit collectives]), asynchronously for
// prefetches, finishes gathers in issue order, and releases units again.
#pragma once

#include <deque>
#include <memory>
#include <vector>

#include <ATen/ATen.h>

#include "comm/comm.h"
#include "zero/buffer_pool.h"
#include "zero/param_storage.h"
#include "zero/stage3_layout.h"
#include "zero/unit_tags.h"
#include "zero/zeropp.h"

namespace zrt::zero {

struct GatherStats {
  int64_t gathered_bytes = 0;       // non-persistent parameter bytes gathered right now
  int64_t peak_gathered_bytes = 0;  // since the last reset_peak()
  int64_t all_gathers = 0;          // unit gathers issued (prefetches included)
  int64_t prefetches = 0;
  int64_t secondary_bytes = 0;     // hpZ: the secondary partitions held (Note [ZeRO++])
  int64_t secondary_gathers = 0;   // hpZ: unit gathers within the hpZ group
  int64_t quantized_gathers = 0;   // qwZ: unit gathers sent quantized
};

class UnitGatherer {
 public:
  enum class State : char { kReleased, kInFlight, kGathered };

  // `layout` must be partitioned already and outlive the gatherer. `pooled_outputs`: all-gather
  // outputs kept for reuse (1 without prefetch, 2 with; Note [Reusing gather buffers]).
  // `zeropp`: hpZ's group (groups.hpz) and whether gathers from the primary partitions are
  // quantized (qwZ); Note [ZeRO++].
  UnitGatherer(Stage3Layout& layout, std::shared_ptr<comm::Comm> comm, size_t pooled_outputs,
               std::shared_ptr<comm::Comm> hpz = nullptr, bool quantized_weights = false);
  ~UnitGatherer();  // waits for gathers in flight
  UnitGatherer(const UnitGatherer&) = delete;
  UnitGatherer& operator=(const UnitGatherer&) = delete;

  State state(int unit) const { return state_[unit]; }
  // Collective: starts gathering a released unit (a prefetch when `prefetch`). `exact`: the
  // partitions' own values, whatever qwZ does to the gathers for compute (whole-model access:
  // saving, GatheredParameters).
  // `frozen_too` (unit -1 only): the persistent frozen parameters as well.
  void start(int unit, bool prefetch, bool exact = false, bool frozen_too = false);
  // Collective: makes `unit` gathered, starting its gather if needed and finishing gathers in
  // issue order up to it.
  void wait(int unit);
  // Finishes the unit's gather when one is in flight (a prefetch nobody used).
  void wait_if_in_flight(int unit) {
    if (state_[unit] == State::kInFlight) wait(unit);
  }
  // Releases a gathered unit's non-persistent parameters (nothing otherwise).
  void release(int unit);
  // Collective: makes `unit` gathered with the partitions' exact values (re-gathering it if it
  // holds qwZ's quantized ones).
  void wait_exact(int unit);
  // Collective: gathers the persistent trainable parameters from the (updated) partitions, and
  // forgets hpZ's secondary partitions (they hold the values before the update). `frozen_too`:
  // the persistent frozen ones as well (after a load wrote their partitions).
  void refresh_persistent(bool frozen_too = false);
  // Forgets hpZ's secondary partitions (not collective): after the partitions were written.
  void drop_secondaries();
  // Elements of the units whose gathers are in flight, and of the units gathered now.
  int64_t in_flight_numel() const;
  int64_t live_numel() const;

  ParamStorage& storage() { return storage_; }
  const ParamStorage& storage() const { return storage_; }
  // Frees the idle all-gather outputs (after a backward) or those and the idle slabs too.
  void trim_outputs() { outputs_.trim(); }
  void trim() {
    outputs_.trim();
    storage_.trim();
  }
  const GatherStats& stats() const { return stats_; }
  void reset_peak() { stats_.peak_gathered_bytes = stats_.gathered_bytes; }
  // Bytes of the pooled all-gather outputs held now, in use or idle.
  int64_t output_bytes() const { return outputs_.bytes(); }

 private:
  struct InFlight;
  class PartitionReader;
  void finish(InFlight& g);
  void copy_alone(const InFlight& g);  // one rank: partitions straight into parameters
  void start_plain(InFlight& g, comm::Comm& group);
  void start_quantized(InFlight& g);
  void keep_secondary(const InFlight& g);  // hpZ: this rank's share of the gathered unit

  Stage3Layout& layout_;
  std::shared_ptr<comm::Comm> comm_;
  std::vector<State> state_;  // per unit
  std::deque<std::unique_ptr<InFlight>> in_flight_;
  BufferPool outputs_;  // Note [Reusing gather buffers]
  ParamStorage storage_;
  GatherStats stats_;
  std::shared_ptr<comm::Comm> hpz_;  // hpZ's group; null without hpZ
  bool quantized_ = false;           // qwZ
  std::vector<at::Tensor> secondary_;  // hpZ: per unit, undefined when not valid
  std::vector<char> exact_;            // per unit: gathered (or in flight) with exact values
  UnitContexts contexts_;              // what each unit's gather is, in communicator messages
};

}  // namespace zrt::zero
