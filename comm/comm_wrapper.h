// CommWrapper: the base of the communicator decorators (byte counting, fault injection, desync
// checks). It forwards everything to the wrapped communicator; a decorator overrides intercept(),
// which sees every collective once, after validation, with a function that issues it on the
// wrapped communicator.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "comm/comm.h"

namespace zrt::comm {

// The tensors of one collective: `output` is what the collective writes (the all_reduce and
// broadcast tensor itself), `input` what it reads (the same tensor for all_reduce and broadcast);
// both undefined for a barrier.
struct Operands {
  at::Tensor output;
  at::Tensor input;
};

class CommWrapper : public Comm {
 public:
  // `name` prefixes the backend name: "counting(mpi)".
  CommWrapper(std::shared_ptr<Comm> inner, std::string name);

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  int local_rank() const override { return inner_->local_rank(); }
  int local_size() const override { return inner_->local_size(); }
  std::string backend_name() const override;
  at::DeviceType device_type() const override { return inner_->device_type(); }
  double timeout_seconds() const override { return inner_->timeout_seconds(); }
  CommTimes times() const override { return inner_->times(); }
  const std::shared_ptr<Comm>& inner() const { return inner_; }

 protected:
  using Start = std::function<std::shared_ptr<Work>()>;
  // Called for every collective; `start` issues it on the wrapped communicator. The default
  // returns start().
  virtual std::shared_ptr<Work> intercept(const OpInfo& info, const Operands& operands,
                                          const Start& start);

  std::shared_ptr<Work> all_reduce_impl(const at::Tensor& t, const OpInfo& info) final;
  std::shared_ptr<Work> reduce_scatter_impl(const at::Tensor& out, const at::Tensor& in,
                                            const OpInfo& info) final;
  std::shared_ptr<Work> all_gather_impl(const at::Tensor& out, const at::Tensor& in,
                                        const OpInfo& info) final;
  std::shared_ptr<Work> reduce_scatter_v_impl(const at::Tensor& out, const at::Tensor& in,
                                              const OpInfo& info) final;
  std::shared_ptr<Work> all_gather_v_impl(const at::Tensor& out, const at::Tensor& in,
                                          const OpInfo& info) final;
  std::shared_ptr<Work> all_to_all_impl(const at::Tensor& out, const at::Tensor& in,
                                        const OpInfo& info) final;
  std::shared_ptr<Work> broadcast_impl(const at::Tensor& t, const OpInfo& info) final;
  // A decorator's sub-communicators are the wrapped communicator's, undecorated.
  std::shared_ptr<Comm> split_impl(int color, int key) override {
    return inner_->split(color, key);
  }
  std::shared_ptr<Comm> split_by_host_impl() override { return inner_->split_by_host(); }
  std::shared_ptr<Work> barrier_impl(const OpInfo& info) final;

  std::shared_ptr<Comm> inner_;

 private:
  std::string name_;
};

}  // namespace zrt::comm
