// Process-level fault injection for the reliability campaign (scripts/fault_campaign.sh), off
// unless the environment asks for it:
//
//   ZRT_FAULT_INJECT=kill_in_save:rank=R:op=K    rank R dies (SIGKILL) at the K-th file-system
//                                                operation of a checkpoint save (create, write,
//                                                sync, rename, directory sync), counted over
//                                                the whole run
//   ZRT_FAULT_INJECT=kill_at_step:rank=R:step=S  rank R dies (SIGKILL) in backward() of step S
//
// Only the storage seam and the engine call into it; nothing here runs in normal operation.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include "checkpoint/storage.h"

namespace zrt::runtime {

struct FaultPlan {
  enum class Kind { kKillInSave, kKillAtStep } kind = Kind::kKillInSave;
  int rank = 0;
  int64_t at = 0;  // op index (1-based) or global step
};

// Parses ZRT_FAULT_INJECT (ConfigError on a malformed value); nullopt when unset.
std::optional<FaultPlan> fault_plan_from_env();

// Wraps `inner` so that this process dies at the plan's op (when the plan is kKillInSave and for
// this rank); otherwise returns `inner`.
std::shared_ptr<ckpt::Storage> maybe_kill_in_save(std::shared_ptr<ckpt::Storage> inner, int rank);

// Dies when the plan is kKillAtStep for this rank and `global_step` (the step being computed).
void maybe_kill_at_step(int rank, int64_t global_step);

}  // namespace zrt::runtime
