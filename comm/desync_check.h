// Desynchronisation detection (ZRT_DEBUG_COLLECTIVES=1 or "zrt": {"debug_collectives": true}),
// like PyTorch's TORCH_DISTRIBUTED_DEBUG=DETAIL: before every collective the ranks all-gather a
// fingerprint of it (op, reduce op, dtype, element count, root, per-rank counts, sequence number)
// through the wrapped communicator and compare. A mismatch raises CommError on every rank naming
// the ranks and both calls — instead of a hang or silently mixed data. Costs one small all-gather
// per collective.
#pragma once

#include <memory>

#include "comm/comm.h"

namespace zrt::comm {

class DesyncCheckComm final : public Comm {
 public:
  explicit DesyncCheckComm(std::shared_ptr<Comm> inner);

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  int local_rank() const override { return inner_->local_rank(); }
  int local_size() const override { return inner_->local_size(); }
  std::string backend_name() const override {
    return "desync_check(" + inner_->backend_name() + ")";
  }
  at::DeviceType device_type() const override { return inner_->device_type(); }
  double timeout_seconds() const override { return inner_->timeout_seconds(); }
  CommTimes times() const override { return inner_->times(); }
  const std::shared_ptr<Comm>& inner() const { return inner_; }

 protected:
  void before_collective(const OpInfo& info) override;
  std::shared_ptr<Work> all_reduce_impl(const at::Tensor& t, const OpInfo& info) override {
    return inner_->all_reduce_async(t, info.reduce_op);
  }
  std::shared_ptr<Work> reduce_scatter_impl(const at::Tensor& out, const at::Tensor& in,
                                            const OpInfo& info) override {
    return inner_->reduce_scatter_async(out, in, info.reduce_op);
  }
  std::shared_ptr<Work> all_gather_impl(const at::Tensor& out, const at::Tensor& in,
                                        const OpInfo&) override {
    return inner_->all_gather_async(out, in);
  }
  std::shared_ptr<Work> reduce_scatter_v_impl(const at::Tensor& out, const at::Tensor& in,
                                              const OpInfo& info) override {
    return inner_->reduce_scatter_v_async(out, in, info.counts, info.reduce_op);
  }
  std::shared_ptr<Work> all_gather_v_impl(const at::Tensor& out, const at::Tensor& in,
                                          const OpInfo& info) override {
    return inner_->all_gather_v_async(out, in, info.counts);
  }
  std::shared_ptr<Work> broadcast_impl(const at::Tensor& t, const OpInfo& info) override {
    return inner_->broadcast_async(t, info.root);
  }
  std::shared_ptr<Work> barrier_impl(const OpInfo&) override { return inner_->barrier_async(); }

 private:
  std::shared_ptr<Comm> inner_;
};

}  // namespace zrt::comm
