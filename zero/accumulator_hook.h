// A post hook on a parameter's gradient accumulator: the autograd node that runs when the
// parameter's gradient for this backward is complete. The stage 0-2 reducer and the stage-3
// coordinator both start a reduction from it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include "core/error.h"

namespace zrt::zero {

// LibTorch 1.13 holds autograd nodes in std::shared_ptr, 2.x in c10::intrusive_ptr.
using AccumulatorRef =
    decltype(torch::autograd::impl::grad_accumulator(std::declval<const at::Tensor&>()));

// Installed by add_accumulator_hook, removed by remove(); holding it keeps the node alive.
struct AccumulatorHook {
  AccumulatorRef accumulator;
  uintptr_t key = 0;

  void remove() {
    if (accumulator) accumulator->del_post_hook(key);
  }
};

inline AccumulatorHook add_accumulator_hook(
    const at::Tensor& param, std::unique_ptr<torch::autograd::FunctionPostHook> hook,
    const std::string& name) {
  AccumulatorHook h;
  h.accumulator = torch::autograd::impl::grad_accumulator(param);
  ZRT_INTERNAL_ASSERT(h.accumulator != nullptr, "no grad accumulator for ", name);
  h.key = h.accumulator->add_post_hook(std::move(hook));
  return h;
}

}  // namespace zrt::zero
