#include "comm/fault_comm.h"

#include <chrono>
#include <thread>

#include "core/error.h"

namespace zrt::comm {
namespace {

class FailedWork final : public Work {
 public:
  explicit FailedWork(std::string message) : message_(std::move(message)) {}
  void wait() override { throw CommError(message_); }
  bool is_completed() override { return true; }

 private:
  std::string message_;
};

// Waits for the real collective, then corrupts its result once.
class CorruptingWork final : public Work {
 public:
  CorruptingWork(std::shared_ptr<Work> inner, at::Tensor output, double value)
      : inner_(std::move(inner)), output_(std::move(output)), value_(value) {}
  void wait() override {
    inner_->wait();
    if (!done_ && output_.defined() && output_.numel() > 0) {
      output_.view({-1}).narrow(0, 0, 1).fill_(value_);
    }
    done_ = true;
  }
  bool is_completed() override { return inner_->is_completed(); }

 private:
  std::shared_ptr<Work> inner_;
  at::Tensor output_;
  double value_;
  bool done_ = false;
};

}  // namespace

FaultComm::FaultComm(std::shared_ptr<Comm> inner, std::optional<FaultPlan> plan)
    : CommWrapper(std::move(inner), "fault") {
  if (plan) arm(*plan);
}

void FaultComm::arm(FaultPlan plan) {
  ZRT_CHECK(plan.collective >= 1, "FaultComm: collectives are counted from 1");
  plan_ = plan;
  counted_ = 0;
  fired_ = false;
}

std::shared_ptr<Work> FaultComm::intercept(const OpInfo& info, const Operands& operands,
                                           const Start& start) {
  if (!plan_ || (plan_->type && *plan_->type != info.type)) return start();
  const bool chosen = ++counted_ == plan_->collective &&
                      (plan_->rank < 0 || plan_->rank == inner_->rank());
  if (!chosen) return start();
  fired_ = true;
  const FaultPlan& plan = *plan_;
  switch (plan.kind) {
    case FaultPlan::Kind::kFail:
      return std::make_shared<FailedWork>(
          str("[rank ", inner_->rank(), "] injected failure of ", info.describe()));
    case FaultPlan::Kind::kDelay:
      std::this_thread::sleep_for(std::chrono::duration<double>(plan.delay_seconds));
      return start();
    case FaultPlan::Kind::kCorrupt:
      return std::make_shared<CorruptingWork>(start(), operands.output, plan.value);
  }
  return start();
}

}  // namespace zrt::comm
