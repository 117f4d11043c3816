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

CountingComm::CountingComm(std::shared_ptr<Comm> inner)
    : CommWrapper(std::move(inner), "counting") {}

double CountingComm::wire_bytes(OpType type, double full_bytes, int n) {
  switch (type) {
    case OpType::kAllReduce:
      return 2.0 * (n - 1) / n * full_bytes;
    case OpType::kReduceScatter:
    case OpType::kAllGather:
      return static_cast<double>(n - 1) / n * full_bytes;
    case OpType::kAllToAll:
      return static_cast<double>(n - 1) / n * full_bytes;
    case OpType::kBroadcast:
      return n > 1 ? full_bytes : 0.0;
    case OpType::kBarrier:
      return 0.0;
    case OpType::kReduceScatterV:
    case OpType::kAllGatherV:
      return 0.0;  // depends on the pieces: see intercept()
  }
  return 0.0;
}

// S is the all_reduce and broadcast tensor, the reduce-scatter input and the all-gather output
// (the file comment of counting_comm.h).
std::shared_ptr<Work> CountingComm::intercept(const OpInfo& info, const Operands& operands,
                                              const Start& start) {
  const bool blocking = BlockingCall::active();
  const OpType type = info.type;
  const bool reduce = type == OpType::kReduceScatter || type == OpType::kReduceScatterV;
  const at::Tensor& full = reduce ? operands.input : operands.output;
  OpCounter delta;
  delta.calls = 1;
  if (type != OpType::kBarrier) {
    const double bytes = static_cast<double>(full.numel()) * full.element_size();
    const bool variable = type == OpType::kReduceScatterV || type == OpType::kAllGatherV;
    const double own =
        variable ? static_cast<double>(info.counts[rank()]) * full.element_size() : 0;
    delta.elements = full.numel();
    delta.wire_bytes =
        variable ? (size() > 1 ? bytes - own : 0.0) : wire_bytes(type, bytes, size());
    delta.blocking_calls = blocking ? 1 : 0;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    OpCounter& c = stats_.by_op[static_cast<int>(type)];
    c.calls += delta.calls;
    c.elements += delta.elements;
    c.wire_bytes += delta.wire_bytes;
    c.blocking_calls += delta.blocking_calls;
  }
  return start();
}

CommStats CountingComm::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

void CountingComm::reset() {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_ = CommStats{};
}

}  // namespace zrt::comm
