#include "zero/sequence_parallel.h"

#include <algorithm>
#include <cstdint>

#include "core/error.h"

namespace zrt {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// One all-to-all over `group` of `in` (K chunks along dim 0) into a new tensor of its shape.
at::Tensor exchange(comm::Comm& group, const at::Tensor& in) {
  at::Tensor out = at::empty_like(in);
  group.all_to_all(out, in);
  return out;
}

// (b, heads, t, d) → (b, heads/K, K·t, d): chunk r (heads [r·h, (r+1)·h)) goes to rank r; what
// arrives from rank q is its positions.
at::Tensor heads_to_positions(comm::Comm& group, const at::Tensor& x) {
  const int64_t k = group.size(), b = x.size(0), h = x.size(1) / k, t = x.size(2), d = x.size(3);
  const at::Tensor in = x.reshape({b, k, h, t, d}).permute({1, 0, 2, 3, 4}).contiguous();
  return exchange(group, in).permute({1, 2, 0, 3, 4}).reshape({b, h, k * t, d});
}

// The inverse: (b, h, K·t, d) → (b, K·h, t, d).
at::Tensor positions_to_heads(comm::Comm& group, const at::Tensor& y) {
  const int64_t k = group.size(), b = y.size(0), h = y.size(1), t = y.size(2) / k, d = y.size(3);
  const at::Tensor in = y.reshape({b, h, k, t, d}).permute({2, 0, 1, 3, 4}).contiguous();
  return exchange(group, in).permute({1, 0, 2, 3, 4}).reshape({b, k * h, t, d});
}

// One exchange as an autograd function: heads to positions (`kGather`) or back; its backward is
// the other direction. `group` is the communicator's address (Function arguments are values).
template <bool kGather>
struct Exchange : torch::autograd::Function<Exchange<kGather>> {
  static at::Tensor run(int64_t group, const at::Tensor& x, bool gather) {
    auto& comm = *reinterpret_cast<comm::Comm*>(group);
    return gather ? heads_to_positions(comm, x) : positions_to_heads(comm, x);
  }
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t group) {
    ctx->saved_data["group"] = group;
    return run(group, x, kGather);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {run(ctx->saved_data["group"].toInt(), grads[0], !kGather), at::Tensor()};
  }
};

int64_t address(comm::Comm* group) { return static_cast<int64_t>(reinterpret_cast<intptr_t>(group)); }

// `x` (b, T) extended to (b, T + pad) along dim 1 with `value`, or continuing from each row's
// last value (+1 per position) when `count_on`.
at::Tensor pad_end(const at::Tensor& x, int64_t pad, int64_t value, bool count_on) {
  if (pad == 0) return x;
  at::Tensor tail;
  if (count_on) {
    tail = x.narrow(1, x.size(1) - 1, 1) + torch::arange(1, pad + 1, x.options()).unsqueeze(0);
  } else {
    tail = torch::full({x.size(0), pad}, value, x.options());
  }
  return torch::cat({x, tail}, 1);
}

}  // namespace

SequenceParallel::SequenceParallel(comm::Comm& world, int size) : size_(size) {
  ZRT_CHECK_AS(ConfigError, size >= 1 && world.size() % size == 0, "sequence_parallel_size ",
               size, " must be at least 1 and divide the job's ", world.size(), " ranks");
  rank_ = world.rank() % size;
  data_parallel_size_ = world.size() / size;
  data_parallel_rank_ = world.rank() / size;
  if (size > 1) group_ = world.split(data_parallel_rank_, world.rank());
}

at::Tensor SequenceParallel::gather_sequence(const at::Tensor& x) const {
  if (size_ == 1) return x;
  ZRT_CHECK(x.dim() == 4 && x.size(1) % size_ == 0, "sequence parallelism: ", x.size(1),
            " heads (of ", x.sizes(), ") do not divide over ", size_, " ranks");
  return Exchange<true>::apply(x, address(group_.get()));
}

at::Tensor SequenceParallel::scatter_sequence(const at::Tensor& x) const {
  if (size_ == 1) return x;
  ZRT_CHECK(x.dim() == 4 && x.size(2) % size_ == 0, "sequence parallelism: ", x.size(2),
            " positions (of ", x.sizes(), ") do not divide over ", size_, " ranks");
  return Exchange<false>::apply(x, address(group_.get()));
}

at::Tensor SequenceParallel::all_positions(const at::Tensor& x) const {
  if (size_ == 1) return x;
  const at::Tensor in = x.contiguous();
  at::Tensor out = at::empty({size_, x.size(0), x.size(1)}, x.options());
  group_->all_gather(out, in);
  return out.permute({1, 0, 2}).reshape({x.size(0), size_ * x.size(1)});
}

SequenceParallel::Shard SequenceParallel::shard_causal_lm(const at::Tensor& ids,
                                                          const at::Tensor& position_ids,
                                                          const at::Tensor& labels) const {
  ZRT_CHECK(ids.dim() == 2 && labels.sizes() == ids.sizes(),
            "shard_causal_lm: ids (b, T) and labels of the same shape, got ", ids.sizes(), " and ",
            labels.sizes());
  const int64_t b = ids.size(0), n = ids.size(1);
  at::Tensor positions = position_ids.defined()
                             ? position_ids
                             : torch::arange(n, ids.options().dtype(torch::kLong)).expand({b, n});
  ZRT_CHECK(positions.sizes() == ids.sizes(), "shard_causal_lm: position_ids ",
            positions.sizes(), " for ids ", ids.sizes());
  at::Tensor shifted = torch::cat(
      {labels.narrow(1, 1, n - 1), torch::full({b, 1}, -100, labels.options())}, 1);
  Shard s;
  s.label_count = shifted.ne(-100).sum().item<int64_t>();
  const int64_t t = (n + size_ - 1) / size_, pad = t * size_ - n;
  s.ids = pad_end(ids, pad, 0, false).narrow(1, rank_ * t, t);
  s.position_ids = pad_end(positions.to(torch::kLong), pad, 0, true).narrow(1, rank_ * t, t);
  s.labels = pad_end(shifted, pad, -100, false).narrow(1, rank_ * t, t);
  return s;
}

at::Tensor SequenceParallel::loss(const at::Tensor& slice_sum, int64_t label_count) const {
  return slice_sum * (static_cast<double>(size_) / static_cast<double>(std::max<int64_t>(label_count, 1)));
}

}  // namespace zrt
