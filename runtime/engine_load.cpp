// Engine::load_checkpoint and save_16bit_model (see runtime/engine_checkpoint.cpp for the writer
// and checkpoint/FORMAT.md for the keys).
#include <mutex>
#include <set>
#include <unordered_map>

#include <ATen/CPUGeneratorImpl.h>

#include "checkpoint/consolidate.h"
#include "checkpoint/layout.h"
#include "checkpoint/manifest.h"
#include "checkpoint/pt_file.h"
#include "checkpoint/reshard.h"
#include "checkpoint/safetensors.h"
#include "core/error.h"
#include "core/logging.h"
#include "core/shard.h"
#include "optim/loss_scaler.h"
#include "optim/optimizer.h"
#include "runtime/checkpoint_state.h"
#include "runtime/engine.h"
#include "runtime/flat_model_states.h"
#include "runtime/gathered_parameters.h"
#include "runtime/stage3_model_states.h"
#include "sched/lr_scheduler.h"

namespace zrt {

using ckpt::Value;
using ckpt::ValueView;

namespace {

bool consumed_key(const std::string& key, bool scheduler_loaded) {
  for (const char* k :
       {"module", "sparse_tensor_module_names", "skipped_steps", "global_steps", "dp_world_size",
        "mp_world_size", "data_sampler", "random_ltd", "optimizer"}) {
    if (key == k) return true;
  }
  return scheduler_loaded && key == "lr_scheduler";
}

// The optimizer-state file of `rank`: the current precision's name first, then the other one
// (DeepSpeed loads bf16 files into fp16 engines and back, with a warning).
std::string find_optim_file(const ckpt::Manifest& manifest, int rank, bool bf16) {
  const std::string preferred = ckpt::optim_states_name(rank, bf16);
  if (manifest.find(preferred) != nullptr) return preferred;
  const std::string other = ckpt::optim_states_name(rank, !bf16);
  ZRT_CHECK_AS(CheckpointError, manifest.find(other) != nullptr, "checkpoint tag ", manifest.tag,
               " has no optimizer-state file for rank ", rank, " (", preferred, ")");
  ZRT_LOG_WARN("loading ", bf16 ? "fp16/fp32" : "bf16", " zero checkpoint ", other, " into a ",
               bf16 ? "bf16" : "non-bf16", " engine");
  return other;
}

}  // namespace

at::Tensor Engine::my_partition(int group,
                                const std::function<at::Tensor(const std::string&)>& full,
                                at::ScalarType dtype) const {
  // Note [Partition layouts] (checkpoint/reshard.h): the engine partitions like DeepSpeed.
  const runtime::GroupPartition g = states_->group_partitions().at(group);
  const at::Tensor part = ckpt::partition_from_whole(g.layout, g.params, g.rank, g.world_size, full,
                                                     dtype, "resharding a checkpoint");
  if (part.numel() == g.lp.numel()) return part;
  // Stage 0 keeps the whole group padded to the alignment of its world size.
  ZRT_INTERNAL_ASSERT(part.numel() < g.lp.numel(), "partition of ", part.numel(),
                      " elements for a group partition of ", g.lp.numel());
  at::Tensor padded = at::zeros({g.lp.numel()}, at::TensorOptions().dtype(dtype));
  padded.narrow(0, 0, part.numel()).copy_(part);
  return padded;
}

void Engine::load_module_weights(const std::string& dir, const std::string& tag,
                                 const Value& model_states, int saved_stage, bool strict) {
  at::NoGradGuard no_grad;
  std::unordered_map<std::string, at::Tensor> full;
  if (saved_stage == 3) {
    // The module of a stage-3 file holds empty tensors: rebuild the weights from the partitions.
    for (auto& [name, t] : ckpt::load_fp32_state_dict(ckpt::parent_dir(dir), tag)) full[name] = t;
  }
  const ValueView module = ValueView(model_states, dir)["module"];
  for (const auto& [key, value] : module.as_dict()) {
    if (value.is_tensor() && (saved_stage != 3 || value.as_tensor().numel() > 0)) {
      full.emplace(key.as_str(), value.as_tensor());
    }
  }
  assign_module_weights(full, strict, dir);
}

void Engine::assign_module_weights(const std::unordered_map<std::string, at::Tensor>& full,
                                   bool strict, const std::string& dir) {
  at::NoGradGuard no_grad;
  std::set<std::string> expected;
  auto fetch = [&](const std::string& name, const at::Tensor& like) -> at::Tensor {
    expected.insert(name);
    auto it = full.find(name);
    if (it == full.end()) {
      ZRT_CHECK_AS(CheckpointError, !strict, dir, ": the checkpoint has no weights for '", name,
                   "' (load with load_module_strict = false to skip it)");
      return at::Tensor();
    }
    ZRT_CHECK_AS(CheckpointError, it->second.numel() == like.numel(), dir, ": '", name,
                 "' has shape ", it->second.sizes(), " in the checkpoint but ", like.sizes(),
                 " in the model");
    return it->second;
  };
  auto* s3 = dynamic_cast<runtime::Stage3ModelStates*>(states_.get());
  if (s3 != nullptr) {
    zero::Stage3Layout& layout = s3->layout();
    for (size_t i = 0; i < layout.params().size(); ++i) {
      const zero::Stage3Param& p = layout.params()[i];
      at::Tensor value = fetch(p.name, p.param);
      if (!value.defined()) continue;
      if (p.group >= 0) {
        const ShardInfo mine = param_shard(p.numel, layout.rank(), layout.world_size());
        at::Tensor part = layout.partition_of(static_cast<int>(i));
        part.zero_();
        if (mine.size > 0) {
          part.narrow(0, 0, mine.size).copy_(value.reshape({-1}).narrow(0, mine.offset, mine.size));
        }
      }
      if (zero::storage_allocated(p.param)) p.param.detach().copy_(value.view(p.shape));
    }
  } else {
    for (const auto& p : model_->named_parameters()) {
      at::Tensor value = fetch(p.key(), p.value());
      if (value.defined()) p.value().detach().copy_(value.view(p.value().sizes()));
    }
  }
  for (const auto& b : model_->named_buffers()) {
    at::Tensor value = fetch(b.key(), b.value());
    if (value.defined()) b.value().copy_(value.view(b.value().sizes()));
  }
  if (strict) {
    for (const auto& [name, t] : full) {
      bool alias = false;
      for (const auto& a : aliases_) alias = alias || a.first == name;
      ZRT_CHECK_AS(CheckpointError, expected.count(name) != 0 || alias, dir,
                   ": the checkpoint has weights for '", name, "', which the model does not have");
    }
  }
  runtime::masters_from_params(*states_);
}

void Engine::load_partitioned_state(const std::string& dir, const std::string& tag, int saved_stage,
                                    int saved_world, const Value& model_states) {
  at::NoGradGuard no_grad;
  // A DeepSpeed-written tag (the transformers Trainer's checkpoint-N) has no manifest: the one
  // its files imply, and its files (DeepSpeed's pickled classes) read in tolerant mode.
  const ckpt::Manifest manifest =
      ckpt::open_tag(ckpt::parent_dir(dir), tag, ckpt::VerifyLevel::kSizes, storage_.get());
  ckpt::ReadOptions ro;
  if (manifest.derived) ro.mode = ckpt::ReadMode::kTolerant;
  const int rank = comm_->rank();
  const bool bf16 = model_dtype_ == at::kBFloat16;
  const bool same = saved_stage == config_.zero.stage && saved_world == comm_->size();
  auto& targets = states_->targets();
  Value loss_scaler;
  if (same && saved_stage == 0) {
    const ValueView opt = ValueView(model_states, dir)["optimizer"];
    const auto& flats = opt["fp32_groups_flat"].items();
    ZRT_CHECK_AS(CheckpointError, flats.size() == targets.size(), dir, ": ", flats.size(),
                 " fp32 groups saved, the engine has ", targets.size());
    for (size_t g = 0; g < targets.size(); ++g) targets[g].master.copy_(flats[g].as_tensor());
    optimizer_->load_state_dict(runtime::optimizer_state_from_value(opt["optimizer_state_dict"]));
    loss_scaler = opt["loss_scaler"].value();
  } else if (same) {
    const std::string name = find_optim_file(manifest, rank, bf16);
    const Value file = ckpt::load_pt(ckpt::join_path(dir, name), ro);
    const ValueView osd = ValueView(file, name)["optimizer_state_dict"];
    const bool s3 = saved_stage == 3;
    const auto& flats = osd[s3 ? "fp32_flat_groups" : "single_partition_of_fp32_groups"].items();
    ZRT_CHECK_AS(CheckpointError, flats.size() == targets.size(), name, ": ", flats.size(),
                 " fp32 groups saved, the engine has ", targets.size());
    for (size_t g = 0; g < targets.size(); ++g) {
      const at::Tensor& saved = flats[g].as_tensor();
      ZRT_CHECK_AS(CheckpointError, saved.numel() <= targets[g].master.numel(), name,
                   ": fp32 group ", g, " has ", saved.numel(), " elements, the partition ",
                   targets[g].master.numel());
      targets[g].master.zero_();  // padding
      targets[g].master.narrow(0, 0, saved.numel()).copy_(saved.reshape({-1}));
    }
    optimizer_->load_state_dict(runtime::optimizer_state_from_value(
        osd[s3 ? "optimizer_state_dict" : "base_optimizer_state"]));
    loss_scaler = osd["loss_scaler"].value();
  } else {
    // Another world size or stage: reassemble whole parameters from every rank's files.
    const runtime::ParamShapes shapes = runtime::read_param_shapes(ValueView(model_states, dir));
    std::vector<Value> files;
    if (saved_stage > 0) {
      for (int r = 0; r < saved_world; ++r) {
        files.push_back(
            ckpt::load_pt(ckpt::join_path(dir, find_optim_file(manifest, r, bf16)), ro));
      }
    }
    const Value stage0 =
        saved_stage == 0 ? ValueView(model_states, dir)["optimizer"].value() : Value();
    runtime::FullState full =
        runtime::reassemble_full_state(saved_stage, saved_world, shapes, files, stage0, dir);
    const auto mine = param_shapes();
    ZRT_CHECK_AS(CheckpointError, mine.size() == shapes.size(), dir, ": the checkpoint has ",
                 shapes.size(), " parameter groups, the engine ", mine.size());
    for (size_t g = 0; g < mine.size(); ++g) {
      for (const auto& [name, shape] : mine[g]) {
        int64_t numel = 1;
        for (int64_t d : shape) numel *= d;
        auto it = full.params.find(name);
        ZRT_CHECK_AS(CheckpointError, it != full.params.end() && it->second.fp32.defined(), dir,
                     ": parameter '", name, "' of group ", g, " is missing from the checkpoint");
        ZRT_CHECK_AS(CheckpointError, it->second.fp32.numel() == numel, dir, ": parameter '", name,
                     "' has ", it->second.fp32.numel(), " elements in the checkpoint but ", numel,
                     " in the model");
      }
    }
    auto part_of = [&](size_t g, at::Tensor runtime::FullParamState::*member) {
      return my_partition(
          static_cast<int>(g), [&](const std::string& n) { return full.params.at(n).*member; },
          at::kFloat);
    };
    optim::OptimizerState state;
    state.optimizer = full.optimizer;
    for (size_t g = 0; g < targets.size(); ++g) {
      targets[g].master.copy_(part_of(g, &runtime::FullParamState::fp32));
      const std::string& first = mine[g].front().first;
      optim::ParamState ps;
      ps.step = full.group_steps[g];
      if (full.params.at(first).exp_avg.defined()) {
        ps.exp_avg = part_of(g, &runtime::FullParamState::exp_avg);
        ps.exp_avg_sq = part_of(g, &runtime::FullParamState::exp_avg_sq);
        state.state[static_cast<int64_t>(g)] = ps;
      } else if (full.params.at(first).momentum.defined()) {
        ps.momentum_buffer = part_of(g, &runtime::FullParamState::momentum);
        state.state[static_cast<int64_t>(g)] = ps;
      }
      optim::ParamGroupState hyper = full.group_hyper[g];
      hyper.params = {static_cast<int64_t>(g)};
      state.param_groups.push_back(hyper);
    }
    optimizer_->load_state_dict(state);
    loss_scaler = full.loss_scaler;
    ZRT_LOG_INFO("resharded checkpoint ", dir, " from stage ", saved_stage, " x ", saved_world,
                 " ranks to stage ", config_.zero.stage, " x ", comm_->size());
  }
  // ZeroRT saves the scaler's attributes as a dict; DeepSpeed pickles its LossScaler object,
  // whose attributes are the state its BUILD set.
  if (loss_scaler.is_object()) loss_scaler = loss_scaler.as_object().state;
  if (!loss_scaler.is_none()) loss_scaler_->load_state_dict(ckpt::to_json(loss_scaler));
  runtime::params_from_masters(*states_);
  // Buffers (and frozen parameters) come from the model states.
  const ValueView module = ValueView(model_states, dir)["module"];
  for (const auto& b : model_->named_buffers()) {
    if (module.contains(b.key()))
      b.value().copy_(module[b.key()].as_tensor().view(b.value().sizes()));
  }
  for (const auto& p : model_->named_parameters()) {
    if (p.value().requires_grad() || !module.contains(p.key())) continue;
    const at::Tensor& t = module[p.key()].as_tensor();
    if (t.numel() == p.value().numel() && zero::storage_allocated(p.value())) {
      p.value().detach().copy_(t.view(p.value().sizes()));
    }
  }
}

std::optional<LoadedCheckpoint> Engine::load_checkpoint(const std::string& load_dir,
                                                        const std::optional<std::string>& tag_arg,
                                                        const LoadCheckpointOptions& options) {
  ZRT_CHECK(
      !backward_pending_,
      "load_checkpoint() between backward() and step(): load before training or after step()");
  std::optional<std::string> tag = tag_arg;
  if (!tag) tag = ckpt::read_latest(load_dir, storage_.get());
  if (!tag) {
    ZRT_LOG_WARN("Unable to find latest file at ", load_dir,
                 "/latest, if trying to load latest checkpoint please ensure this file exists or "
                 "pass an explicit checkpoint tag when loading a checkpoint.");
    return std::nullopt;
  }
  // A ZeroRT tag is verified against its manifest; a DeepSpeed-written one has none, and its
  // files (which pickle DeepSpeed's own classes) are read in tolerant mode.
  const ckpt::Manifest manifest =
      ckpt::open_tag(load_dir, *tag, ckpt::VerifyLevel::kSizes, storage_.get());
  ckpt::ReadOptions read_options;
  if (manifest.derived) read_options.mode = ckpt::ReadMode::kTolerant;
  const std::string dir = ckpt::tag_path(load_dir, *tag);
  const int saved_stage = manifest.zero_stage;
  const int saved_world = manifest.world_size;
  const int rank = comm_->rank();
  const bool same = saved_stage == config_.zero.stage && saved_world == comm_->size();
  // Without an optimizer (inference) there is nothing but the module to load into: weights only,
  // as DeepSpeed's load_module_only; the optimizer and scheduler files are never read.
  const bool module_only = options.load_module_only || optimizer_ == nullptr;
  const std::string model_file =
      saved_stage == 3 ? ckpt::zero3_model_states_name(same ? rank : 0) : ckpt::model_states_name();
  const Value ms = ckpt::load_pt(ckpt::join_path(dir, model_file), read_options);
  const ValueView msv(ms, model_file);
  if (module_only || !options.load_optimizer_states) {
    load_module_weights(dir, *tag, ms, saved_stage, options.load_module_strict);
  } else {
    load_partitioned_state(dir, *tag, saved_stage, saved_world, ms);
  }
  bool scheduler_loaded = false;
  if (!module_only) {
    global_steps_ = msv["global_steps"].as_int();
    global_samples_ = msv.contains("global_samples") ? msv["global_samples"].as_int()
                                                     : global_steps_ * train_batch_size();
    skipped_steps_ = msv.contains("skipped_steps") ? msv["skipped_steps"].as_int() : 0;
    if (options.load_lr_scheduler_states && scheduler_ && msv.contains("lr_scheduler") &&
        !msv["lr_scheduler"].value().is_none()) {
      scheduler_->load_state_dict(ckpt::to_json(msv["lr_scheduler"].value()));
      apply_schedule();
      scheduler_loaded = true;
    }
    const std::string rng_name = ckpt::rng_state_name(rank);
    if (saved_world == comm_->size() && manifest.find(rng_name) != nullptr) {
      const Value rng = ckpt::load_pt(ckpt::join_path(dir, rng_name));
      at::Generator gen = at::detail::getDefaultCPUGenerator();
      std::lock_guard<std::mutex> lock(gen.mutex());
      gen.set_state(ValueView(rng, rng_name)["cpu_rng_state"].as_tensor());
    }
  }
  LoadedCheckpoint loaded;
  loaded.path = dir;
  loaded.client_state = Value::dict();
  for (const auto& [key, value] : msv.as_dict()) {
    if (!key.is_str() || consumed_key(key.as_str(), scheduler_loaded)) continue;
    loaded.client_state.set(key, value);
  }
  comm_->barrier();
  if (module_only) {
    ZRT_LOG_INFO("loaded the module weights of checkpoint ", dir,
                 optimizer_ == nullptr ? " (inference: no optimizer or scheduler state)" : "");
  } else {
    ZRT_LOG_INFO("loaded checkpoint ", dir, " (global step ", global_steps_, ")");
  }
  return loaded;
}

void Engine::load_module_file(const std::string& path, bool strict) {
  ZRT_CHECK(!backward_pending_, "load_module_file() between backward() and step()");
  const bool st = path.size() > 12 && path.substr(path.size() - 12) == ".safetensors";
  std::unordered_map<std::string, at::Tensor> full;
  if (st) {
    for (auto& [name, t] : ckpt::load_safetensors(path).tensors) full[name] = t;
  } else {
    // A torch.save state dict (what save_16bit_model and zrt-ckpt to-fp32 write), or a dict whose
    // "module" / "state_dict" entry is one.
    ckpt::ReadOptions ro;
    ro.mode = ckpt::ReadMode::kTolerant;
    const Value file = ckpt::load_pt(path, ro);
    ValueView v(file, path);
    ZRT_CHECK_AS(CheckpointError, v.kind() == ckpt::ValueKind::kDict, path,
                 ": not a state dict (a ", ckpt::value_kind_name(v.kind()), ")");
    for (const char* wrapper : {"module", "state_dict"}) {
      if (v.contains(wrapper) && v[wrapper].kind() == ckpt::ValueKind::kDict) {
        v = v[wrapper];
        break;
      }
    }
    for (const auto& [key, value] : v.as_dict()) {
      if (key.is_str() && value.is_tensor()) full.emplace(key.as_str(), value.as_tensor());
    }
  }
  assign_module_weights(full, strict, path);
  comm_->barrier();
  ZRT_LOG_INFO("loaded the module weights of ", path);
}

bool Engine::save_16bit_model(const std::string& dir, const std::string& name) {
  const bool stage3 = config_.zero.stage == 3;
  if (stage3 && !config_.zero.gather_16bit_weights_on_model_save) {
    ZRT_LOG_WARN("Did not save the model ", ckpt::join_path(dir, name),
                 " because `stage3_gather_16bit_weights_on_model_save` is False; use zrt-ckpt "
                 "to-fp32 to consolidate a checkpoint instead");
    return false;
  }
  ckpt::validate_file_name(name);
  {
    std::optional<GatheredParameters> access;
    if (stage3) access.emplace(*this);
    if (comm_->rank() == 0) {
      ckpt::NamedTensors tensors;
      for (const auto& p : model_->named_parameters()) {
        tensors.emplace_back(p.key(), p.value().detach().clone());
      }
      for (const auto& b : model_->named_buffers())
        tensors.emplace_back(b.key(), b.value().clone());
      storage_->make_dirs(dir);
      const std::string path = ckpt::join_path(dir, name);
      const bool st = name.size() > 12 && name.substr(name.size() - 12) == ".safetensors";
      if (st) {
        ckpt::save_safetensors(tensors, path, {}, storage_.get());
      } else {
        ckpt::save_pt(ckpt::ordered_dict_of(tensors), path, storage_.get());
      }
    }
  }
  comm_->barrier();
  return true;
}

}  // namespace zrt
