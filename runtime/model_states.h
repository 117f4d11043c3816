// The seam between the engine's step and the ZeRO stage in use: who holds parameters, gradients
// and fp32 master weights, and where the optimizer's inputs come from. FlatModelStates
// (runtime/flat_model_states.h) implements stages 0–2 over flat groups; stage 3 has its own.
// Internal to runtime/.
#pragma once

#include <cstdint>
#include <vector>

#include <ATen/ATen.h>

namespace zrt::runtime {

// What the optimizer updates for one parameter group on this rank.
struct OptimTarget {
  at::Tensor master;  // fp32 weights of this rank's partition (on the CPU when offloaded)
  at::Tensor grad;    // the reduced gradient of the same elements (grad-accumulation dtype)
  at::Tensor lp;      // low-precision weights to refresh in the same pass, or undefined
};

// Bytes of model states this rank holds, counted from the tensors themselves.
struct ModelStateBytes {
  int64_t params = 0;     // trainable parameters (flat buffers or partitions)
  int64_t grads = 0;      // gradient buffers
  int64_t master = 0;     // fp32 master weights that are not the parameters themselves
  int64_t optimizer = 0;  // optimizer state (Adam moments)
  int64_t gathered = 0;   // stage 3: parameters currently gathered beyond the persistent ones
  int64_t total() const { return params + grads + master + optimizer; }
};

class ModelStates {
 public:
  virtual ~ModelStates() = default;

  // Collective (reductions): around every micro-step's autograd pass.
  virtual void begin_backward(bool boundary) = 0;
  virtual void end_backward() = 0;

  // The optimizer's inputs, one per group. Valid between the boundary micro-step's
  // end_backward() and zero_grad().
  virtual std::vector<OptimTarget>& targets() = 0;
  // Before the optimizer pass (e.g. copy gradients to the CPU when the optimizer is offloaded).
  virtual void before_optimizer_step() = 0;
  // Collective: after the optimizer pass (e.g. all-gather the updated parameters).
  virtual void after_optimizer_step() = 0;
  virtual void zero_grad() = 0;

  // True when every rank holds the same full gradients (stage 0): the global norm is local.
  virtual bool grads_replicated() const = 0;
  virtual ModelStateBytes memory() const = 0;
};

}  // namespace zrt::runtime
