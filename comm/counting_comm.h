// A decorator that counts, per rank and per collective type, the bytes this rank puts on the wire
// under the standard ring accounting of nccl-tests, then forwards to the wrapped communicator.
// ZeRO's communication-volume tests and the benchmarks read it.
//
// For a collective over S bytes on n ranks (S = the full tensor: the all_reduce tensor, the
// reduce_scatter input, the all_gather output):
//   all_reduce 2(n−1)/n·S, reduce_scatter (n−1)/n·S, all_gather (n−1)/n·S, broadcast S,
//   barrier 0; the variable-size reduce_scatter_v and all_gather_v count S minus this rank's own
//   piece (what a ring sends; equal to (n−1)/n·S for equal pieces, and summing to (n−1)·S over
//   ranks in every case).
#pragma once

#include <array>
#include <memory>
#include <mutex>

#include "comm/comm.h"

namespace zrt::comm {

struct OpCounter {
  int64_t calls = 0;
  int64_t elements = 0;     // elements of S summed over calls
  double wire_bytes = 0.0;  // ring-accounted bytes sent by this rank
  // Calls submitted by a thread that waits for them at once (inside a BlockingCall), which a CPU
  // backend may run on that thread (Note [The caller runs what it waits for], comm/op_queue.h).
  int64_t blocking_calls = 0;
};

struct CommStats {
  std::array<OpCounter, kNumOpTypes> by_op;  // indexed by static_cast<int>(OpType)
  const OpCounter& operator[](OpType op) const { return by_op[static_cast<int>(op)]; }
  double total_wire_bytes() const;
  int64_t total_calls() const;
};

class CountingComm final : public Comm {
 public:
  explicit CountingComm(std::shared_ptr<Comm> inner);

  // Thread-safe snapshot / reset of the counters.
  CommStats stats() const;
  void reset();
  const std::shared_ptr<Comm>& inner() const { return inner_; }

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  int local_rank() const override { return inner_->local_rank(); }
  int local_size() const override { return inner_->local_size(); }
  std::string backend_name() const override { return "counting(" + inner_->backend_name() + ")"; }
  at::DeviceType device_type() const override { return inner_->device_type(); }
  double timeout_seconds() const override { return inner_->timeout_seconds(); }
  CommTimes times() const override { return inner_->times(); }

  // The ring-accounted bytes of one collective of `type` over S = `full_bytes` on `n` ranks.
  static double wire_bytes(OpType type, double full_bytes, int n);

 protected:
  std::shared_ptr<Work> all_reduce_impl(const at::Tensor& t, const OpInfo& info) override;
  std::shared_ptr<Work> reduce_scatter_impl(const at::Tensor& out, const at::Tensor& in,
                                            const OpInfo& info) override;
  std::shared_ptr<Work> all_gather_impl(const at::Tensor& out, const at::Tensor& in,
                                        const OpInfo& info) override;
  std::shared_ptr<Work> reduce_scatter_v_impl(const at::Tensor& out, const at::Tensor& in,
                                              const OpInfo& info) override;
  std::shared_ptr<Work> all_gather_v_impl(const at::Tensor& out, const at::Tensor& in,
                                          const OpInfo& info) override;
  std::shared_ptr<Work> broadcast_impl(const at::Tensor& t, const OpInfo& info) override;
  std::shared_ptr<Work> barrier_impl(const OpInfo& info) override;

 private:
  void record(OpType type, const at::Tensor& full, int64_t own_piece = 0);

  std::shared_ptr<Comm> inner_;
  mutable std::mutex mutex_;
  CommStats stats_;
};

}  // namespace zrt::comm
