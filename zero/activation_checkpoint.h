// Activation checkpointing for LibTorch: zrt::checkpoint runs a function without keeping its
// autograd graph, saves only its inputs, and in backward runs it again with gradients on and
// back-propagates through the recomputed graph (Note [Activation checkpointing]). Memory for
// compute: a region's activations are held from its recompute to the end of its backward only.
//
//   at::Tensor y = zrt::checkpoint([&](const at::Tensor& x) { return block->forward(x); }, x);
//
// Model authors mark regions with one line instead: a zrt::ShardUnit<Block> checkpoints its
// forward after set_checkpointing(true), and zrt::enable_activation_checkpointing(model) does so
// for every unit of a model (HF's gradient_checkpointing_enable()).
#pragma once

#include <cstdint>
#include <functional>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <ATen/ATen.h>

#include "zero/options.h"

namespace zrt {

using CheckpointFn = std::function<std::vector<at::Tensor>(const std::vector<at::Tensor>&)>;

// Runs fn(inputs) as a checkpointed region and returns its outputs (differentiable). `fn` runs
// again in backward, so what it captures by reference must still exist then, and it must
// compute the same function of its inputs (and of the parameters it reads) when run again: the
// RNG state (CPU, and the current CUDA device's when an input is on CUDA) is restored for the
// recompute, so dropout draws the same masks. Inputs need not require grad; outputs may be used
// any number of times; gradients reach the parameters fn reads as without checkpointing.
// Outside grad mode it is fn(inputs).
// `params`: the parameters fn reads (for a module: its parameters()); their gradients then join
// those of their other uses in the outer backward, as without checkpointing. Parameters not named
// get theirs when the region's backward runs: right for a parameter used only inside the region,
// a separate accumulation for one also used elsewhere.
std::vector<at::Tensor> checkpoint(const CheckpointFn& fn, const std::vector<at::Tensor>& inputs,
                                   const std::vector<at::Tensor>& params = {});

// The same for a function of tensors returning a tensor or a tuple of tensors.
template <typename F, typename... Ts,
          typename = std::enable_if_t<(std::is_convertible_v<Ts, at::Tensor> && ...)>>
auto checkpoint(F&& fn, const Ts&... inputs);

// Process-wide settings of checkpointed regions (the engine sets them from its config's
// "activation_checkpointing" section), and what was recomputed since the last reset.
void set_activation_checkpointing(const zero::ActivationCheckpointOptions& options);
zero::ActivationCheckpointOptions activation_checkpointing();
struct RecomputeStats {
  int64_t recomputes = 0;  // regions run again in backward
  double seconds = 0;      // their forward time (with profile on; else 0)
};
RecomputeStats recompute_stats();
void reset_recompute_stats();

namespace detail {

inline void flatten_into(std::vector<at::Tensor>& out, const at::Tensor& t) { out.push_back(t); }
template <typename... Ts>
void flatten_into(std::vector<at::Tensor>& out, const std::tuple<Ts...>& t) {
  std::apply([&](const auto&... xs) { (flatten_into(out, xs), ...); }, t);
}
inline void flatten_into(std::vector<at::Tensor>& out, const std::vector<at::Tensor>& ts) {
  out.insert(out.end(), ts.begin(), ts.end());
}

// Rebuilds a value of type T from flattened tensors, in order.
template <typename T>
struct Unflatten;
template <>
struct Unflatten<at::Tensor> {
  static at::Tensor from(const std::vector<at::Tensor>& v, size_t& k) { return v.at(k++); }
};
template <typename... Ts>
struct Unflatten<std::tuple<Ts...>> {
  static std::tuple<Ts...> from(const std::vector<at::Tensor>& v, size_t& k) {
    return std::tuple<Ts...>{Unflatten<Ts>::from(v, k)...};  // braced: left to right
  }
};

// An argument of a checkpointed call: a tensor is replaced by the next recomputed input, any
// other value passes as it was.
template <typename T>
decltype(auto) with_input(const T& value, const std::vector<at::Tensor>&, size_t&) {
  return value;
}
inline at::Tensor with_input(const at::Tensor& /*value*/, const std::vector<at::Tensor>& xs,
                             size_t& k) {
  return xs.at(k++);
}
// What a checkpointed call keeps of an argument until its backward: not the tensors (the node
// saves its inputs itself, on the CPU with cpu_checkpointing), every other value as it was.
template <typename T>
T kept(const T& value) {
  return value;
}
inline at::Tensor kept(const at::Tensor&) { return at::Tensor(); }
template <typename T>
void collect_input(std::vector<at::Tensor>& out, const T&) {}
inline void collect_input(std::vector<at::Tensor>& out, const at::Tensor& t) { out.push_back(t); }

// call(args...) as a checkpointed region whose inputs are the tensor arguments; the other
// arguments are captured by value.
template <typename Call, typename... Args>
auto checkpoint_call(const std::vector<at::Tensor>& params, Call call, const Args&... args) {
  using Out = std::decay_t<decltype(call(args...))>;
  std::vector<at::Tensor> inputs;
  (collect_input(inputs, args), ...);
  auto stored = std::make_tuple(kept(args)...);
  CheckpointFn fn = [call, stored](const std::vector<at::Tensor>& xs) {
    size_t k = 0;
    auto out = std::apply(
        [&](const auto&... a) {
          // Braced initialisation evaluates left to right, so tensors are taken in order.
          return std::apply(call, std::tuple<std::decay_t<decltype(with_input(a, xs, k))>...>{
                                      with_input(a, xs, k)...});
        },
        stored);
    std::vector<at::Tensor> flat;
    flatten_into(flat, out);
    return flat;
  };
  const std::vector<at::Tensor> outputs = checkpoint(fn, inputs, params);
  size_t k = 0;
  return Unflatten<Out>::from(outputs, k);
}

}  // namespace detail

template <typename F, typename... Ts, typename>
auto checkpoint(F&& fn, const Ts&... inputs) {
  return detail::checkpoint_call(
      {}, [f = std::forward<F>(fn)](const auto&... xs) { return f(xs...); }, at::Tensor(inputs)...);
}

}  // namespace zrt
