// UseTrace: the order in which a training forward uses ZeRO-3's units, and the decisions made
// from it: where the current forward or backward use sits, which units to prefetch next, and
// whether a unit is used again soon enough to stay gathered (Note [A unit used several times]).
// Pure bookkeeping: no tensors, no communication.
#pragma once

#include <cstdint>
#include <vector>

namespace zrt::zero {

struct PrefetchLimits {
  int64_t bucket = 0;    // elements in flight at most (prefetch_bucket_size; 0: off)
  int64_t max_live = 0;  // gathered + in-flight elements beyond which prefetch stops
};

class UseTrace {
 public:
  // `unit_numel`: the elements each unit gathers (Stage3Unit::gather_numel), by unit id.
  explicit UseTrace(std::vector<int64_t> unit_numel);

  // Whether the trace is recorded (after the first training backward).
  bool complete() const { return complete_; }
  int size() const { return static_cast<int>(order_.size()); }

  // A forward use of `unit` begins: records it while the trace is incomplete and `record`, and
  // returns its position in the trace (-1 when the unit is not in it).
  int begin_forward_use(int unit, bool record);
  // The innermost forward use ends; returns its position.
  int end_forward_use();
  // A backward use of `unit` begins (its outputs' gradient arrived); returns its position.
  int begin_backward_use(int unit);
  // The position of the backward use of `unit` that is running or comes next.
  int backward_position(int unit) const;
  // Around every backward pass: the first one keeps one copy of a repeated trace and completes it.
  void begin_backward();
  void end_backward();

  // The units to prefetch after the use at `pos`, walking the trace in `direction` (+1 forward,
  // -1 backward) while they fit the limits: `released(u)` says whether unit u may be gathered,
  // `in_flight` and `live` are the elements in flight and gathered now.
  template <typename Released>
  std::vector<int> prefetch_after(int pos, int direction, const PrefetchLimits& limits,
                                  int64_t in_flight, int64_t live, Released&& released) const {
    std::vector<int> out;
    if (!complete_ || limits.bucket <= 0 || pos < 0) return out;
    for (int at = pos + direction; at >= 0 && at < size(); at += direction) {
      const int next = order_[at];
      if (!released(next)) continue;
      const int64_t n = unit_numel_[next];
      if (in_flight + n > limits.bucket || live + in_flight + n > limits.max_live) break;
      out.push_back(next);
      in_flight += n;
    }
    return out;
  }
  // Whether `unit`, used at `pos` (a backward use when `backward_use`), is used again within
  // `max_distance` gathered elements in this step. `training` (grad mode on, or any backward
  // use) measures along forward + backward, else along repeated forwards.
  bool reused_soon(int unit, int pos, bool backward_use, bool training, int64_t max_distance) const;

 private:
  int forward_position(int unit) const;
  void keep_one_pass();

  std::vector<int64_t> unit_numel_;
  std::vector<int> order_;                   // unit calls of the first training forward
  std::vector<std::vector<int>> positions_;  // unit → its indices in order_
  bool complete_ = false;
  int forward_cursor_ = -1;  // position of the latest forward use (-1: a new pass)
  int backward_cursor_ = 0;  // position of the latest backward use
  std::vector<int> active_;  // positions of the forward uses running (nested)
};

}  // namespace zrt::zero
