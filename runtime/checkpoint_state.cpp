#include "runtime/checkpoint_state.h"

#include <algorithm>
#include <functional>

#include "checkpoint/ds_objects.h"
#include "core/error.h"

namespace zrt::runtime {

using ckpt::Value;
using ckpt::ValueView;

// ---- optimizer state dict ------------------------------------------------------------------

namespace {

// One torch state entry, {"step", "exp_avg", "exp_avg_sq"} or {"step", "momentum_buffer"}, each
// tensor passed through `cut` (as it is, or one parameter's piece of a flat group).
Value state_entry(const optim::ParamState& ps, bool sgd,
                  const std::function<at::Tensor(const at::Tensor&)>& cut) {
  Value entry = Value::dict();
  entry.set("step", ps.step);
  if (sgd) {
    entry.set("momentum_buffer",
              ps.momentum_buffer.defined() ? Value(cut(ps.momentum_buffer)) : Value());
  } else {
    entry.set("exp_avg", cut(ps.exp_avg));
    entry.set("exp_avg_sq", cut(ps.exp_avg_sq));
  }
  return entry;
}

}  // namespace

Value optimizer_state_to_value(const optim::OptimizerState& s) {
  const bool sgd = s.optimizer == "SGD";
  Value state = Value::dict();
  for (const auto& [index, ps] : s.state) {
    state.set(index, state_entry(ps, sgd, [](const at::Tensor& t) { return t; }));
  }
  Value groups = Value::list();
  for (const optim::ParamGroupState& g : s.param_groups) {
    Value group = Value::dict();
    if (sgd) {
      group.set("lr", g.sgd.lr);
      group.set("momentum", g.sgd.momentum);
      group.set("dampening", g.sgd.dampening);
      group.set("weight_decay", g.sgd.weight_decay);
      group.set("nesterov", g.sgd.nesterov);
    } else {
      group.set("lr", g.adam.lr);
      group.set("betas", Value::tuple({g.adam.beta1, g.adam.beta2}));
      group.set("eps", g.adam.eps);
      group.set("weight_decay", g.adam.weight_decay);
      group.set("bias_correction", g.adam.bias_correction);
      group.set("adam_w_mode", g.adam.adam_w_mode);
      group.set("amsgrad", false);
    }
    Value params = Value::list();
    for (int64_t p : g.params) params.push_back(p);
    group.set("params", std::move(params));
    groups.push_back(std::move(group));
  }
  Value out = Value::dict();
  out.set("state", std::move(state));
  out.set("param_groups", std::move(groups));
  out.set("zrt_optimizer", s.optimizer);
  return out;
}

optim::OptimizerState optimizer_state_from_value(const ValueView& v) {
  optim::OptimizerState s;
  s.optimizer = v.contains("zrt_optimizer") ? v["zrt_optimizer"].as_string() : "FusedAdam";
  const bool sgd = s.optimizer == "SGD";
  const ValueView state = v["state"];
  for (const auto& [key, value] : state.as_dict()) {
    const ValueView e(value, "", state.where() + "[" + key.repr() + "]");
    optim::ParamState ps;
    ps.step = e.contains("step") ? (e["step"].kind() == ckpt::ValueKind::kTensor
                                        ? static_cast<int64_t>(e["step"].as_tensor().item<double>())
                                        : static_cast<int64_t>(e["step"].as_double()))
                                 : 0;
    if (sgd) {
      if (e.contains("momentum_buffer") &&
          e["momentum_buffer"].kind() == ckpt::ValueKind::kTensor) {
        ps.momentum_buffer = e["momentum_buffer"].as_tensor();
      }
    } else {
      ps.exp_avg = e["exp_avg"].as_tensor();
      ps.exp_avg_sq = e["exp_avg_sq"].as_tensor();
    }
    s.state[key.as_int()] = std::move(ps);
  }
  const ValueView groups = v["param_groups"];
  for (size_t i = 0; i < groups.length(); ++i) {
    const ValueView g = groups.at(i);
    optim::ParamGroupState pg;
    for (const Value& p : g["params"].items()) pg.params.push_back(p.as_int());
    if (sgd) {
      pg.sgd.lr = g["lr"].as_double();
      pg.sgd.momentum = g["momentum"].as_double();
      pg.sgd.dampening = g["dampening"].as_double();
      pg.sgd.weight_decay = g["weight_decay"].as_double();
      pg.sgd.nesterov = g["nesterov"].as_bool();
    } else {
      pg.adam.lr = g["lr"].as_double();
      const ValueView betas = g["betas"];
      pg.adam.beta1 = betas.at(0).as_double();
      pg.adam.beta2 = betas.at(1).as_double();
      pg.adam.eps = g["eps"].as_double();
      pg.adam.weight_decay = g["weight_decay"].as_double();
      pg.adam.bias_correction =
          g.contains("bias_correction") ? g["bias_correction"].as_bool() : true;
      pg.adam.adam_w_mode = g.contains("adam_w_mode") ? g["adam_w_mode"].as_bool() : true;
    }
    s.param_groups.push_back(std::move(pg));
  }
  return s;
}

// ---- stage 0 (Note [Stage 0 layouts]) ---------------------------------------------------------

namespace {

// The first `n` elements of a flat tensor, in a storage of their own (what the file holds).
at::Tensor first_elements(const at::Tensor& t, int64_t n) {
  return t.reshape({-1}).narrow(0, 0, n).clone();
}

// The fp32 layout: one torch state entry per parameter, cut from the group's flat state.
Value stage0_per_param(const optim::OptimizerState& state, const ParamShapes& shapes) {
  Value out = optimizer_state_to_value(state);  // its groups' hyper-parameters are kept
  Value per_param = Value::dict();
  int64_t k = 0;
  for (size_t g = 0; g < shapes.size(); ++g) {
    Value params = Value::list();
    const auto it = state.state.find(static_cast<int64_t>(g));
    int64_t offset = 0;
    for (const auto& [name, shape] : shapes[g]) {
      const int64_t n = ckpt::shape_numel(shape);
      if (it != state.state.end()) {
        per_param.set(k,
                      state_entry(it->second, state.optimizer == "SGD", [&](const at::Tensor& t) {
                        return t.reshape({-1}).narrow(0, offset, n).reshape(shape).clone();
                      }));
      }
      params.push_back(k++);
      offset += n;
    }
    out.at("param_groups").items().at(g).set("params", std::move(params));
  }
  out.set("state", std::move(per_param));
  return out;
}

}  // namespace

Value stage0_optimizer_value(const optim::OptimizerState& state,
                             const std::vector<at::Tensor>& masters, const ParamShapes& shapes,
                             at::ScalarType model_dtype, const Json& loss_scaler,
                             double clip_grad) {
  ZRT_INTERNAL_ASSERT(masters.size() == shapes.size(), "stage 0: ", masters.size(),
                      " master groups for ", shapes.size(), " parameter groups");
  if (model_dtype == at::kFloat) return stage0_per_param(state, shapes);
  Value opt = Value::dict();
  if (model_dtype == at::kHalf) {
    const bool dynamic = loss_scaler.at("dynamic").get<bool>();
    opt.set("dynamic_loss_scale", dynamic);
    opt.set("cur_scale", loss_scaler.at("cur_scale").get<double>());
    opt.set("cur_iter", loss_scaler.value("cur_iter", int64_t{0}));
    if (dynamic) {
      opt.set("last_overflow_iter", loss_scaler.at("last_overflow_iter").get<int64_t>());
      opt.set("scale_factor", loss_scaler.at("scale_factor").get<double>());
      opt.set("scale_window", loss_scaler.at("scale_window").get<int64_t>());
    }
  }
  optim::OptimizerState trimmed = state;
  Value flats = Value::list();
  for (size_t g = 0; g < shapes.size(); ++g) {
    const int64_t n = ckpt::group_numel(shapes[g]);
    flats.push_back(first_elements(masters[g], n));
    auto it = trimmed.state.find(static_cast<int64_t>(g));
    if (it == trimmed.state.end()) continue;
    for (at::Tensor* t :
         {&it->second.exp_avg, &it->second.exp_avg_sq, &it->second.momentum_buffer}) {
      if (t->defined()) *t = first_elements(*t, n);
    }
  }
  opt.set("optimizer_state_dict", optimizer_state_to_value(trimmed));
  opt.set("fp32_groups_flat", std::move(flats));
  opt.set("clip_grad", clip_grad);
  if (model_dtype == at::kHalf) opt.set("loss_scaler", ckpt::ds_loss_scaler_value(loss_scaler));
  return opt;
}

namespace {

// Stage 0 in the fp32 layout: the masters are the module's weights, the moments per parameter.
void reassemble_stage0_per_param(FullState& full, const ParamShapes& shapes,
                                 const ValueView& model_states) {
  const ValueView opt = model_states["optimizer"];
  const ValueView module = model_states["module"];
  const optim::OptimizerState base = optimizer_state_from_value(opt);
  full.optimizer = base.optimizer;
  ZRT_CHECK_AS(CheckpointError, base.param_groups.size() == shapes.size(), opt.where(), ": ",
               base.param_groups.size(), " optimizer groups but ", shapes.size(),
               " param_shapes groups");
  for (size_t g = 0; g < shapes.size(); ++g) {
    const optim::ParamGroupState& group = base.param_groups[g];
    ZRT_CHECK_AS(CheckpointError, group.params.size() == shapes[g].size(), opt.where(),
                 ": optimizer group ", g, " has ", group.params.size(),
                 " parameters, param_shapes ", shapes[g].size());
    full.group_hyper.push_back(group);
    int64_t step = 0;  // the last parameter's with state (DeepSpeed's FusedAdam counts there)
    for (size_t i = 0; i < shapes[g].size(); ++i) {
      const auto& [name, shape] = shapes[g][i];
      FullParamState& p = full.params[name];
      const at::Tensor& w = module[name].as_tensor();
      ZRT_CHECK_AS(CheckpointError, w.numel() == ckpt::shape_numel(shape), module.where(), ": '",
                   name, "' has ", w.numel(), " elements, param_shapes says ",
                   ckpt::shape_numel(shape));
      p.fp32 = w.to(at::kFloat).reshape(shape).clone();
      const auto it = base.state.find(group.params[i]);
      if (it == base.state.end()) continue;
      step = it->second.step;
      auto whole = [&](const at::Tensor& t, const char* what) {
        ZRT_CHECK_AS(CheckpointError, t.defined() && t.numel() == w.numel(), opt.where(), ": the ",
                     what, " of '", name, "' (state ", group.params[i],
                     ") does not have the parameter's ", w.numel(), " elements");
        return t.to(at::kFloat).reshape(shape).clone();
      };
      if (full.optimizer == "SGD") {
        if (it->second.momentum_buffer.defined()) {
          p.momentum = whole(it->second.momentum_buffer, "momentum_buffer");
        }
      } else {
        p.exp_avg = whole(it->second.exp_avg, "exp_avg");
        p.exp_avg_sq = whole(it->second.exp_avg_sq, "exp_avg_sq");
      }
    }
    full.group_steps.push_back(step);
  }
}

// FP16_Optimizer's loss-scale fields (fp16 at stage 0) as a dict, or None.
Value fp16_optimizer_scale_fields(const ValueView& opt) {
  if (!opt.contains("cur_scale")) return Value();
  Value fields = Value::dict();
  for (const char* key : {"dynamic_loss_scale", "cur_scale", "cur_iter", "last_overflow_iter",
                          "scale_factor", "scale_window"}) {
    if (opt.contains(key)) fields.set(key, opt[key].value());
  }
  return fields;
}

// The flat layouts of stage 0 (FP16_Optimizer's, and older ZeroRT's at every dtype): the base
// optimizer state, the fp32 flat per group, and what the file holds for the loss scaler.
struct FlatSources {
  optim::OptimizerState base;
  std::vector<at::Tensor> fp32;  // per group
  Value loss_scaler;
};

FlatSources read_flat_sources(const ValueView& opt) {
  FlatSources src;
  src.base = optimizer_state_from_value(opt["optimizer_state_dict"]);
  for (const Value& t : opt["fp32_groups_flat"].items()) src.fp32.push_back(t.as_tensor());
  src.loss_scaler =
      opt.contains("loss_scaler") ? opt["loss_scaler"].value() : fp16_optimizer_scale_fields(opt);
  return src;
}

}  // namespace

// ---- whole-parameter reassembly (stage 0) ---------------------------------------------------

FullState reassemble_stage0_state(const ParamShapes& shapes, const Value& model_states,
                                  const std::string& context) {
  FullState full;
  for (const auto& group : shapes) {
    std::vector<std::string> names;
    for (const auto& [name, shape] : group) {
      names.push_back(name);
      full.params[name];
    }
    full.group_names.push_back(std::move(names));
  }
  const ValueView opt = ValueView(model_states, context)["optimizer"];
  if (!opt.contains("fp32_groups_flat")) {
    reassemble_stage0_per_param(full, shapes, ValueView(model_states, context));
    return full;
  }
  const FlatSources src = read_flat_sources(opt);
  full.loss_scaler = src.loss_scaler;
  full.optimizer = src.base.optimizer;
  ZRT_CHECK_AS(CheckpointError, src.base.param_groups.size() == shapes.size(), context, ": ",
               src.base.param_groups.size(), " optimizer groups but ", shapes.size(),
               " param_shapes groups");
  ZRT_CHECK_AS(CheckpointError, src.fp32.size() == shapes.size(), context, ": ", src.fp32.size(),
               " fp32 flat groups but ", shapes.size(), " param_shapes groups");
  for (size_t g = 0; g < shapes.size(); ++g) {
    full.group_hyper.push_back(src.base.param_groups[g]);
    const auto it = src.base.state.find(static_cast<int64_t>(g));
    full.group_steps.push_back(it == src.base.state.end() ? 0 : it->second.step);
    const at::Tensor& flat = src.fp32[g];
    // Splits one flat tensor of group g into its parameters (Note [Partition layouts], W = 1).
    auto split = [&](const at::Tensor& t, const char* tensor, at::Tensor FullParamState::*slot) {
      ZRT_CHECK_AS(CheckpointError, t.defined(), context, ": group ", g, " has no ", tensor);
      // Older ZeroRT files pad the moments beyond the flat's elements: the padding is at the end.
      const at::Tensor part =
          t.to(at::kFloat).reshape({-1}).narrow(0, 0, std::min(t.numel(), flat.numel()));
      for (auto& [name, whole] :
           ckpt::merge_partitions(ckpt::PartitionLayout::kFlat, {part}, shapes[g], context,
                                  static_cast<int>(g), tensor)) {
        full.params[name].*slot = whole.clone();
      }
    };
    split(flat, "fp32", &FullParamState::fp32);
    if (it == src.base.state.end()) continue;
    if (full.optimizer == "SGD") {
      split(it->second.momentum_buffer, "momentum_buffer", &FullParamState::momentum);
    } else {
      split(it->second.exp_avg, "exp_avg", &FullParamState::exp_avg);
      split(it->second.exp_avg_sq, "exp_avg_sq", &FullParamState::exp_avg_sq);
    }
  }
  return full;
}

}  // namespace zrt::runtime
