#include "zero/use_trace.h"

#include <algorithm>
#include <iterator>

namespace zrt::zero {

// Note [A unit used several times]
// A unit may run more than once in a forward: ShardUnitBase::run() uses its parameters again (a
// tied lm_head reads the embedding unit's weight). The trace F of the first training forward
// keeps every call, so a unit may sit at several positions. A forward use takes the unit's next
// position after the previous forward use (its first position when none is left: a new pass),
// a backward use the unit's last position before the previous backward use, so prefetch walks
// on from the position of this use, not of the unit's first one. Reuse is measured along the
// step's sequence of uses S = F ++ reverse(F) (in training; F repeated cyclically in a forward-
// only pass): the elements gathered between this use and the unit's next one. For a unit used
// once this is the old rule (twice the units after it in training, every other unit in
// inference); a tied embedding is kept from the lm_head's forward into its backward (distance
// 0), and released after that backward (post_backward) until the embedding's own backward.
// Only engines that train record (gradients on), and the trace ends at the first backward: when
// several grad-mode forwards came before it (an evaluation without NoGradGuard), it is the same
// pass repeated and one copy is kept. A trace that differs from later passes only mispredicts
// prefetches, the same way on every rank.

UseTrace::UseTrace(std::vector<int64_t> unit_numel)
    : unit_numel_(std::move(unit_numel)), positions_(unit_numel_.size()) {}

int UseTrace::begin_forward_use(int unit, bool record) {
  if (record && !complete_) {
    positions_[unit].push_back(size());
    order_.push_back(unit);
  }
  const int pos = forward_position(unit);
  if (pos >= 0) forward_cursor_ = pos;
  active_.push_back(pos);
  return pos;
}

int UseTrace::end_forward_use() {
  if (active_.empty()) return -1;
  const int pos = active_.back();
  active_.pop_back();
  return pos;
}

int UseTrace::begin_backward_use(int unit) {
  const int pos = backward_position(unit);
  if (pos >= 0) backward_cursor_ = pos;
  return pos;
}

void UseTrace::begin_backward() {
  if (!complete_) keep_one_pass();
  backward_cursor_ = size();
}

void UseTrace::end_backward() {
  if (!order_.empty()) complete_ = true;
  forward_cursor_ = -1;
  active_.clear();
}

void UseTrace::keep_one_pass() {
  const size_t n = order_.size();
  for (size_t p = 1; p < n; ++p) {
    if (n % p != 0) continue;
    bool repeats = true;
    for (size_t i = p; i < n && repeats; ++i) repeats = order_[i] == order_[i - p];
    if (!repeats) continue;
    order_.resize(p);
    for (std::vector<int>& ps : positions_) {
      ps.erase(
          std::remove_if(ps.begin(), ps.end(), [&](int x) { return x >= static_cast<int>(p); }),
          ps.end());
    }
    return;
  }
}

int UseTrace::forward_position(int unit) const {
  const std::vector<int>& ps = positions_[unit];
  if (ps.empty()) return -1;
  const auto next = std::upper_bound(ps.begin(), ps.end(), forward_cursor_);
  return next != ps.end() ? *next : ps.front();
}

int UseTrace::backward_position(int unit) const {
  const std::vector<int>& ps = positions_[unit];
  if (ps.empty()) return -1;
  // Another marked output of the use whose backward is running.
  if (backward_cursor_ < size() && order_[backward_cursor_] == unit) return backward_cursor_;
  const auto next = std::lower_bound(ps.begin(), ps.end(), backward_cursor_);
  return next != ps.begin() ? *std::prev(next) : ps.back();
}

bool UseTrace::reused_soon(int unit, int pos, bool backward_use, bool training,
                           int64_t max_distance) const {
  if (!complete_ || pos < 0) return false;
  const int n = size();
  const int len = training ? 2 * n : n;
  auto unit_at = [&](int s) { return order_[s < n ? s : 2 * n - 1 - s]; };
  const int from = backward_use ? 2 * n - 1 - pos : pos;  // this use's index in S
  int64_t between = 0;
  for (int k = 1; k <= len; ++k) {
    if (training && from + k >= len) return false;  // not used again this step
    const int u = training ? unit_at(from + k) : order_[(from + k) % n];
    if (u == unit) {
      // In a forward-only pass a use past the end of F is the next forward's, which may be far
      // off or never come: reaching it is never distance 0.
      if (!training && from + k >= n) between = std::max<int64_t>(between, 1);
      return between <= max_distance;
    }
    between += unit_numel_[u];
  }
  return false;
}

}  // namespace zrt::zero
