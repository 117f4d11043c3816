// What the counting decorator (comm/counting_comm.h) records per collective type: calls, elements
// and ring-accounted bytes on the wire.
#pragma once

#include <array>
#include <cstdint>

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

}  // namespace zrt::comm
