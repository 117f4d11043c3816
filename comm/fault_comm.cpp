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
    : inner_(std::move(inner)) {
  ZRT_CHECK(inner_ != nullptr, "FaultComm: the wrapped communicator is null");
  if (plan) arm(*plan);
}

void FaultComm::arm(FaultPlan plan) {
  ZRT_CHECK(plan.collective >= 1, "FaultComm: collectives are counted from 1");
  plan_ = plan;
  counted_ = 0;
  fired_ = false;
}

std::shared_ptr<Work> FaultComm::apply(const OpInfo& info, const at::Tensor& output,
                                       const std::function<std::shared_ptr<Work>()>& start) {
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
      return std::make_shared<CorruptingWork>(start(), output, plan.value);
  }
  return start();
}

std::shared_ptr<Work> FaultComm::all_reduce_impl(const at::Tensor& t, const OpInfo& info) {
  return apply(info, t, [&] { return inner_->all_reduce_async(t, info.reduce_op); });
}

std::shared_ptr<Work> FaultComm::reduce_scatter_impl(const at::Tensor& out, const at::Tensor& in,
                                                     const OpInfo& info) {
  return apply(info, out, [&] { return inner_->reduce_scatter_async(out, in, info.reduce_op); });
}

std::shared_ptr<Work> FaultComm::all_gather_impl(const at::Tensor& out, const at::Tensor& in,
                                                 const OpInfo& info) {
  return apply(info, out, [&] { return inner_->all_gather_async(out, in); });
}

std::shared_ptr<Work> FaultComm::reduce_scatter_v_impl(const at::Tensor& out,
                                                       const at::Tensor& in, const OpInfo& info) {
  return apply(info, out, [&] {
    return inner_->reduce_scatter_v_async(out, in, info.counts, info.reduce_op);
  });
}

std::shared_ptr<Work> FaultComm::all_gather_v_impl(const at::Tensor& out, const at::Tensor& in,
                                                   const OpInfo& info) {
  return apply(info, out, [&] { return inner_->all_gather_v_async(out, in, info.counts); });
}

std::shared_ptr<Work> FaultComm::broadcast_impl(const at::Tensor& t, const OpInfo& info) {
  return apply(info, t, [&] { return inner_->broadcast_async(t, info.root); });
}

std::shared_ptr<Work> FaultComm::barrier_impl(const OpInfo& info) {
  return apply(info, at::Tensor(), [&] { return inner_->barrier_async(); });
}

}  // namespace zrt::comm
