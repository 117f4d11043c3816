#include "zero/unit_grad_reducer.h"

#include <algorithm>

#include "core/error.h"
#include "zero/accumulator_hook.h"
#include "zero/unit_tags.h"

namespace zrt::zero {

struct UnitGradReducer::Pending {
  int unit = -1;
  at::Tensor send;
  at::Tensor out;
  std::vector<char> arrived;  // per trainable param of the unit
  std::shared_ptr<comm::Work> work;
  std::unique_ptr<QuantizedReduceScatter::InFlight> quantized;  // qgZ
};

namespace {

class GradReadyHook final : public torch::autograd::FunctionPostHook {
 public:
  GradReadyHook(UnitGradReducer* r, int param) : reducer_(r), param_(param) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list&) override {
    reducer_->on_grad_ready(param_);
    return outputs;
  }

 private:
  UnitGradReducer* reducer_;
  int param_;
};

}  // namespace

struct UnitGradReducer::HookHandle : AccumulatorHook {};

UnitGradReducer::UnitGradReducer(Stage3Layout& layout, std::shared_ptr<comm::Comm> comm,
                                 Options options, std::function<void(int unit)> unit_done)
    : layout_(layout),
      comm_(std::move(comm)),
      options_(options),
      unit_done_(std::move(unit_done)),
      contexts_(layout, "gradient reduction") {
  if (options_.quantized != nullptr && comm_->size() > 1) {
    qgz_ = std::make_unique<QuantizedReduceScatter>(*options_.quantized);
  } else if (comm_->size() > 1) {
    tag_bits_ = reduce_tag_bits(layout_.num_units(), comm_->size(), options_.comm_dtype);
    tag_elements_ = reduce_tag_elements(tag_bits_, options_.comm_dtype);
  }
  const size_t units = layout_.units().size();
  open_.resize(units);
  pending_grads_.assign(units, 0);
  grad_flats_.resize(layout_.num_groups());
  for (int g = 0; g < layout_.num_groups() && options_.gradients; ++g) {
    at::TensorOptions o = layout_.partition_flat(g).options().dtype(options_.accum_dtype);
    if (o.device().is_meta()) o = o.device(at::kCPU);  // swapped partitions: the CPU's
    grad_flats_[g] = at::zeros({layout_.group_partition_numel(g)}, o);
  }
  const auto& params = layout_.params();
  // Hooks even without gradients (inference): a loss.backward() through the model is an error.
  for (size_t i = 0; i < params.size(); ++i) {
    if (params[i].group < 0) continue;
    hooks_.push_back({add_accumulator_hook(
        params[i].param, std::make_unique<GradReadyHook>(this, static_cast<int>(i)),
        params[i].name)});
  }
}

UnitGradReducer::~UnitGradReducer() {
  for (HookHandle& h : hooks_) h.remove();
  try {
    for (auto& r : reduces_) (r->quantized ? r->quantized->work : r->work)->wait();
  } catch (...) {
    // The communicator reports its failure elsewhere.
  }
}

void UnitGradReducer::begin() {
  ZRT_CHECK(!in_backward_, "backward() was called while a previous backward is still running");
  in_backward_ = true;
  for (size_t u = 0; u < layout_.units().size(); ++u) {
    pending_grads_[u] = static_cast<int>(layout_.units()[u].trainable.size());
  }
  if (comm_->size() == 1) arrived_alone_.assign(layout_.params().size(), 0);
}

void UnitGradReducer::on_grad_ready(int i) {
  const Stage3Param& p = layout_.params()[i];
  ZRT_CHECK(options_.gradients, "the gradient of parameter '", p.name,
            "' was produced through a ZeRO-3 inference engine (no optimizer, no gradient "
            "partitions): run forwards under torch::NoGradGuard, or add an \"optimizer\" "
            "section to train");
  ZRT_CHECK(in_backward_, "the gradient of parameter '", p.name,
            "' was produced outside engine.backward(): call engine.backward(loss) instead of "
            "loss.backward()");
  at::NoGradGuard no_grad;
  const Stage3Unit& unit = layout_.units()[p.unit];
  if (comm_->size() == 1) {  // Note [Stage 3 on one rank]
    at::Tensor dest = grad_flats_[p.group].narrow(0, p.group_offset, p.numel);
    dest.add_(p.param.grad().reshape({-1}).to(options_.comm_dtype).to(dest.device()));
    p.param.mutable_grad() = at::Tensor();
    if (!arrived_alone_[i]) {
      arrived_alone_[i] = 1;
      if (--pending_grads_[p.unit] == 0) unit_done_(p.unit);
    }
    return;
  }
  std::unique_ptr<Pending>& r = open_[p.unit];
  if (!r) {
    r = std::make_unique<Pending>();
    r->unit = p.unit;
    r->send = at::zeros({chunk_stride(unit) * comm_->size()},
                        p.param.options().dtype(options_.comm_dtype).requires_grad(false));
    r->arrived.assign(unit.trainable.size(), 0);
  }
  int64_t offset = 0;
  size_t slot = 0;
  for (; slot < unit.trainable.size() && unit.trainable[slot] != i; ++slot) {
    offset += layout_.params()[unit.trainable[slot]].pn;
  }
  const at::Tensor grad = p.param.grad().reshape({-1});
  for (int rank = 0; rank < comm_->size(); ++rank) {
    const int64_t n = std::min(p.pn, p.numel - rank * p.pn);
    if (n <= 0) break;
    r->send.narrow(0, rank * chunk_stride(unit) + offset, n)
        .copy_(grad.narrow(0, rank * p.pn, n));
  }
  p.param.mutable_grad() = at::Tensor();
  if (!r->arrived[slot]) {
    r->arrived[slot] = 1;
    if (--pending_grads_[p.unit] == 0) {
      launch(p.unit);
      unit_done_(p.unit);
    }
  }
}

// Each chunk of the send buffer ends in the unit's tag bits (Note [Unit tags]).
void UnitGradReducer::launch(int unit) {
  const Stage3Unit& u = layout_.units()[unit];
  const int64_t stride = chunk_stride(u);
  std::unique_ptr<Pending> r = std::move(open_[unit]);
  if (!r) {  // no gradient arrived this micro-step: contribute zeros
    r = std::make_unique<Pending>();
    r->unit = unit;
    r->send =
        at::zeros({stride * comm_->size()},
                  layout_.params()[u.trainable.front()].param.options().dtype(options_.comm_dtype));
  }
  if (comm_->size() > 1) r->send.div_(comm_->size());
  write_reduce_tag(r->send, stride, u.reduce_partition, tag_bits_, comm_->size(), unit);
  r->out = at::empty({stride}, r->send.options());
  const comm::CollectiveContext context(contexts_[unit]);
  if (qgz_) {
    r->quantized = qgz_->start(r->send);
  } else {
    r->work = comm_->reduce_scatter_async(r->out, r->send);
  }
  stats_.reduce_scatters += 1;
  pending_grads_[unit] = 0;
  reducing_elements_ += u.reduce_partition * comm_->size();
  stats_.peak_reducing_elements = std::max(stats_.peak_reducing_elements, reducing_elements_);
  reduces_.push_back(std::move(r));
  // Note [Bounded gradient reduction]: every unit's reduction holds the unit's whole gradient
  // (its send buffer) until it is finished. Finishing them all only at the end of the backward
  // would hold the whole model's gradient at once; as DeepSpeed's reduce buckets do, the
  // gradients in flight stay within reduce_bucket_size, less the newest reduction, which keeps
  // overlapping the backward of the next unit.
  while (reduces_.size() > 1 && reducing_elements_ > options_.reduce_bucket_size) finish_oldest();
}

void UnitGradReducer::finish_oldest() {
  std::unique_ptr<Pending> r = std::move(reduces_.front());
  reduces_.pop_front();
  const Stage3Unit& u = layout_.units()[r->unit];
  reducing_elements_ -= u.reduce_partition * comm_->size();
  at::NoGradGuard no_grad;
  if (r->quantized) {
    qgz_->finish(*r->quantized, r->out);
  } else {
    r->work->wait();
  }
  check_reduce_tag(layout_, r->out, u.reduce_partition, tag_bits_, comm_->size(), comm_->rank(),
                   r->unit);
  int64_t offset = 0;
  for (int i : u.trainable) {
    const Stage3Param& p = layout_.params()[i];
    at::Tensor dest = grad_flats_[p.group].narrow(0, p.group_offset, p.pn);
    dest.add_(r->out.narrow(0, offset, p.pn).to(dest.device()));
    offset += p.pn;
  }
}

void UnitGradReducer::end() {
  ZRT_CHECK(in_backward_, "end_backward() without begin_backward()");
  // Units whose gradients did not all arrive (unused parameters, or the root unit) reduce now,
  // in unit order on every rank. With one rank nothing is left to reduce.
  for (size_t u = 0; u < layout_.units().size(); ++u) {
    if (pending_grads_[u] > 0 && comm_->size() > 1) launch(static_cast<int>(u));
  }
  while (!reduces_.empty()) finish_oldest();
  in_backward_ = false;
}

void UnitGradReducer::zero_grad() {
  for (at::Tensor& g : grad_flats_) {
    if (g.defined()) g.zero_();
  }
}

int64_t UnitGradReducer::grad_bytes() const {
  int64_t bytes = 0;
  for (const at::Tensor& g : grad_flats_) bytes += g.defined() ? g.nbytes() : 0;
  return bytes;
}

}  // namespace zrt::zero
