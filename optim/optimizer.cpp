// The Optimizer base: tensor validation, group access, the shared part of state loading, and the
// factory from OptimizerSpec.
#include "optim/optimizer.h"

#include <set>

#include <ATen/ATen.h>

#include "core/error.h"
#include "optim/fused_adam.h"
#include "optim/sgd.h"
#include "optim/swapped_adam.h"

namespace zrt::optim {
namespace {

bool is_kernel_dtype(at::ScalarType t) {
  return t == at::kFloat || t == at::kBFloat16 || t == at::kHalf;
}

// Note [Swapped params] (optim/optimizer.h): a meta param's companions are on the CPU, and its
// param_copy may be fp32 (the optimizer copies the updated masters into it).
void check_companion(const at::Tensor& t, const at::Tensor& param, const char* what, size_t g,
                     size_t i, bool allow_fp32) {
  if (!t.defined()) return;
  ZRT_CHECK(t.numel() == param.numel(), "param group ", g, " param ", i, ": ", what, " has ",
            t.numel(), " elements, the param has ", param.numel());
  const c10::Device device = param.is_meta() ? c10::Device(at::kCPU) : param.device();
  // A swapped param's copy may be swapped too (meta): SwapSpace::write_param_copy takes it.
  const bool swapped_copy = param.is_meta() && t.is_meta() && !allow_fp32;
  ZRT_CHECK(t.device() == device || swapped_copy, "param group ", g, " param ", i, ": ", what,
            " is on ", t.device(), ", the param on ", param.device());
  allow_fp32 = allow_fp32 || param.is_meta();
  ZRT_CHECK(is_kernel_dtype(t.scalar_type()) && (allow_fp32 || t.scalar_type() != at::kFloat),
            "param group ", g, " param ", i, ": ", what, " must be ",
            allow_fp32 ? "fp32, bf16 or fp16" : "bf16 or fp16", ", got ", t.scalar_type());
  ZRT_CHECK(t.is_contiguous(), "param group ", g, " param ", i, ": ", what, " must be contiguous");
}

void check_param(const OptimParam& p, size_t g, size_t i, bool fp32_only) {
  ZRT_CHECK(p.param.defined(), "param group ", g, " param ", i, ": the param tensor is undefined");
  ZRT_CHECK(
      p.param.device().is_cpu() || p.param.device().is_cuda() || (p.param.is_meta() && fp32_only),
      "param group ", g, " param ", i, ": tensors must be on CPU or CUDA, got ", p.param.device());
  ZRT_CHECK(fp32_only ? p.param.scalar_type() == at::kFloat : p.param.is_floating_point(),
            "param group ", g, " param ", i, ": the param must be ",
            fp32_only ? "fp32 (the master copy)" : "a floating-point tensor", ", got ",
            p.param.scalar_type());
  ZRT_CHECK(p.param.is_contiguous(), "param group ", g, " param ", i,
            ": the param must be contiguous");
  check_companion(p.grad, p.param, "grad", g, i, true);
  check_companion(p.param_copy, p.param, "param_copy", g, i, false);
}

}  // namespace

Optimizer::Optimizer(std::vector<std::vector<OptimParam>> groups, bool fp32_params_only)
    : groups_(std::move(groups)), fp32_params_only_(fp32_params_only) {
  std::set<const void*> seen;
  for (size_t g = 0; g < groups_.size(); ++g) {
    for (size_t i = 0; i < groups_[g].size(); ++i) {
      check_param(groups_[g][i], g, i, fp32_params_only_);
      const at::Tensor& p = groups_[g][i].param;
      const bool fresh = seen.insert(p.unsafeGetTensorImpl()).second &&
                         (p.numel() == 0 || p.is_meta() || seen.insert(p.data_ptr()).second);
      ZRT_CHECK(fresh, "param group ", g, " param ", i,
                ": this tensor (or its memory) appears more than once in the optimizer");
    }
  }
}

void Optimizer::check_group(size_t group) const {
  ZRT_CHECK(group < groups_.size(), "param group ", group, " does not exist (", groups_.size(),
            " groups)");
}

size_t Optimizer::num_params(size_t group) const {
  check_group(group);
  return groups_[group].size();
}

const OptimParam& Optimizer::param(size_t group, size_t index) const {
  ZRT_CHECK(index < num_params(group), "param group ", group, " has no param ", index, " (",
            groups_[group].size(), " params)");
  return groups_[group][index];
}

void Optimizer::set_grad(size_t group, size_t index, at::Tensor grad) {
  const OptimParam& p = param(group, index);
  check_companion(grad, p.param, "grad", group, index, true);
  groups_[group][index].grad = std::move(grad);
}

void Optimizer::set_param_copy(size_t group, size_t index, at::Tensor copy) {
  const OptimParam& p = param(group, index);
  check_companion(copy, p.param, "param_copy", group, index, false);
  groups_[group][index].param_copy = std::move(copy);
}

void Optimizer::set_betas(size_t, double, double) {
  throw Error(str(name(), " has no betas (momentum cycling needs an Adam-type optimizer)"));
}

int64_t Optimizer::first_index(size_t group) const {
  int64_t index = 0;
  for (size_t g = 0; g < group; ++g) index += static_cast<int64_t>(groups_[g].size());
  return index;
}

std::vector<std::vector<const ParamState*>> Optimizer::match_state(
    const OptimizerState& state) const {
  ZRT_CHECK_AS(CheckpointError, state.optimizer == name(), "optimizer state is for '",
               state.optimizer, "', this optimizer is ", name());
  ZRT_CHECK_AS(CheckpointError, state.param_groups.size() == groups_.size(), "optimizer state has ",
               state.param_groups.size(), " param groups, this optimizer has ", groups_.size());
  std::map<int64_t, std::pair<size_t, size_t>> where;
  for (size_t g = 0; g < groups_.size(); ++g) {
    const auto& ids = state.param_groups[g].params;
    ZRT_CHECK_AS(CheckpointError, ids.size() == groups_[g].size(), "param group ", g, " has ",
                 ids.size(), " params in the optimizer state, ", groups_[g].size(), " here");
    for (size_t i = 0; i < ids.size(); ++i) {
      ZRT_CHECK_AS(CheckpointError, where.emplace(ids[i], std::make_pair(g, i)).second,
                   "optimizer state lists param index ", ids[i], " twice");
    }
  }
  std::vector<std::vector<const ParamState*>> out(groups_.size());
  for (size_t g = 0; g < groups_.size(); ++g) out[g].assign(groups_[g].size(), nullptr);
  for (const auto& [id, ps] : state.state) {
    const auto it = where.find(id);
    ZRT_CHECK_AS(CheckpointError, it != where.end(), "optimizer state has state for param index ",
                 id, ", which is in no param group");
    ZRT_CHECK_AS(CheckpointError, ps.step >= 0, "param group ", it->second.first, " param ",
                 it->second.second, ": step ", ps.step, " is negative");
    out[it->second.first][it->second.second] = &ps;
  }
  return out;
}

namespace {

std::vector<AdamParamGroup> adam_groups_of(const OptimizerSpec& spec,
                                           std::vector<ParamGroup> groups) {
  std::vector<AdamParamGroup> adam_groups;
  for (ParamGroup& g : groups) {
    AdamOptions o = spec.adam;
    if (spec.kind == OptimizerKind::kAdamW) o.adam_w_mode = true;
    if (g.lr) o.lr = *g.lr;
    if (g.weight_decay) o.weight_decay = *g.weight_decay;
    adam_groups.push_back({std::move(g.params), o});
  }
  return adam_groups;
}

}  // namespace

std::unique_ptr<Optimizer> make_optimizer(const OptimizerSpec& spec, std::vector<ParamGroup> groups,
                                          std::shared_ptr<SwapSpace> swap) {
  if (swap != nullptr) {
    ZRT_CHECK_AS(ConfigError, spec.kind != OptimizerKind::kSgd,
                 "offload_optimizer.device \"nvme\" supports Adam and AdamW (the optimizer "
                 "is ",
                 spec.type_name, ")");
    return std::make_unique<SwappedAdam>(adam_groups_of(spec, std::move(groups)), std::move(swap));
  }
  switch (spec.kind) {
    case OptimizerKind::kAdam:
    case OptimizerKind::kAdamW:
      return std::make_unique<FusedAdam>(adam_groups_of(spec, std::move(groups)));
    case OptimizerKind::kSgd: {
      std::vector<SgdParamGroup> sgd_groups;
      for (ParamGroup& g : groups) {
        SgdOptions o = spec.sgd;
        if (g.lr) o.lr = *g.lr;
        if (g.weight_decay) o.weight_decay = *g.weight_decay;
        sgd_groups.push_back({std::move(g.params), o});
      }
      return std::make_unique<Sgd>(std::move(sgd_groups));
    }
  }
  throw InternalError("make_optimizer: unknown OptimizerKind");
}

}  // namespace zrt::optim
