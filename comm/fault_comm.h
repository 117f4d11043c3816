// A deterministic fault seam (in the spirit of c10d's fake backend): a decorator that makes the
// k-th collective of one rank (or of every rank) fail, start late, or complete with a corrupted
// result, and otherwise forwards to the wrapped communicator. Unit tests of the recovery paths
// (comm timeouts, broken communicators, non-finite gradients, checkpoint commit votes) use it
// with the in-process backend, so each path is exercised on purpose, on the collective chosen,
// instead of hoping a random kill lands there.
#pragma once

#include <atomic>
#include <cmath>
#include <functional>
#include <memory>
#include <optional>

#include "comm/comm_wrapper.h"

namespace zrt::comm {

struct FaultPlan {
  enum class Kind {
    kFail,     // the collective throws CommError("injected failure ...") from wait()
    kDelay,    // this rank enters the collective `delay_seconds` late (a stalled rank)
    kCorrupt,  // after completing, the output's first element becomes `value` (e.g. NaN)
  };
  Kind kind = Kind::kFail;
  // Which collective: the k-th (from 1) issued after arm(), counting only those of `type` when
  // it is set.
  uint64_t collective = 1;
  std::optional<OpType> type;
  int rank = -1;  // the misbehaving rank; -1: every rank
  double delay_seconds = 0;
  double value = NAN;
};

class FaultComm final : public CommWrapper {
 public:
  // Without a plan the decorator only forwards; arm() it when the fault should be counted from.
  explicit FaultComm(std::shared_ptr<Comm> inner, std::optional<FaultPlan> plan = std::nullopt);

  // Starts counting collectives for `plan` from now (replacing an earlier plan). Call it from
  // the thread that issues this rank's collectives.
  void arm(FaultPlan plan);
  // Whether the planned fault happened on this rank (false for ranks the plan leaves alone).
  bool fired() const { return fired_; }

 protected:
  // Issues the collective with the planned fault applied when `info` is the chosen collective on
  // a chosen rank; kCorrupt overwrites the output (nothing for a barrier).
  std::shared_ptr<Work> intercept(const OpInfo& info, const Operands& operands,
                                  const Start& start) override;

 private:
  std::optional<FaultPlan> plan_;
  uint64_t counted_ = 0;  // matching collectives since arm()
  std::atomic<bool> fired_{false};
};

}  // namespace zrt::comm
