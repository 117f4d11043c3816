#include "comm/counting_comm.h"

#include "comm/blocking_call.h"
#include "core/error.h"

namespace zrt::comm {

double CommStats::total_wire_bytes() const {
  double total = 0;
  for (const auto& c : by_op) total += c.wire_bytes;
  return total;
}

int64_t CommStats::total_calls() const {
  int64_t total = 0;
  for (const auto& c : by_op) total += c.calls;
  return total;
}

CountingComm::CountingComm(std::shared_ptr<Comm> inner) : inner_(std::move(inner)) {
  ZRT_INTERNAL_ASSERT(inner_ != nullptr);
}

double CountingComm::wire_bytes(OpType type, double full_bytes, int n) {
  switch (type) {
    case OpType::kAllReduce:
      return 2.0 * (n - 1) / n * full_bytes;
    case OpType::kReduceScatter:
    case OpType::kAllGather:
      return static_cast<double>(n - 1) / n * full_bytes;
    case OpType::kBroadcast:
      return n > 1 ? full_bytes : 0.0;
    case OpType::kBarrier:
      return 0.0;
    case OpType::kReduceScatterV:
    case OpType::kAllGatherV:
      return 0.0;  // depends on the pieces: see record()
  }
  return 0.0;
}

void CountingComm::record(OpType type, const at::Tensor& full, int64_t own_piece) {
  const bool blocking = BlockingCall::active();
  const double bytes = static_cast<double>(full.numel()) * full.element_size();
  const bool variable = type == OpType::kReduceScatterV || type == OpType::kAllGatherV;
  const double wire =
      variable ? (inner_->size() > 1 ? bytes - static_cast<double>(own_piece) * full.element_size()
                                     : 0.0)
               : wire_bytes(type, bytes, inner_->size());
  std::lock_guard<std::mutex> lock(mutex_);
  OpCounter& c = stats_.by_op[static_cast<int>(type)];
  c.calls += 1;
  c.elements += full.numel();
  c.wire_bytes += wire;
  if (blocking) c.blocking_calls += 1;
}

CommStats CountingComm::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

void CountingComm::reset() {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_ = CommStats{};
}

std::shared_ptr<Work> CountingComm::all_reduce_impl(const at::Tensor& t, const OpInfo& info) {
  record(OpType::kAllReduce, t);
  return inner_->all_reduce_async(t, info.reduce_op);
}

std::shared_ptr<Work> CountingComm::reduce_scatter_impl(const at::Tensor& out, const at::Tensor& in,
                                                        const OpInfo& info) {
  record(OpType::kReduceScatter, in);
  return inner_->reduce_scatter_async(out, in, info.reduce_op);
}

std::shared_ptr<Work> CountingComm::all_gather_impl(const at::Tensor& out, const at::Tensor& in,
                                                    const OpInfo&) {
  record(OpType::kAllGather, out);
  return inner_->all_gather_async(out, in);
}

std::shared_ptr<Work> CountingComm::reduce_scatter_v_impl(const at::Tensor& out,
                                                          const at::Tensor& in,
                                                          const OpInfo& info) {
  record(OpType::kReduceScatterV, in, info.counts[inner_->rank()]);
  return inner_->reduce_scatter_v_async(out, in, info.counts, info.reduce_op);
}

std::shared_ptr<Work> CountingComm::all_gather_v_impl(const at::Tensor& out, const at::Tensor& in,
                                                      const OpInfo& info) {
  record(OpType::kAllGatherV, out, info.counts[inner_->rank()]);
  return inner_->all_gather_v_async(out, in, info.counts);
}

std::shared_ptr<Work> CountingComm::broadcast_impl(const at::Tensor& t, const OpInfo& info) {
  record(OpType::kBroadcast, t);
  return inner_->broadcast_async(t, info.root);
}

std::shared_ptr<Work> CountingComm::barrier_impl(const OpInfo&) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stats_.by_op[static_cast<int>(OpType::kBarrier)].calls += 1;
  }
  return inner_->barrier_async();
}

}  // namespace zrt::comm
