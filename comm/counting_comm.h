// A decorator that counts, per rank and per collective type, the bytes this rank puts on the wire
// under the standard ring accounting of nccl-tests, then forwards to the wrapped communicator.
// ZeRO's communication-volume tests and the benchmarks read it.
//
// For a collective over S bytes on n ranks (S = the full tensor: the all_reduce tensor, the
// reduce_scatter input, the all_gather output):
//   all_reduce 2(n−1)/n·S, reduce_scatter (n−1)/n·S, all_gather (n−1)/n·S, all_to_all (n−1)/n·S
//   (S = its output), broadcast S,
//   barrier 0; the variable-size reduce_scatter_v and all_gather_v count S minus this rank's own
//   piece (what a ring sends; equal to (n−1)/n·S for equal pieces, and summing to (n−1)·S over
//   ranks in every case).
#pragma once

#include <memory>
#include <mutex>

#include "comm/comm_stats.h"
#include "comm/comm_wrapper.h"

namespace zrt::comm {

class CountingComm final : public CommWrapper {
 public:
  explicit CountingComm(std::shared_ptr<Comm> inner);

  // Thread-safe snapshot / reset of the counters.
  CommStats stats() const;
  void reset();

  // The ring-accounted bytes of one collective of `type` over S = `full_bytes` on `n` ranks.
  static double wire_bytes(OpType type, double full_bytes, int n);

 protected:
  std::shared_ptr<Work> intercept(const OpInfo& info, const Operands& operands,
                                  const Start& start) override;

 private:
  mutable std::mutex mutex_;
  CommStats stats_;
};

}  // namespace zrt::comm
