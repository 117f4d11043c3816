// Desynchronisation detection (ZRT_DEBUG_COLLECTIVES=1 or "zrt": {"debug_collectives": true}),
// like PyTorch's TORCH_DISTRIBUTED_DEBUG=DETAIL: before every collective the ranks all-gather a
// fingerprint of it (op, reduce op, dtype, element count, root, per-rank counts, sequence number)
// through the wrapped communicator and compare. A mismatch raises CommError on every rank naming
// the ranks and both calls — instead of a hang or silently mixed data. Costs one small all-gather
// per collective.
#pragma once

#include <memory>

#include "comm/comm_wrapper.h"

namespace zrt::comm {

class DesyncCheckComm final : public CommWrapper {
 public:
  explicit DesyncCheckComm(std::shared_ptr<Comm> inner);

 protected:
  void before_collective(const OpInfo& info) override;
};

}  // namespace zrt::comm
