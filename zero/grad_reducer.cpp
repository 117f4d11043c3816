#include "zero/grad_reducer.h"

#include <algorithm>
#include <optional>

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include "comm/blocking_call.h"
#include "core/error.h"
#include "zero/accumulator_hook.h"
#include "zero/scalar_type.h"

namespace zrt::zero {

// Note [Gradient modes]
// kViews      stages 0/1 when the accumulation dtype is the parameter dtype: param.grad is a view
//             of the flat gradient buffer and autograd accumulates into it in place across
//             micro-steps (AccumulateGrad adds in place into an existing grad). Buckets are slices
//             of that buffer, reduced in place at the boundary.
// kAccumulate stages 0/1 with a wider accumulation dtype (e.g. bf16 params, fp32 accumulation):
//             autograd produces a fresh param.grad; the hook adds it into the fp32 flat buffer and
//             drops it.
// kBucketed   stage 2: the hook copies the fresh param.grad (cast to the communication dtype) into
//             its bucket's buffer and drops it; full gradients never coexist in memory. Buckets
//             are reduced every micro-step and the rank's piece is added to its partition.
// Buckets are contiguous ranges of a group's flat index space built from the last parameter
// backwards (roughly the order autograd produces gradients) and are always launched in index
// order, so every rank issues the same collectives in the same order whatever order its hooks
// fire in.

struct GradReducer::Bucket {
  int group = 0;
  int64_t begin = 0;
  int64_t end = 0;
  std::vector<int> params;  // parameter indices in the group
  std::vector<char> arrived;
  int pending = 0;
  bool launched = false;
  at::Tensor pool_buffer;  // kBucketed: the pool buffer this bucket holds
  at::Tensor buffer;       // kBucketed: its first end − begin elements
  at::Tensor send;         // handed to the collective
  at::Tensor out;          // reduce_scatter_v output
  at::Tensor dest;         // where the reduced values land
  std::shared_ptr<comm::Work> work;
};

namespace {

class ReadyHook final : public torch::autograd::FunctionPostHook {
 public:
  ReadyHook(GradReducer* reducer, int group, int param)
      : reducer_(reducer), group_(group), param_(param) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list&) override {
    reducer_->on_grad_ready(group_, param_);
    return outputs;
  }

 private:
  GradReducer* reducer_;
  int group_;
  int param_;
};

}  // namespace

struct GradReducer::HookHandle : AccumulatorHook {};

ReducerOptions ReducerOptions::from(const ZeroOptions& zero, const GradientOptions& gradients) {
  ReducerOptions o;
  o.policy = StagePolicy::from_stage(zero.stage);
  o.bucket_elements = std::max<int64_t>(1, zero.reduce_bucket_size);
  o.overlap = zero.effective_overlap_comm();
  o.comm_dtype = scalar_type_of(gradients.comm_dtype);
  o.accum_dtype = scalar_type_of(gradients.accum_dtype);
  o.prescale = gradients.prescale;
  o.predivide_factor = gradients.predivide_factor;
  return o;
}

GradReducer::GradReducer(std::vector<FlatGroup>& groups, std::shared_ptr<comm::Comm> comm,
                         ReducerOptions options)
    : groups_(groups), comm_(std::move(comm)), options_(options) {
  ZRT_INTERNAL_ASSERT(options_.bucket_elements > 0);
  if (options_.policy.shard_grads) {
    mode_ = Mode::kBucketed;
  } else {
    mode_ = groups_.empty() || groups_.front().dtype() == options_.accum_dtype ? Mode::kViews
                                                                               : Mode::kAccumulate;
  }
  const int rank = comm_->rank();
  param_slots_.resize(groups_.size());
  for (size_t g = 0; g < groups_.size(); ++g) {
    FlatGroup& group = groups_[g];
    const auto opts = at::TensorOptions().dtype(options_.accum_dtype).device(group.device());
    if (mode_ != Mode::kBucketed) {
      flat_grads_.push_back(at::zeros({group.padded_numel()}, opts));
    } else {
      flat_grads_.emplace_back();
    }
    if (mode_ == Mode::kBucketed) {
      partitions_.push_back(at::zeros({group.partition().partition_size}, opts));
    } else if (options_.policy.shard_optimizer) {
      // Stage 1 reduces in place: the partition is the flat gradient's own piece, so no extra
      // memory (model states 4Ψ + 12Ψ/N in mixed precision).
      const ShardInfo mine = group.partition().partition(rank);
      partitions_.push_back(flat_grads_[g].narrow(0, mine.offset, mine.size));
    } else {
      partitions_.push_back(flat_grads_[g]);
    }
    build_buckets(static_cast<int>(g));
    const auto& params = group.params();
    for (size_t p = 0; p < params.size(); ++p) {
      const FlatParam& fp = params[p];
      if (mode_ == Mode::kViews) {
        fp.param.mutable_grad() = flat_grads_[g].narrow(0, fp.offset, fp.numel).view(fp.shape);
      }
      hooks_.push_back({add_accumulator_hook(
          fp.param, std::make_unique<ReadyHook>(this, static_cast<int>(g), static_cast<int>(p)),
          fp.name)});
    }
  }
  stats_.bucket_count = static_cast<int64_t>(buckets_.size());
}

GradReducer::~GradReducer() {
  for (HookHandle& h : hooks_) h.remove();
  try {
    while (!in_flight_.empty()) finish_oldest();
  } catch (...) {
    // Destruction during error handling: the communicator reports the failure elsewhere.
  }
}

void GradReducer::build_buckets(int g) {
  const FlatGroup& group = groups_[g];
  const auto& params = group.params();
  int p = static_cast<int>(params.size()) - 1;
  bool first = true;
  while (p >= 0) {
    auto b = std::make_unique<Bucket>();
    b->group = g;
    int64_t size = 0;
    const int hi = p;
    // At least one parameter per bucket; a parameter larger than the bucket is reduced alone.
    while (p >= 0 && (b->params.empty() || size + params[p].numel <= options_.bucket_elements)) {
      size += params[p].numel;
      b->params.push_back(p);
      --p;
    }
    b->begin = params[p + 1].offset;
    b->end = first ? group.padded_numel() : params[hi].offset + params[hi].numel;
    first = false;
    b->arrived.assign(b->params.size(), 0);
    const int bucket_index = static_cast<int>(buckets_.size());
    for (size_t slot = 0; slot < b->params.size(); ++slot) {
      if (param_slots_[g].size() < params.size()) param_slots_[g].resize(params.size());
      param_slots_[g][b->params[slot]] = {bucket_index, static_cast<int>(slot)};
    }
    buckets_.push_back(std::move(b));
  }
}

void GradReducer::begin_backward(bool boundary) {
  ZRT_CHECK(!in_backward_,
            "backward() was called while a previous backward is still being reduced");
  in_backward_ = true;
  reducing_ = options_.policy.shard_grads || boundary;
  for (auto& b : buckets_) {
    b->pending = static_cast<int>(b->params.size());
    std::fill(b->arrived.begin(), b->arrived.end(), 0);
    b->launched = false;
  }
  next_launch_ = 0;
}

void GradReducer::on_grad_ready(int g, int p) {
  const FlatParam& fp = groups_[g].params()[p];
  ZRT_CHECK(in_backward_, "the gradient of parameter '", fp.name,
            "' was produced outside engine.backward(): call engine.backward(loss) instead of "
            "loss.backward()");
  at::NoGradGuard no_grad;
  auto [b, slot] = param_slots_[g][p];
  Bucket& bucket = *buckets_[b];
  at::Tensor grad = fp.param.grad();
  switch (mode_) {
    case Mode::kViews: {
      at::Tensor view = flat_grads_[g].narrow(0, fp.offset, fp.numel);
      if (!grad.defined() || grad.data_ptr() != view.data_ptr()) {
        // Someone replaced param.grad (e.g. model->zero_grad()): fold it back into the buffer.
        if (grad.defined()) view.copy_(grad.reshape(-1));
        fp.param.mutable_grad() = view.view(fp.shape);
      }
      break;
    }
    case Mode::kAccumulate:
      flat_grads_[g].narrow(0, fp.offset, fp.numel).add_(grad.reshape(-1));
      fp.param.mutable_grad() = at::Tensor();
      break;
    case Mode::kBucketed:
      if (!bucket.buffer.defined()) {
        bucket.pool_buffer = acquire_buffer(bucket.end - bucket.begin);
        bucket.buffer = bucket.pool_buffer.narrow(0, 0, bucket.end - bucket.begin);
      }
      bucket.buffer.narrow(0, fp.offset - bucket.begin, fp.numel).copy_(grad.reshape(-1));
      fp.param.mutable_grad() = at::Tensor();
      break;
  }
  if (!reducing_ || bucket.arrived[slot]) return;
  bucket.arrived[slot] = 1;
  if (--bucket.pending == 0) launch_ready_in_order();
}

void GradReducer::launch_ready_in_order() {
  while (next_launch_ < buckets_.size() && buckets_[next_launch_]->pending == 0) {
    launch(*buckets_[next_launch_]);
    ++next_launch_;
  }
}

void GradReducer::pre_scale(at::Tensor& t) const {
  const int w = comm_->size();
  // Stages 1/2 divide by W before reducing, as DeepSpeed's reduce-scatter path; stage 0
  // post-scales unless prescale_gradients (spec §5.6).
  if (options_.prescale || options_.policy.shard_optimizer) {
    if (w != 1) t.div_(w);
  } else if (options_.predivide_factor != 1.0) {
    t.mul_(1.0 / options_.predivide_factor);
  }
}

void GradReducer::post_scale(at::Tensor& t) const {
  if (options_.prescale || options_.policy.shard_optimizer) return;
  const double w = comm_->size();
  if (options_.predivide_factor != w) t.mul_(options_.predivide_factor / w);
}

at::Tensor GradReducer::acquire_buffer(int64_t elements) {
  for (;;) {
    for (size_t i = 0; i < free_buffers_.size(); ++i) {
      if (free_buffers_[i].numel() >= elements) {
        at::Tensor buf = free_buffers_[i];
        free_buffers_.erase(free_buffers_.begin() + static_cast<std::ptrdiff_t>(i));
        return buf;
      }
    }
    if (in_flight_.empty()) break;
    finish_oldest();  // frees a buffer once its reduction completed
  }
  int64_t largest = 0;
  for (const auto& b : buckets_) largest = std::max(largest, b->end - b->begin);
  ++stats_.max_pool_buffers;
  const FlatGroup& g0 = groups_.front();
  return at::empty({largest}, at::TensorOptions().dtype(options_.comm_dtype).device(g0.device()));
}

void GradReducer::launch(Bucket& b) {
  at::NoGradGuard no_grad;
  const FlatGroup& group = groups_[b.group];
  const int64_t len = b.end - b.begin;
  at::Tensor data;
  if (mode_ == Mode::kBucketed) {
    if (!b.buffer.defined()) {
      b.pool_buffer = acquire_buffer(len);
      b.buffer = b.pool_buffer.narrow(0, 0, len);
    }
    // Parameters without a gradient this micro-step (unused) and the padding count as zeros.
    const auto& params = group.params();
    for (size_t slot = 0; slot < b.params.size(); ++slot) {
      if (b.arrived[slot] && reducing_) continue;
      const FlatParam& fp = params[b.params[slot]];
      if (!b.arrived[slot]) b.buffer.narrow(0, fp.offset - b.begin, fp.numel).zero_();
    }
    const int64_t used_end = params[b.params.front()].offset + params[b.params.front()].numel;
    if (b.end > used_end) b.buffer.narrow(0, used_end - b.begin, b.end - used_end).zero_();
    b.send = b.buffer;
  } else {
    data = flat_grads_[b.group].narrow(0, b.begin, len);
    b.send = data.scalar_type() == options_.comm_dtype ? data : data.to(options_.comm_dtype);
  }
  pre_scale(b.send);
  // Without overlap the bucket is waited for at once (finish_oldest below): the backend may run
  // it on this thread (Note [The caller runs what it waits for], comm/op_queue.h).
  std::optional<comm::BlockingCall> waits_at_once;
  if (!options_.overlap && in_flight_.empty()) waits_at_once.emplace();
  if (!options_.policy.shard_optimizer) {
    b.dest = data;
    b.work = comm_->all_reduce_async(b.send);
  } else {
    const int me = comm_->rank();
    const FlatPartition& part = group.partition();
    const ShardInfo piece = intersect(part.partition(me), ShardInfo{b.begin, len});
    b.dest = partitions_[b.group].narrow(
        0, piece.size > 0 ? piece.offset - part.partition(me).offset : 0, piece.size);
    if (mode_ == Mode::kBucketed) {
      // In place: this rank's piece of the pool buffer (no allocation per bucket and step).
      b.out = piece.size > 0 ? b.send.narrow(0, piece.offset - b.begin, piece.size)
                             : at::empty({0}, b.send.options());
    } else {
      const bool direct = b.dest.scalar_type() == options_.comm_dtype;
      b.out = direct ? b.dest : at::empty({piece.size}, b.send.options());
    }
    b.work = comm_->reduce_scatter_v_async(b.out, b.send, group.counts_by_rank(b.begin, b.end));
  }
  b.launched = true;
  in_flight_.push_back(&b);
  ++stats_.buckets_launched;
  if (!options_.overlap) finish_oldest();
}

void GradReducer::finish(Bucket& b) {
  at::NoGradGuard no_grad;
  b.work->wait();
  if (!options_.policy.shard_optimizer) {
    post_scale(b.send);
    if (!b.send.is_same(b.dest)) b.dest.copy_(b.send);
  } else {
    post_scale(b.out);
    if (mode_ == Mode::kBucketed) {
      if (b.dest.numel() > 0) b.dest.add_(b.out);
    } else if (!b.out.is_same(b.dest)) {
      b.dest.copy_(b.out);
    }
  }
  if (b.pool_buffer.defined()) {
    free_buffers_.push_back(b.pool_buffer);
    b.pool_buffer = b.buffer = at::Tensor();
  }
  b.send = b.out = b.dest = at::Tensor();
  b.work.reset();
}

void GradReducer::finish_oldest() {
  Bucket* b = in_flight_.front();
  in_flight_.pop_front();
  finish(*b);
}

void GradReducer::end_backward() {
  ZRT_CHECK(in_backward_, "end_backward() without begin_backward()");
  if (reducing_) {
    // Buckets with parameters that received no gradient are reduced now, still in order.
    while (next_launch_ < buckets_.size()) {
      launch(*buckets_[next_launch_]);
      ++next_launch_;
    }
  } else if (mode_ == Mode::kBucketed) {
    ZRT_INTERNAL_ASSERT(false, "stage 2 reduces every micro-step");
  }
  while (!in_flight_.empty()) finish_oldest();
  in_backward_ = false;
}

const at::Tensor& GradReducer::grad_partition(int group) const { return partitions_.at(group); }

void GradReducer::zero_grad() {
  at::NoGradGuard no_grad;
  for (size_t g = 0; g < groups_.size(); ++g) {
    if (flat_grads_[g].defined()) flat_grads_[g].zero_();
    if (mode_ == Mode::kBucketed) partitions_[g].zero_();
    if (mode_ == Mode::kViews) {
      for (const FlatParam& fp : groups_[g].params()) {
        at::Tensor view = flat_grads_[g].narrow(0, fp.offset, fp.numel);
        if (!fp.param.grad().defined() || fp.param.grad().data_ptr() != view.data_ptr()) {
          fp.param.mutable_grad() = view.view(fp.shape);
        }
      }
    }
  }
}

int64_t GradReducer::grad_bytes() const {
  int64_t bytes = 0;
  for (size_t g = 0; g < groups_.size(); ++g) {
    if (flat_grads_[g].defined()) bytes += flat_grads_[g].nbytes();
    if (mode_ == Mode::kBucketed) bytes += partitions_[g].nbytes();
  }
  for (const auto& b : free_buffers_) bytes += b.nbytes();
  for (const auto& b : buckets_) {
    if (b->pool_buffer.defined()) bytes += b->pool_buffer.nbytes();
  }
  return bytes;
}

}  // namespace zrt::zero
