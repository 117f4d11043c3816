// UnitGradReducer: ZeRO-3's gradient path. As autograd finishes each trainable parameter's
// gradient it is copied into its unit's send buffer; once all of a unit's gradients arrived, the
// unit's coalesced reduce-scatter starts (Note [Coalesced unit collectives]) and the unit may be
// released; finished reductions are added into this rank's gradient partitions, accumulated
// across micro-steps. The reductions in flight stay within reduce_bucket_size (Note [Bounded
// gradient reduction]).
#pragma once

#include <deque>
#include <functional>
#include <memory>
#include <vector>

#include <ATen/ATen.h>

#include "comm/comm.h"
#include "zero/stage3_layout.h"
#include "zero/unit_tags.h"
#include "zero/zeropp.h"

namespace zrt::zero {

struct ReduceStats {
  int64_t reduce_scatters = 0;
  // Most gradient elements held by reductions in flight at once, since the last reset_peak().
  int64_t peak_reducing_elements = 0;
};

class UnitGradReducer {
 public:
  struct Options {
    int64_t reduce_bucket_size = 500000000;   // gradient elements in flight at most (Note)
    at::ScalarType comm_dtype = at::kFloat;   // reduce-scatter dtype
    at::ScalarType accum_dtype = at::kFloat;  // gradient partition dtype
    // false: no gradient partitions; a gradient arriving is an error (inference).
    bool gradients = true;
    // qgZ (Note [ZeRO++]): reduce-scatters quantized over these groups; null: plain.
    const ZeroPPGroups* quantized = nullptr;
  };

  // Installs a hook on every trainable parameter's gradient accumulator. `unit_done(u)` runs
  // when the last gradient of unit u arrived in a backward (its reduction is in flight).
  // `layout` must outlive this.
  UnitGradReducer(Stage3Layout& layout, std::shared_ptr<comm::Comm> comm, Options options,
                  std::function<void(int unit)> unit_done);
  ~UnitGradReducer();  // removes the hooks, waits for reductions in flight
  UnitGradReducer(const UnitGradReducer&) = delete;
  UnitGradReducer& operator=(const UnitGradReducer&) = delete;

  // Around every micro-step's autograd pass. end() is collective: it reduces the units whose
  // gradients did not all arrive (in unit order) and finishes every reduction.
  void begin();
  void end();
  bool in_backward() const { return in_backward_; }

  // This rank's gradient partition of group g (accum dtype), accumulated across micro-steps;
  // undefined without gradients.
  const at::Tensor& grad_partition(int group) const { return grad_flats_.at(group); }
  void zero_grad();
  int64_t grad_bytes() const;

  const ReduceStats& stats() const { return stats_; }
  void reset_peak() { stats_.peak_reducing_elements = reducing_elements_; }
  // Called by the accumulator hook of trainable parameter `param`. Internal.
  void on_grad_ready(int param);

 private:
  struct Pending;
  void launch(int unit);
  void finish_oldest();  // waits for the oldest reduction, accumulates it, frees it

  Stage3Layout& layout_;
  std::shared_ptr<comm::Comm> comm_;
  Options options_;
  std::function<void(int)> unit_done_;
  std::vector<at::Tensor> grad_flats_;
  std::deque<std::unique_ptr<Pending>> reduces_;
  int64_t reducing_elements_ = 0;               // gradient elements of reduces_' sends
  std::vector<std::unique_ptr<Pending>> open_;  // per unit, being filled
  std::vector<int> pending_grads_;              // per unit
  std::vector<char> arrived_alone_;  // per parameter, one rank only: gradient added this pass
  bool in_backward_ = false;
  ReduceStats stats_;
  struct HookHandle;
  std::vector<HookHandle> hooks_;
  std::unique_ptr<QuantizedReduceScatter> qgz_;
  int tag_bits_ = 0;          // Note [Unit tags]: bits of the unit's tag (0: unchecked, qgZ)
  int64_t tag_elements_ = 0;  // what each chunk grows by: tag_bits_ in whole 64-byte slots
  UnitContexts contexts_;     // what each unit's reduction is, in communicator messages
  // Elements between consecutive ranks' chunks of a unit's send buffer.
  int64_t chunk_stride(const Stage3Unit& u) const { return u.reduce_partition + tag_elements_; }
};

}  // namespace zrt::zero
