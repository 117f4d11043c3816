#include "comm/comm_wrapper.h"

#include "core/error.h"

namespace zrt::comm {

CommWrapper::CommWrapper(std::shared_ptr<Comm> inner, std::string name)
    : inner_(std::move(inner)), name_(std::move(name)) {
  ZRT_CHECK(inner_ != nullptr, name_, ": the wrapped communicator is null");
}

std::string CommWrapper::backend_name() const { return name_ + "(" + inner_->backend_name() + ")"; }

std::shared_ptr<Work> CommWrapper::intercept(const OpInfo&, const Operands&, const Start& start) {
  return start();
}

std::shared_ptr<Work> CommWrapper::all_reduce_impl(const at::Tensor& t, const OpInfo& info) {
  return intercept(info, {t, t}, [&] { return inner_->all_reduce_async(t, info.reduce_op); });
}

std::shared_ptr<Work> CommWrapper::reduce_scatter_impl(const at::Tensor& out, const at::Tensor& in,
                                                       const OpInfo& info) {
  return intercept(info, {out, in},
                   [&] { return inner_->reduce_scatter_async(out, in, info.reduce_op); });
}

std::shared_ptr<Work> CommWrapper::all_gather_impl(const at::Tensor& out, const at::Tensor& in,
                                                   const OpInfo& info) {
  return intercept(info, {out, in}, [&] { return inner_->all_gather_async(out, in); });
}

std::shared_ptr<Work> CommWrapper::reduce_scatter_v_impl(const at::Tensor& out,
                                                         const at::Tensor& in, const OpInfo& info) {
  return intercept(info, {out, in}, [&] {
    return inner_->reduce_scatter_v_async(out, in, info.counts, info.reduce_op);
  });
}

std::shared_ptr<Work> CommWrapper::all_gather_v_impl(const at::Tensor& out, const at::Tensor& in,
                                                     const OpInfo& info) {
  return intercept(info, {out, in},
                   [&] { return inner_->all_gather_v_async(out, in, info.counts); });
}

std::shared_ptr<Work> CommWrapper::all_to_all_impl(const at::Tensor& out, const at::Tensor& in,
                                                   const OpInfo& info) {
  return intercept(info, {out, in}, [&] { return inner_->all_to_all_async(out, in); });
}

std::shared_ptr<Work> CommWrapper::broadcast_impl(const at::Tensor& t, const OpInfo& info) {
  return intercept(info, {t, t}, [&] { return inner_->broadcast_async(t, info.root); });
}

std::shared_ptr<Work> CommWrapper::barrier_impl(const OpInfo& info) {
  return intercept(info, {}, [&] { return inner_->barrier_async(); });
}

}  // namespace zrt::comm
