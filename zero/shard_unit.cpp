#include "zero/shard_unit.h"

#include <torch/csrc/autograd/custom_function.h>

#include "zero/stage3_layout.h"

namespace zrt::zero {
namespace {

// Identity in forward; in backward, asks the coordinator to gather the unit's parameters before
// the unit's own backward nodes run (they need the parameter data saved in forward).
struct PreBackwardGather : public torch::autograd::Function<PreBackwardGather> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& output,
                            int64_t hooks, int64_t unit) {
    ctx->saved_data["hooks"] = hooks;
    ctx->saved_data["unit"] = unit;
    // A detached alias, not an autograd view, so that later in-place ops on it are allowed.
    return output.detach();
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto* hooks = reinterpret_cast<UnitHooks*>(ctx->saved_data["hooks"].toInt());
    hooks->pre_backward(static_cast<int>(ctx->saved_data["unit"].toInt()));
    return {grads[0], at::Tensor(), at::Tensor()};
  }
};

// Identity in forward; in backward, tells the coordinator that one run() use of the unit has
// had its backward (the gradient of its input is complete), so its parameters may go.
struct PostBackwardRelease : public torch::autograd::Function<PostBackwardRelease> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& input,
                            int64_t hooks, int64_t unit) {
    ctx->saved_data["hooks"] = hooks;
    ctx->saved_data["unit"] = unit;
    return input.detach();
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto* hooks = reinterpret_cast<UnitHooks*>(ctx->saved_data["hooks"].toInt());
    hooks->post_backward(static_cast<int>(ctx->saved_data["unit"].toInt()));
    return {grads[0], at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor mark_unit_input(const at::Tensor& input, UnitHooks* hooks, int unit) {
  if (!input.defined() || !input.requires_grad() || !at::GradMode::is_enabled()) return input;
  return PostBackwardRelease::apply(input, reinterpret_cast<int64_t>(hooks),
                                    static_cast<int64_t>(unit));
}

at::Tensor mark_unit_output(const at::Tensor& output, UnitHooks* hooks, int unit) {
  if (!output.defined() || !output.requires_grad() || !at::GradMode::is_enabled()) return output;
  return PreBackwardGather::apply(output, reinterpret_cast<int64_t>(hooks),
                                  static_cast<int64_t>(unit));
}

}  // namespace zrt::zero

namespace zrt {

void defer_parameters(torch::nn::Module& module) {
  zero::keep_large_blocks_mmapped();  // Note [Returning released memory] (zero/stage3_layout.h)
  at::NoGradGuard no_grad;
  for (const auto& p : module.named_parameters()) {
    // A new tensor of the parameter's shape whose storage has no bytes (nothing is allocated),
    // swapped in as the parameter's data: the old storage is freed with its last user.
    at::Tensor shell = at::empty({0}, p.value().options());
    shell.unsafeGetTensorImpl()->set_sizes_contiguous(p.value().sizes());
    p.value().set_data(shell);
    zero::release_storage(p.value());
  }
}

}  // namespace zrt
