#include "zero/shard_unit.h"

#include <torch/csrc/autograd/custom_function.h>

#include "core/strings.h"
#include "zero/stage3_layout.h"

namespace zrt::zero {
namespace {

// Identity in forward (detached aliases, not autograd views, so that later in-place ops on them
// are allowed); in backward, calls the coordinator once: pre_backward on a use's outputs (gather
// the parameters before the unit's own backward nodes, which need the data saved in forward;
// autograd runs it when every used output's gradient has arrived, those never used coming
// undefined), or post_backward on a run() use's input (that use's backward is done, its
// parameters may go).
struct UnitMarker : public torch::autograd::Function<UnitMarker> {
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx,
                                                at::TensorList ts, int64_t hooks, int64_t unit,
                                                bool before_backward) {
    ctx->saved_data["hooks"] = hooks;
    ctx->saved_data["unit"] = unit;
    ctx->saved_data["before"] = before_backward;
    ctx->set_materialize_grads(false);
    torch::autograd::variable_list out;
    for (const auto& t : ts) out.push_back(t.detach());
    return out;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto* hooks = reinterpret_cast<UnitHooks*>(ctx->saved_data["hooks"].toInt());
    const int unit = static_cast<int>(ctx->saved_data["unit"].toInt());
    if (ctx->saved_data["before"].toBool()) {
      hooks->pre_backward(unit);
    } else {
      hooks->post_backward(unit);
    }
    grads.resize(grads.size() + 3);  // none for hooks, unit, before_backward
    return grads;
  }
};

// `ts` marked together; those that take part in no backward (undefined, no grad, or grad mode
// off) pass as they are.
std::vector<at::Tensor> marked(std::vector<at::Tensor> ts, UnitHooks* hooks, int unit,
                               bool before_backward) {
  if (!at::GradMode::is_enabled()) return ts;
  std::vector<size_t> which;
  for (size_t i = 0; i < ts.size(); ++i) {
    if (ts[i].defined() && ts[i].requires_grad()) which.push_back(i);
  }
  if (which.empty()) return ts;
  torch::autograd::variable_list in;
  for (size_t i : which) in.push_back(ts[i]);
  const auto out = UnitMarker::apply(at::TensorList(in), reinterpret_cast<int64_t>(hooks),
                                     static_cast<int64_t>(unit), before_backward);
  for (size_t k = 0; k < which.size(); ++k) ts[which[k]] = out[k];
  return ts;
}

}  // namespace

at::Tensor mark_unit_output(const at::Tensor& output, UnitHooks* hooks, int unit) {
  return marked({output}, hooks, unit, /*before_backward=*/true)[0];
}

std::vector<at::Tensor> mark_unit_outputs(std::vector<at::Tensor> outputs, UnitHooks* hooks,
                                          int unit) {
  return marked(std::move(outputs), hooks, unit, /*before_backward=*/true);
}

std::vector<at::Tensor> mark_unit_inputs(std::vector<at::Tensor> inputs, UnitHooks* hooks,
                                         int unit) {
  std::vector<at::Tensor> out = marked(inputs, hooks, unit, /*before_backward=*/false);
  for (size_t i = 0; i < out.size(); ++i) {
    if (!out[i].is_same(inputs[i])) {  // a mark was made: its backward will call post_backward
      hooks->inputs_marked(unit);
      break;
    }
  }
  return out;
}

int enable_activation_checkpointing(torch::nn::Module& model, bool on) {
  int units = 0;
  auto visit = [&](torch::nn::Module& m) {
    auto* unit = dynamic_cast<ShardUnitBase*>(&m);
    if (unit != nullptr && unit->checkpointable()) {
      unit->set_checkpointing(on);
      ++units;
    }
  };
  visit(model);  // the model itself may be a unit; it need not be held by a shared_ptr
  for (const auto& m : model.modules(/*include_self=*/false)) visit(*m);
  return units;
}

ShardUnits find_shard_units(torch::nn::Module& model,
                            const std::vector<std::pair<std::string, std::string>>& aliases,
                            const LeafModules& leaves) {
  ShardUnits found;
  auto inside = [](const std::string& prefix, const std::vector<std::string>& outers) {
    for (const std::string& outer : outers) {
      if (starts_with(prefix, outer)) return true;
    }
    return false;
  };
  std::vector<std::string> prefixes;  // of the units found, "name." ("" for the model)
  std::vector<std::string> leaf_prefixes;
  auto visit = [&](const std::string& name, torch::nn::Module& module) {
    const std::string prefix = name.empty() ? "" : name + ".";
    const bool in_leaf = inside(prefix, leaf_prefixes);  // strictly: this one is not added yet
    if (leaves.matches(name, module) || is_z3_leaf_module(module)) {
      found.leaves.push_back(name);
      leaf_prefixes.push_back(prefix);
      if (!inside(prefix, prefixes) && dynamic_cast<ShardUnitBase*>(&module) == nullptr &&
          !module.parameters().empty()) {
        found.leaves_in_no_unit.push_back(name);
      }
    }
    auto* unit = dynamic_cast<ShardUnitBase*>(&module);
    if (unit == nullptr || in_leaf || inside(prefix, prefixes)) return;
    const int id = static_cast<int>(found.units.size());
    found.units.push_back(unit);
    prefixes.push_back(prefix);
    for (const auto& p : module.named_parameters()) found.unit_of.emplace_back(prefix + p.key(), id);
  };
  visit("", model);  // the model itself may be a unit or a leaf; it need not be a shared_ptr
  for (const auto& item : model.named_modules("", /*include_self=*/false)) {
    visit(item.key(), *item.value());
  }
  for (const auto& [alias, owner] : aliases) {
    found.unit_of.emplace_back(alias, -1);
    for (auto& entry : found.unit_of) {
      if (entry.first == owner) entry.second = -1;
    }
  }
  return found;
}

}  // namespace zrt::zero

namespace zrt {

void defer_parameters(torch::nn::Module& module) {
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
