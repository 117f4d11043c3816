// The per-micro-step data path of the engine: backward with loss scaling and gradient
// reduction, and the boundary step (overflow check, norm, clipping, optimizer, gather, LR
// schedule, counters). DESIGN.md "One training step".
#include <algorithm>
#include <cmath>

#include "comm/counting_comm.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/logging.h"
#include "optim/clip.h"
#include "optim/loss_scaler.h"
#include "optim/optimizer.h"
#include "runtime/engine.h"
#include "runtime/fault_injection.h"
#include "runtime/model_states.h"
#include "runtime/step_report.h"
#include "sched/lr_scheduler.h"
#include "zero/activation_checkpoint.h"

namespace zrt {

bool Engine::is_gradient_accumulation_boundary() const {
  if (boundary_override_) return *boundary_override_;
  return (micro_steps_ - window_start_ + 1) % config_.batch.gradient_accumulation_steps == 0;
}

void Engine::set_gradient_accumulation_boundary(bool boundary) { boundary_override_ = boundary; }

void Engine::end_accumulation_window() {
  boundary_override_ = true;
  restart_window_ = true;
}

at::Tensor Engine::backward(const at::Tensor& loss) {
  see_memory_usage("Engine before backward");
  at::Tensor out = backward_impl(loss);
  see_memory_usage("Engine after backward");
  return out;
}

void Engine::step() {
  see_memory_usage("Engine before step");
  step_impl();
  see_memory_usage("Engine after step");
}

at::Tensor Engine::backward_impl(const at::Tensor& loss) {
  ZRT_CHECK(optimizer_ != nullptr,
            config_.zero.stage == 3
                ? "this engine is in ZeRO-3 inference mode (no optimizer): backward() and step() "
                  "are not available; add an \"optimizer\" section to train"
                : "backward() needs an optimizer: the config has no \"optimizer\" section and none "
                  "was given to initialize()");
  ZRT_CHECK(!backward_pending_,
            "backward() was called twice without step(): call engine.step() after every "
            "engine.backward(), once per micro-batch");
  ZRT_CHECK(loss.defined() && loss.numel() == 1, "backward() expects a scalar loss, got shape ",
            loss.defined() ? zrt::str(loss.sizes()) : std::string("<undefined>"));
  ZRT_CHECK(loss.requires_grad(),
            "the loss does not require grad (was the forward run under torch::NoGradGuard?)");
  at::Tensor scaled = loss.to(at::kFloat);
  last_loss_ = scaled.item<double>();
  loss_sum_ += *last_loss_;
  ++loss_count_;
  const double t0 = now_seconds();
  if (step_start_ < 0) step_start_ = t0;
  const int64_t gas = config_.batch.gradient_accumulation_steps;
  if (gas > 1) scaled = scaled / static_cast<double>(gas);
  backward_scale_ = model_dtype_ == at::kHalf ? loss_scaler_->cur_scale() : 1.0;
  if (backward_scale_ != 1.0) scaled = scaled * backward_scale_;
  runtime::maybe_kill_at_step(comm_->rank(), global_steps_ + 1);
  states_->begin_backward(is_gradient_accumulation_boundary());
  scaled.backward();
  const double t1 = now_seconds();
  states_->end_backward();
  timers_.bwd_inner += (t1 - t0) * 1e3;
  timers_.bwd_allreduce += (now_seconds() - t1) * 1e3;
  backward_pending_ = true;
  return loss.detach();
}

namespace {

// Whole-partition reductions make temporaries of the partition's size (a bool mask; an fp32 copy
// of a low-precision gradient, which linalg_vector_norm converts first): a large partition is
// reduced by chunks of this many elements, so that the step's memory stays what NVMe offload
// leaves (an fp32 gradient is reduced whole, without a copy, and its norm is unchanged).
constexpr int64_t kReduceChunk = int64_t{16} << 20;

template <typename Fn>
void for_each_chunk(const at::Tensor& t, Fn&& fn) {
  const at::Tensor flat = t.reshape({-1});
  for (int64_t off = 0; off < flat.numel(); off += kReduceChunk) {
    fn(flat.narrow(0, off, std::min(kReduceChunk, flat.numel() - off)));
  }
}

bool all_finite(const at::Tensor& grad) {
  bool finite = true;
  for_each_chunk(
      grad, [&](const at::Tensor& c) { finite = finite && at::isfinite(c).all().item<bool>(); });
  return finite;
}

double squared_norm(const at::Tensor& grad) {
  auto norm = [](const at::Tensor& t) {
    return at::linalg_vector_norm(t, 2, c10::nullopt, false, at::kFloat).item<double>();
  };
  if (grad.scalar_type() == at::kFloat || grad.numel() <= kReduceChunk) {
    const double n = norm(grad);
    return n * n;
  }
  double sum = 0.0;
  for_each_chunk(grad, [&](const at::Tensor& c) {
    const double n = norm(c);
    sum += n * n;
  });
  return sum;
}

}  // namespace

bool Engine::check_overflow() {
  bool local = false;
  for (const runtime::OptimTarget& t : states_->targets()) {
    if (t.grad.numel() > 0 && !all_finite(t.grad)) local = true;
  }
  at::Tensor flag = at::full({1}, local ? 1 : 0, at::kByte);
  comm_->all_reduce(flag, comm::ReduceOp::kMax);
  return flag.item<uint8_t>() != 0;
}

double Engine::global_norm_of_scaled_grads() {
  double local = 0.0;
  for (const runtime::OptimTarget& t : states_->targets()) {
    if (t.grad.numel() > 0) local += squared_norm(t.grad);
  }
  double total = local;
  if (!states_->grads_replicated()) {
    at::Tensor sum = at::full({1}, local, at::kDouble);
    comm_->all_reduce(sum, comm::ReduceOp::kSum);
    total = sum.item<double>();
  }
  return optim::sanitize_grad_norm(std::sqrt(total));
}

void Engine::step_impl() {
  ZRT_CHECK(optimizer_ != nullptr,
            "step() needs an optimizer (this engine was built for inference: the config has no "
            "\"optimizer\" section)");
  ZRT_CHECK(backward_pending_,
            "step() was called without backward(): call engine.backward(loss) first, once per "
            "micro-batch");
  backward_pending_ = false;
  const bool boundary = is_gradient_accumulation_boundary();
  boundary_override_.reset();
  if (!boundary) {
    ++micro_steps_;
    return;
  }
  const double step_t0 = now_seconds();
  // See Note [Loss scale of the step] below.
  const double scale = backward_scale_;
  if (model_dtype_ == at::kHalf) {
    const bool overflow = check_overflow();
    loss_scaler_->update_scale(overflow);
    if (overflow) {
      states_->zero_grad();
      ++skipped_steps_;
      finish_boundary_step(/*skipped=*/true);
      return;
    }
  }
  const double norm = global_norm_of_scaled_grads();
  global_grad_norm_ = norm < 0 ? -1.0 : norm / scale;
  // Note [Non-finite gradients]: fp16 skips the step (above, DeepSpeed's semantics). In fp32 and
  // bf16 DeepSpeed 0.19.8's ZeRO optimizers skip it too (bf16.check_grad_overflow, default true)
  // and training goes on; without fp16's loss scale to lower, the next step usually overflows
  // again. ZeroRT stops with an error naming the step instead: the norm is all-reduced, so every
  // rank raises it together and nothing is half-applied.
  if (norm < 0) states_->zero_grad();  // a caller that catches the error can continue
  ZRT_CHECK(norm >= 0, "non-finite gradients (NaN or inf) at global step ", global_steps_ + 1,
            " (this rank's last loss: ", last_loss_.value_or(NAN),
            "); the step was not applied. Check the data, lower the learning rate, or use "
            "bf16 / fp16 loss scaling");
  const double combined = optim::combined_scale(norm, scale, config_.gradient_clipping);
  states_->before_optimizer_step();
  auto& targets = states_->targets();
  for (size_t g = 0; g < targets.size(); ++g) optimizer_->set_grad(g, 0, targets[g].grad);
  optimizer_->step(1.0 / combined);
  states_->after_optimizer_step();
  states_->zero_grad();
  if (scheduler_) {
    scheduler_->step();
    apply_schedule();
  }
  timers_.step += (now_seconds() - step_t0) * 1e3;
  finish_boundary_step(/*skipped=*/false);
}

// Note [Loss scale of the step]
// The gradients were scaled by the loss scale in force during backward. update_scale() may
// double the scale before the optimizer runs (after scale_window clean steps); DeepSpeed then
// unscales with the new value, halving that step's gradients. ZeroRT unscales with the scale the
// gradients actually carry.

void Engine::finish_boundary_step(bool skipped) {
  (void)skipped;
  ++global_steps_;
  global_samples_ += config_.batch.train_batch_size;
  ++micro_steps_;
  if (restart_window_) window_start_ = micro_steps_;
  restart_window_ = false;
  const double now = now_seconds();
  step_ms_ = step_start_ >= 0 ? (now - step_start_) * 1e3 : 0;
  samples_per_second_ = step_ms_ > 0 ? config_.batch.train_batch_size / (step_ms_ / 1e3) : 0;
  step_start_ = -1;
  last_step_loss_ = loss_count_ > 0 ? std::optional<double>(loss_sum_ / loss_count_) : std::nullopt;
  loss_sum_ = 0;
  loss_count_ = 0;
  // activation_checkpointing.profile: the recomputes of this step (their forward time).
  if (config_.activation_checkpointing.profile) {
    timers_.recompute = recompute_stats().seconds * 1e3;
    reset_recompute_stats();
  }
  runtime::StepRecord r;
  r.global_steps = global_steps_;
  r.global_samples = global_samples_;
  r.skipped_steps = skipped_steps_;
  r.loss = last_step_loss_.value_or(NAN);
  r.last_loss = last_loss_;
  r.lr = get_lr();
  if (scheduler_ && scheduler_->get_momentum()) {
    r.momentum = ", mom=[";
    for (const auto& b : *scheduler_->get_momentum()) {
      r.momentum += str(r.momentum.size() > 6 ? ", " : "", "(", b.beta1, ", ", b.beta2, ")");
    }
    r.momentum += "]";
  }
  if (model_dtype_ == at::kHalf) r.loss_scale = loss_scaler_->cur_scale();
  r.times = timers_;
  r.samples_per_second = samples_per_second_;
  r.step_ms = step_ms_;
  reporter_->record(r);
  timers_ = runtime::StepTimes{};
}

}  // namespace zrt
