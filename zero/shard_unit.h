// Sharding units for ZeRO stage 3. LibTorch modules have no forward hooks, so the user marks the
// modules whose parameters are gathered and released together (typically transformer blocks) by
// declaring them as zrt::ShardUnit<Block> instead of Block — one line each:
//
//   struct GptImpl : torch::nn::Module {
//     std::vector<std::shared_ptr<zrt::ShardUnit<BlockImpl>>> blocks;
//     GptImpl(...) {
//       for (int i = 0; i < n; ++i)
//         blocks.push_back(register_module("h" + std::to_string(i),
//                                          std::make_shared<zrt::ShardUnit<BlockImpl>>(cfg)));
//     }
//   };
//
// ShardUnit<M> *is* an M (same parameter names, same constructor arguments); its forward asks
// the engine's coordinator to gather the unit's parameters, runs M::forward, marks the outputs so
// that the parameters are re-gathered before the unit's backward, and releases them. Without an
// engine (or below stage 3) it is exactly M. Parameters outside every unit stay gathered. A unit
// is also the natural region of activation checkpointing: set_checkpointing(true) (or
// zrt::enable_activation_checkpointing(model)) makes its forward a checkpointed region.
#pragma once

#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "zero/activation_checkpoint.h"
#include "zero/leaf_modules.h"

namespace zrt {
namespace zero {

// Implemented by the stage-3 parameter coordinator (zero/param_coordinator.h).
class UnitHooks {
 public:
  virtual ~UnitHooks() = default;
  // Gathers the unit's parameters (waits for a prefetch) and may prefetch the next unit.
  virtual void pre_forward(int unit) = 0;
  // Releases the unit's parameters unless they are reused soon or persistent.
  virtual void post_forward(int unit) = 0;
  // Called (from autograd) before the unit's backward: gathers its parameters again.
  virtual void pre_backward(int unit) = 0;
  // Called (from autograd) once the backward of one run() use of the unit is done: may release.
  virtual void post_backward(int /*unit*/) {}
  // Whether the unit's forward marks its inputs too, so that post_backward ends its backward use
  // (a unit with frozen parameters: Note [Units with frozen parameters] in
  // zero/param_coordinator.cpp); and the news that one use did.
  virtual bool marks_inputs(int /*unit*/) const { return false; }
  virtual void inputs_marked(int /*unit*/) {}
};

// Marks outputs so that the unit's pre_backward runs when their gradient arrives. Internal.
at::Tensor mark_unit_output(const at::Tensor& output, UnitHooks* hooks, int unit);
// Marks several outputs of one use together: pre_backward runs once, when the gradients of all
// of them that are used have arrived (one output's may arrive long before the others', e.g. an
// auxiliary loss on a layer's router logits). Internal.
std::vector<at::Tensor> mark_unit_outputs(std::vector<at::Tensor> outputs, UnitHooks* hooks,
                                          int unit);
// Marks the inputs of one use (a run() use's input; a forward use's tensor arguments when
// hooks->marks_inputs) together: post_backward runs once, when the gradients of all of them that
// need one are done; tells hooks->inputs_marked when it marked any. Internal.
std::vector<at::Tensor> mark_unit_inputs(std::vector<at::Tensor> inputs, UnitHooks* hooks,
                                         int unit);

namespace detail {

inline at::Tensor mark(const at::Tensor& t, UnitHooks* h, int unit) {
  return mark_unit_output(t, h, unit);
}
inline std::vector<at::Tensor> mark(std::vector<at::Tensor> ts, UnitHooks* h, int unit) {
  return mark_unit_outputs(std::move(ts), h, unit);
}
template <typename... Ts>
std::tuple<Ts...> mark(std::tuple<Ts...> t, UnitHooks* h, int unit) {
  std::vector<at::Tensor> flat;
  zrt::detail::flatten_into(flat, t);
  size_t k = 0;
  return zrt::detail::Unflatten<std::tuple<Ts...>>::from(mark_unit_outputs(flat, h, unit), k);
}
template <typename T>
T mark(T value, UnitHooks*, int) {  // non-tensor outputs pass through
  return value;
}

// A forward argument with its tensor replaced by the marked one (the k-th tensor argument).
inline void collect_tensor(std::vector<at::Tensor>& ts, const at::Tensor& t) { ts.push_back(t); }
template <typename T>
void collect_tensor(std::vector<at::Tensor>&, const T&) {}
template <typename A>
using MarkedArg = std::conditional_t<std::is_same_v<std::decay_t<A>, at::Tensor>, at::Tensor, A&&>;
template <typename A>
MarkedArg<A> marked_arg(std::vector<at::Tensor>& ts, size_t& k, A&& a) {
  if constexpr (std::is_same_v<std::decay_t<A>, at::Tensor>) {
    return ts[k++];
  } else {
    return std::forward<A>(a);
  }
}

}  // namespace detail

// The non-template part of every ShardUnit, found by the engine with dynamic_cast.
class ShardUnitBase {
 public:
  virtual ~ShardUnitBase() = default;
  void attach(UnitHooks* hooks, int unit_id) {
    hooks_ = hooks;
    unit_id_ = unit_id;
  }
  void detach() { hooks_ = nullptr; }
  int unit_id() const { return unit_id_; }
  UnitHooks* hooks() const { return hooks_; }
  // Activation checkpointing of this unit (zero/activation_checkpoint.h): in grad mode, forward()
  // and run() keep no activations inside the unit and recompute them in its backward.
  void set_checkpointing(bool on) { checkpointing_ = on; }
  bool checkpointing() const { return checkpointing_; }
  // Whether enable_activation_checkpointing(model) includes this unit (default: yes). A model
  // author turns it off where a recompute spares nothing: an embedding lookup, or a head whose
  // only activation is its input, which a region keeps anyway (HF checkpoints only the layers).
  void set_checkpointable(bool on) { checkpointable_ = on; }
  bool checkpointable() const { return checkpointable_; }

  // Runs fn(input) (fn takes a const at::Tensor&) with the unit's parameters gathered, as forward()
  // runs M::forward: a further use of them in the same forward, e.g. a tied lm_head reading the
  // embedding unit's weight:
  //
  //   logits = embed_unit->run([&](const at::Tensor& h) {
  //     return torch::linear(h, embed_unit->weight); }, hidden);
  //
  // The unit then stays partitioned (a parameter read by two modules outside one unit is kept
  // whole on every rank instead). `input` is marked so that the parameters are released as
  // soon as this use's backward has produced its gradient, and the result is marked as
  // forward()'s outputs are. fn may read other tensors, but none that requires grad: the
  // backward of this use must be done when `input`'s gradient is. Without an engine (or below
  // stage 3) it is fn(input).
  template <typename F>
  auto run(F&& fn, const at::Tensor& input) {
    if (hooks_ == nullptr) return call(fn, input);
    hooks_->pre_forward(unit_id_);
    auto out = call(fn, mark_unit_inputs({input}, hooks_, unit_id_)[0]);
    hooks_->post_forward(unit_id_);
    return detail::mark(std::move(out), hooks_, unit_id_);
  }

 protected:
  // fn(args...), as a checkpointed region when checkpointing is on and grad mode is (the
  // recompute runs inside the unit's backward use, after its gathers: Note [Activation
  // checkpointing]).
  template <typename F, typename... Args>
  auto call(F&& fn, const Args&... args) {
    if (checkpointing_ && at::GradMode::is_enabled()) {
      return zrt::detail::checkpoint_call(unit_parameters(), std::forward<F>(fn), args...);
    }
    return fn(args...);
  }

  // fn(args...), its tensor arguments marked together if the coordinator asks (marks_inputs).
  template <typename F, typename... Args>
  auto call_marking_inputs(F&& fn, Args&&... args) {
    if (!hooks_->marks_inputs(unit_id_)) return fn(std::forward<Args>(args)...);
    std::vector<at::Tensor> ts;
    (detail::collect_tensor(ts, args), ...);
    ts = mark_unit_inputs(std::move(ts), hooks_, unit_id_);
    size_t k = 0;
    // A braced list evaluates in order: the k-th tensor argument gets the k-th marked tensor.
    std::tuple<detail::MarkedArg<Args>...> marked{
        detail::marked_arg(ts, k, std::forward<Args>(args))...};
    return std::apply(std::forward<F>(fn), std::move(marked));
  }

  // The unit's parameters (its module's, with its submodules'), named to its checkpointed regions.
  virtual std::vector<at::Tensor> unit_parameters() = 0;

  UnitHooks* hooks_ = nullptr;
  int unit_id_ = -1;
  bool checkpointing_ = false;
  bool checkpointable_ = true;
};

// Turns checkpointing on (or off) for every checkpointable ShardUnit of `model`, as HF's
// gradient_checkpointing_enable() does for every layer. Returns the number of units.
int enable_activation_checkpointing(torch::nn::Module& model, bool on = true);

// The outermost ShardUnit modules of a model and the unit of each parameter (full names).
struct ShardUnits {
  std::vector<ShardUnitBase*> units;
  // Parameter name → unit index; -1 for a parameter that stays whole on every rank.
  std::vector<std::pair<std::string, int>> unit_of;
  // The leaf modules found (Note [Leaf modules]), and those neither a unit nor in one.
  std::vector<std::string> leaves;
  std::vector<std::string> leaves_in_no_unit;
};
// Finds the units: a ShardUnit nested in another, or strictly inside a leaf (`leaves`, or
// marked by set_z3_leaf_modules), belongs to the outer one. A parameter registered under two
// names (`aliases`: (alias, owner) pairs) may belong to several units and stays whole (-1)
// under both names; a tie written as a second use of one unit (ShardUnitBase::run) stays
// partitioned instead.
ShardUnits find_shard_units(torch::nn::Module& model,
                            const std::vector<std::pair<std::string, std::string>>& aliases,
                            const LeafModules& leaves = {});

}  // namespace zero

// Partitioned construction (Note [Deferred parameters] in zero/stage3_layout.cpp): drops the
// storage of every parameter of `module` — names, shapes, dtypes and requires_grad stay — e.g.
// right after one layer is built, so that the whole model never exists on one rank. Only ZeRO-3
// takes such a model: it partitions shapes without values, and the values come from
// zrt::load_pretrained (hf/pretrained.h) before the first forward. A model author's
// constructor may create parameters with any values and register modules; it may not keep other
// tensors that alias a parameter (they would keep its memory).
void defer_parameters(torch::nn::Module& module);

using zero::enable_activation_checkpointing;

template <typename M>
class ShardUnit : public M, public zero::ShardUnitBase {
 public:
  using M::M;

  std::vector<at::Tensor> unit_parameters() override { return M::parameters(); }

  template <typename... Args>
  auto forward(Args&&... args) {
    if (!checkpointing_ || !at::GradMode::is_enabled()) return plain_forward(std::forward<Args>(args)...);
    auto inner = [this](const auto&... xs) { return M::forward(xs...); };
    if (hooks_ == nullptr) return call(inner, args...);
    hooks_->pre_forward(unit_id_);
    auto out = call_marking_inputs([&](const auto&... xs) { return call(inner, xs...); },
                                   std::forward<Args>(args)...);
    hooks_->post_forward(unit_id_);
    return zero::detail::mark(std::move(out), hooks_, unit_id_);
  }

 private:
  template <typename... Args>
  auto plain_forward(Args&&... args) {
    if (hooks_ == nullptr) return M::forward(std::forward<Args>(args)...);
    hooks_->pre_forward(unit_id_);
    auto out = call_marking_inputs(
        [this](auto&&... xs) { return M::forward(std::forward<decltype(xs)>(xs)...); },
        std::forward<Args>(args)...);
    hooks_->post_forward(unit_id_);
    return zero::detail::mark(std::move(out), hooks_, unit_id_);
  }
};

}  // namespace zrt
