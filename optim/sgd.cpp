// SGD (Note [SGD step] in sgd.h): options, the update in ATen ops, and the state round trip.
#include "optim/sgd.h"

#include <algorithm>
#include <cmath>

#include <ATen/ATen.h>

#include "core/error.h"

namespace zrt::optim {
std::string options_problem(const SgdOptions& o) {
  if (!(o.lr >= 0.0)) return str("invalid learning rate ", o.lr, " (must be >= 0)");
  if (!(o.momentum >= 0.0)) return str("invalid momentum ", o.momentum, " (must be >= 0)");
  if (!(o.weight_decay >= 0.0))
    return str("invalid weight_decay ", o.weight_decay, " (must be >= 0)");
  if (!std::isfinite(o.dampening)) return str("invalid dampening ", o.dampening);
  if (o.nesterov && (o.momentum <= 0.0 || o.dampening != 0.0)) {
    return str("nesterov momentum requires a momentum > 0 and zero dampening (momentum ",
               o.momentum, ", dampening ", o.dampening, ")");
  }
  return "";
}

void check_sgd_options(const SgdOptions& options) {
  const std::string problem = options_problem(options);
  ZRT_CHECK(problem.empty(), "SGD: ", problem);
}

Sgd::Sgd(std::vector<SgdParamGroup> groups)
    : GroupedOptimizer(std::move(groups), /*fp32_params_only=*/false) {
  for (const auto& params : groups_) momentum_.emplace_back(params.size());
}

const at::Tensor& Sgd::momentum_buffer(size_t group, size_t index) const {
  param(group, index);  // bounds check
  return momentum_[group][index];
}

namespace {

// One update of `param` (torch's SGD step; `buf`: the momentum buffer of the same elements).
void sgd_update(const at::Tensor& param, const at::Tensor& grad, const at::Tensor& buf, bool first,
                const SgdOptions& o, double grad_scale) {
  at::Tensor d = grad;
  if (d.scalar_type() != param.scalar_type()) d = d.to(param.scalar_type());
  if (grad_scale != 1.0) d = d * grad_scale;
  if (o.weight_decay != 0.0) d = d.add(param, o.weight_decay);
  if (o.momentum != 0.0) {
    if (first) {
      buf.copy_(d);
    } else {
      buf.mul_(o.momentum).add_(d, 1.0 - o.dampening);
    }
    d = o.nesterov ? d.add(buf, o.momentum) : buf;
  }
  param.add_(d, -o.lr);
}

// Note [SGD in chunks]: every operation of the update is elementwise, so running it a chunk of
// a contiguous parameter at a time gives the same bits while its temporaries (the scaled and
// decayed gradient) take a chunk instead of a second copy of the parameter: under ZeRO that
// parameter is a rank's whole partition (375 MB for a 394M-parameter model over 4 ranks).
constexpr int64_t kChunk = int64_t{1} << 20;

}  // namespace

void Sgd::step(double grad_scale) {
  ZRT_CHECK(std::isfinite(grad_scale), "SGD::step: grad_scale ", grad_scale, " is not finite");
  for (size_t g = 0; g < groups_.size(); ++g) {
    if (groups_[g].empty()) continue;
    ++steps_[g];
    const SgdOptions& o = options_[g];
    for (size_t i = 0; i < groups_[g].size(); ++i) {
      const OptimParam& p = groups_[g][i];
      if (!p.grad.defined()) continue;
      ZRT_CHECK(p.grad.numel() == p.param.numel(), "SGD::step: the gradient of param ", i,
                " of group ", g, " has ", p.grad.numel(), " elements, the parameter ",
                p.param.numel());
      at::Tensor& buf = momentum_[g][i];
      const bool first = o.momentum != 0.0 && !buf.defined();
      if (first) buf = at::empty(p.param.sizes(), p.param.options());
      const bool flat = p.param.is_contiguous() && p.grad.is_contiguous();
      const at::Tensor param = flat ? p.param.view({-1}) : p.param;
      const at::Tensor grad = flat ? p.grad.view({-1}) : p.grad.reshape(p.param.sizes());
      const at::Tensor mom = buf.defined() && flat ? buf.view({-1}) : buf;
      const int64_t n = param.numel();
      const int64_t chunk = flat ? kChunk : std::max<int64_t>(n, 1);
      for (int64_t begin = 0; begin < n; begin += chunk) {
        const int64_t len = std::min(chunk, n - begin);
        auto part = [&](const at::Tensor& t) {
          return flat && t.defined() ? t.narrow(0, begin, len) : t;
        };
        sgd_update(part(param), part(grad), part(mom), first, o, grad_scale);
      }
      if (p.param_copy.defined()) p.param_copy.copy_(p.param.reshape(p.param_copy.sizes()));
    }
  }
}

OptimizerState Sgd::state_dict() const {
  return state_dict_with([&](size_t g, size_t i, ParamState& out) {
    out.momentum_buffer = momentum_[g][i];
    return momentum_[g][i].defined();
  });
}

void Sgd::load_state_dict(const OptimizerState& state) {
  const auto matched = match_and_check(state);
  for (size_t g = 0; g < groups_.size(); ++g) {
    for (size_t i = 0; i < groups_[g].size(); ++i) {
      const ParamState* saved = matched[g][i];
      if (saved == nullptr || !saved->momentum_buffer.defined()) continue;
      const at::Tensor& b = saved->momentum_buffer;
      const at::Tensor& param = groups_[g][i].param;
      ZRT_CHECK_AS(CheckpointError, b.is_floating_point() && b.numel() == param.numel(),
                   "param group ", g, " param ", i, ": momentum_buffer has shape ", b.sizes(), " ",
                   b.scalar_type(), ", the param has shape ", param.sizes());
    }
  }
  for (size_t g = 0; g < groups_.size(); ++g) {
    options_[g] = saved_options(state, g);
    steps_[g] = 0;
    for (size_t i = 0; i < groups_[g].size(); ++i) {
      const ParamState* saved = matched[g][i];
      at::Tensor& buf = momentum_[g][i];
      if (saved == nullptr || !saved->momentum_buffer.defined()) {
        buf = at::Tensor();
      } else {
        const at::Tensor& param = groups_[g][i].param;
        if (!buf.defined()) buf = at::empty_like(param, at::MemoryFormat::Contiguous);
        buf.copy_(saved->momentum_buffer.reshape(param.sizes()));
      }
      if (saved != nullptr) steps_[g] = saved->step;
    }
  }
}

}  // namespace zrt::optim
