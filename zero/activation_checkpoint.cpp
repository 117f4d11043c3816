#include "zero/activation_checkpoint.h"

#include <chrono>
#include <mutex>
#include <optional>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>

#include "core/error.h"

namespace zrt {

// Note [Activation checkpointing]
// A checkpointed region is one autograd node, CheckpointFunction. Its forward runs the region
// under NoGradGuard (no graph, no saved activations) and saves the inputs, their requires_grad
// flags and the RNG state. Its backward restores that RNG state, runs the region again with grad
// mode on over detached copies of the inputs (leaves that require grad where the originals did),
// and back-propagates the incoming gradients through the recomputed graph with a nested
// torch::autograd::backward. That accumulates the gradients of the parameters the region read
// into their .grad through their usual accumulators (so ZeRO's gradient hooks fire as without
// checkpointing) and leaves the inputs' gradients in the leaves, which the node returns. Then the
// RNG state is put back, so that the RNG sequence of the whole step is what it would have been
// without checkpointing: with the same masks and the same arithmetic, gradients are bitwise equal.
// A phantom input that requires grad makes the node part of the graph even when no real input
// requires grad (the region's parameters still need their gradients); it gets none. Under ZeRO-3 a
// checkpointed ShardUnit recomputes inside its own backward use, after the gathers before that
// use, so the prefetch trace and reuse distances are those of the plain run
// (zero/shard_unit.h).

namespace {

std::mutex g_mutex;
zero::ActivationCheckpointOptions g_options;  // guarded by g_mutex
RecomputeStats g_stats;                       // guarded by g_mutex

// The region's function, held by the node until its backward.
struct FnHolder : torch::CustomClassHolder {
  explicit FnHolder(CheckpointFn f) : fn(std::move(f)) {}
  CheckpointFn fn;
};

struct RngState {
  at::Tensor cpu;
  std::optional<at::Device> cuda_device;
  at::Tensor cuda;
};

// The device of the first CUDA input, which the recompute's RNG state is taken from.
std::optional<at::Device> cuda_device_of(const std::vector<at::Tensor>& inputs) {
  for (const at::Tensor& t : inputs) {
    if (t.defined() && t.is_cuda()) return t.device();
  }
  return std::nullopt;
}

RngState capture_rng(std::optional<at::Device> cuda_device) {
  RngState s;
  {
    at::Generator gen = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(gen.mutex());
    s.cpu = gen.get_state();
  }
  if (cuda_device) {
    s.cuda_device = cuda_device;
    at::Generator gen = at::globalContext().defaultGenerator(*cuda_device);
    std::lock_guard<std::mutex> lock(gen.mutex());
    s.cuda = gen.get_state();
  }
  return s;
}

void restore_rng(const RngState& s) {
  {
    at::Generator gen = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_state(s.cpu);
  }
  if (s.cuda_device) {
    at::Generator gen = at::globalContext().defaultGenerator(*s.cuda_device);
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_state(s.cuda);
  }
}

// The region's inputs as the recompute takes them: detached leaves on their own devices again,
// requiring grad where the originals did.
std::vector<at::Tensor> saved_inputs(torch::autograd::AutogradContext* ctx) {
  const c10::List<at::Tensor> saved = ctx->saved_data["inputs"].toTensorList();
  const c10::List<bool> needs_grad = ctx->saved_data["needs_grad"].toBoolList();
  const c10::List<at::Tensor> devices = ctx->saved_data["input_devices"].toTensorList();
  std::vector<at::Tensor> inputs;
  for (size_t i = 0; i < saved.size(); ++i) {
    at::Tensor t = saved.get(i);
    const at::Tensor where = devices.get(i);
    if (t.defined()) {
      if (where.defined() && t.device() != where.device()) t = t.to(where.device());
      t = t.detach().requires_grad_(needs_grad.get(i));
    }
    inputs.push_back(t);
  }
  return inputs;
}

struct CheckpointFunction : public torch::autograd::Function<CheckpointFunction> {
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx,
                                                const at::Tensor& phantom,
                                                c10::intrusive_ptr<FnHolder> holder,
                                                at::TensorList input_list, at::TensorList params) {
    const std::vector<at::Tensor> inputs = input_list.vec();
    c10::List<at::Tensor> param_list;
    for (const at::Tensor& p : params) param_list.push_back(p);
    ctx->saved_data["params"] = param_list;
    (void)phantom;
    const zero::ActivationCheckpointOptions options = activation_checkpointing();
    std::vector<bool> needs_grad;
    std::vector<at::Tensor> saved;
    for (const at::Tensor& t : inputs) {
      needs_grad.push_back(t.defined() && t.requires_grad());
      at::Tensor kept = t.defined() ? t.detach() : t;
      // cpu_checkpointing: a CUDA region's inputs wait for the backward in host memory.
      if (options.cpu_checkpointing && kept.defined() && kept.is_cuda()) kept = kept.to(at::kCPU);
      saved.push_back(kept);
    }
    RngState rng = capture_rng(cuda_device_of(inputs));
    std::vector<at::Tensor> outputs;
    {
      at::NoGradGuard no_grad;
      outputs = holder->fn(inputs);
    }
    ctx->saved_data["fn"] = c10::IValue::make_capsule(holder);
    c10::List<at::Tensor> saved_list;
    for (const at::Tensor& t : saved) saved_list.push_back(t);
    c10::List<bool> needs_grad_list;
    for (bool b : needs_grad) needs_grad_list.push_back(b);
    ctx->saved_data["inputs"] = saved_list;
    ctx->saved_data["needs_grad"] = needs_grad_list;
    ctx->saved_data["rng_cpu"] = rng.cpu;
    if (rng.cuda_device) {
      ctx->saved_data["rng_cuda"] = rng.cuda;
      ctx->saved_data["rng_cuda_device"] = static_cast<int64_t>(rng.cuda_device->index());
    }
    std::vector<at::Tensor> devices;  // where each saved input goes back to
    for (const at::Tensor& t : inputs) devices.push_back(t.defined() ? t.new_empty({0}) : t);
    c10::List<at::Tensor> device_list;
    for (const at::Tensor& t : devices) device_list.push_back(t);
    ctx->saved_data["input_devices"] = device_list;
    // Outputs that cannot carry gradients (integers) are marked so.
    for (const at::Tensor& o : outputs) {
      if (o.defined() && !at::isFloatingType(o.scalar_type()) &&
          !at::isComplexType(o.scalar_type())) {
        ctx->mark_non_differentiable({o});
      }
    }
    return outputs;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto holder = c10::static_intrusive_pointer_cast<FnHolder>(ctx->saved_data["fn"].toCapsule());
    const std::vector<at::Tensor> inputs = saved_inputs(ctx);
    RngState forward_rng;
    forward_rng.cpu = ctx->saved_data["rng_cpu"].toTensor();
    if (ctx->saved_data.count("rng_cuda") != 0) {
      forward_rng.cuda = ctx->saved_data["rng_cuda"].toTensor();
      forward_rng.cuda_device = at::Device(
          at::kCUDA, static_cast<c10::DeviceIndex>(ctx->saved_data["rng_cuda_device"].toInt()));
    }
    const RngState now = capture_rng(forward_rng.cuda_device);
    const bool profile = activation_checkpointing().profile;
    const auto t0 = std::chrono::steady_clock::now();
    restore_rng(forward_rng);
    std::vector<at::Tensor> outputs;
    {
      at::AutoGradMode grad_on(true);
      outputs = holder->fn(inputs);
    }
    restore_rng(now);
    {
      std::lock_guard<std::mutex> lock(g_mutex);
      g_stats.recomputes += 1;
      if (profile) {
        g_stats.seconds +=
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      }
    }
    ZRT_CHECK(outputs.size() == grads.size(), "checkpoint: the recomputed region returned ",
              outputs.size(), " outputs, the first run ", grads.size(),
              ": a checkpointed function must compute the same thing when run again");
    std::vector<at::Tensor> roots, root_grads;
    for (size_t i = 0; i < outputs.size(); ++i) {
      if (outputs[i].defined() && outputs[i].requires_grad() && grads[i].defined()) {
        roots.push_back(outputs[i]);
        root_grads.push_back(grads[i]);
      }
    }
    const c10::List<at::Tensor> params = ctx->saved_data["params"].toTensorList();
    torch::autograd::variable_list out;
    out.push_back(at::Tensor());  // the phantom
    out.push_back(at::Tensor());  // the function
    if (params.empty()) {
      // Parameters not named: they accumulate when this backward runs (torch's reentrant way).
      if (!roots.empty()) torch::autograd::backward(roots, root_grads);
      for (const at::Tensor& t : inputs) {
        out.push_back(t.defined() && t.requires_grad() ? t.grad() : at::Tensor());
      }
      return out;
    }
    // Named parameters: their gradients leave through this node, so that the outer backward
    // sums them with their other uses before their one accumulation, as without checkpointing.
    std::vector<at::Tensor> targets;
    std::vector<int> slot;  // per input and parameter: its index in targets, or -1
    auto add_target = [&](const at::Tensor& t) {
      slot.push_back(t.defined() && t.requires_grad() ? static_cast<int>(targets.size()) : -1);
      if (slot.back() >= 0) targets.push_back(t);
    };
    for (const at::Tensor& t : inputs) add_target(t);
    for (size_t i = 0; i < params.size(); ++i) add_target(params.get(i));
    std::vector<at::Tensor> got(targets.size());
    if (!roots.empty() && !targets.empty()) {
      got = torch::autograd::grad(roots, targets, root_grads, /*retain_graph=*/false,
                                  /*create_graph=*/false, /*allow_unused=*/true);
    }
    for (int k : slot) out.push_back(k >= 0 ? got[k] : at::Tensor());
    return out;
  }
};

}  // namespace

std::vector<at::Tensor> checkpoint(const CheckpointFn& fn, const std::vector<at::Tensor>& inputs,
                                   const std::vector<at::Tensor>& params) {
  if (!at::GradMode::is_enabled()) return fn(inputs);
  // Note [Activation checkpointing]: the phantom keeps the node in the graph.
  static const at::Tensor phantom = at::empty({0}).requires_grad_(true);
  // Undefined outputs (e.g. a dense layer's absent router logits) cannot leave an autograd
  // function: the node returns the defined ones, and they are put back in place here.
  auto defined = std::make_shared<std::vector<bool>>();  // per output, from the first run
  // Undefined inputs (e.g. no packed documents) cannot enter one either: the node takes the
  // defined ones, and the region gets them back in place.
  std::vector<bool> given;
  std::vector<at::Tensor> node_inputs;
  for (const at::Tensor& t : inputs) {
    given.push_back(t.defined());
    if (t.defined()) node_inputs.push_back(t);
  }
  CheckpointFn compact = [fn, defined, given](const std::vector<at::Tensor>& xs) {
    std::vector<at::Tensor> args;
    size_t k = 0;
    for (const bool g : given) args.push_back(g ? xs.at(k++) : at::Tensor());
    const std::vector<at::Tensor> all = fn(args);
    if (defined->empty()) {
      for (const at::Tensor& t : all) defined->push_back(t.defined());
    }
    std::vector<at::Tensor> out;
    for (const at::Tensor& t : all) {
      if (t.defined()) out.push_back(t);
    }
    return out;
  };
  const std::vector<at::Tensor> outs =
      CheckpointFunction::apply(phantom, c10::make_intrusive<FnHolder>(compact),
                                at::TensorList(node_inputs), at::TensorList(params));
  std::vector<at::Tensor> full;
  size_t k = 0;
  for (const bool d : *defined) full.push_back(d ? outs.at(k++) : at::Tensor());
  return full;
}

void set_activation_checkpointing(const zero::ActivationCheckpointOptions& options) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_options = options;
}

zero::ActivationCheckpointOptions activation_checkpointing() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_options;
}

RecomputeStats recompute_stats() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_stats;
}

void reset_recompute_stats() {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_stats = RecomputeStats{};
}

}  // namespace zrt
