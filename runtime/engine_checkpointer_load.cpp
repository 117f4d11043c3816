// EngineCheckpointer, the load side: load (checkpoints at the same world size and stage, and
// stage 0 at any) and load_module_file; loads by ranged reads (another world size or stage,
// universal checkpoints, ZeRO-3 weights only) are in engine_checkpointer_ranged.cpp. The writer is
// runtime/engine_checkpointer.cpp; the keys are in checkpoint/FORMAT.md.
#include <map>
#include <mutex>
#include <set>
#include <unordered_map>

#include <ATen/CPUGeneratorImpl.h>

#include "checkpoint/ds_files.h"
#include "checkpoint/ds_objects.h"
#include "checkpoint/layout.h"
#include "checkpoint/manifest.h"
#include "checkpoint/pt/pt_file.h"
#include "checkpoint/reshard.h"
#include "checkpoint/safetensors.h"
#include "checkpoint/storage.h"
#include "checkpoint/universal.h"
#include "checkpoint/value_view.h"
#include "checkpoint/zero_folder.h"
#include "core/error.h"
#include "core/logging.h"
#include "core/shard.h"
#include "optim/loss_scaler.h"
#include "optim/optimizer.h"
#include "runtime/checkpoint_access.h"
#include "runtime/checkpoint_state.h"
#include "runtime/engine_checkpointer.h"
#include "runtime/model_states.h"
#include "sched/lr_scheduler.h"
#include "zero/stage3_layout.h"

namespace zrt::runtime {

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

at::Tensor EngineCheckpointer::my_partition(
    int group, const std::function<at::Tensor(const std::string&)>& full,
    at::ScalarType dtype) const {
  // Note [Partition layouts] (checkpoint/reshard.h): the engine partitions like DeepSpeed.
  const GroupPartition g = engine_.model_states().group_partitions().at(group);
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

void EngineCheckpointer::load_module_weights(const std::string& dir, const std::string& tag,
                                             const Value& model_states, int saved_stage,
                                             bool strict) {
  at::NoGradGuard no_grad;
  if (saved_stage == 3) {
    // The module of a stage-3 file holds empty tensors: the weights are in the partitions.
    load_partitioned_weights(ckpt::ZeroFolder(dir), model_states, strict);
    return;
  }
  std::unordered_map<std::string, at::Tensor> full;
  const ValueView module = ValueView(model_states, dir)["module"];
  for (const auto& [key, value] : module.as_dict()) {
    if (value.is_tensor()) full.emplace(key.as_str(), value.as_tensor());
  }
  assign_module_weights(full, strict, dir);
}

void EngineCheckpointer::assign_module_weights(
    const std::unordered_map<std::string, at::Tensor>& full, bool strict, const std::string& dir) {
  at::NoGradGuard no_grad;
  ModelStates& states = engine_.model_states();
  // A tied parameter is loaded under its owner's name, or under an alias's when the file has only
  // that; an alias name is neither required nor unexpected.
  std::set<std::string> aliases;
  std::map<std::string, std::vector<std::string>> aliases_of;  // owner → its aliases
  for (const auto& [alias, owner] : engine_.tied_parameters()) {
    aliases.insert(alias);
    aliases_of[owner].push_back(alias);
  }
  auto find = [&](const std::string& name) {
    auto it = full.find(name);
    auto owned = aliases_of.find(name);
    if (it != full.end() || owned == aliases_of.end()) return it;
    for (const std::string& alias : owned->second) {
      it = full.find(alias);
      if (it != full.end()) return it;
    }
    return full.end();
  };
  // What the file must provide, checked before anything is written: the trainable parameters
  // (held through the states), the others (frozen ones, whole on every rank) and the buffers.
  std::vector<std::pair<std::string, std::vector<int64_t>>> wanted;
  std::set<std::string> trainable;
  for (const GroupPartition& g : states.group_partitions()) {
    for (const auto& [name, shape] : g.params) {
      wanted.emplace_back(name, shape);
      trainable.insert(name);
    }
  }
  std::vector<std::pair<std::string, at::Tensor>> whole;  // frozen parameters and buffers
  for (const auto& p : engine_.module().named_parameters()) {
    if (trainable.count(p.key()) == 0 && aliases.count(p.key()) == 0) {
      whole.emplace_back(p.key(), p.value());
    }
  }
  for (const auto& b : engine_.module().named_buffers()) whole.emplace_back(b.key(), b.value());
  for (const auto& [name, t] : whole) wanted.emplace_back(name, t.sizes().vec());
  std::set<std::string> expected;
  for (const auto& [name, shape] : wanted) {
    expected.insert(name);
    auto it = find(name);
    ZRT_CHECK_AS(CheckpointError, it != full.end() || !strict, dir,
                 ": the checkpoint has no weights for '", name,
                 "' (load with load_module_strict = false to skip it)");
    const bool fits = it == full.end() || it->second.numel() == ckpt::shape_numel(shape);
    ZRT_CHECK_AS(CheckpointError, fits, dir, ": '", name, "' has shape ", it->second.sizes(),
                 " in the checkpoint but ", c10::IntArrayRef(shape), " in the model");
  }
  if (strict) {
    for (const auto& [name, t] : full) {
      ZRT_CHECK_AS(CheckpointError, expected.count(name) != 0 || aliases.count(name) != 0, dir,
                   ": the checkpoint has weights for '", name, "', which the model does not have");
    }
  }
  auto value_of = [&](const std::string& name, const at::Tensor&) {
    auto it = find(name);
    return it == full.end() ? at::Tensor() : it->second;
  };
  states.write_whole_params(value_of);
  for (const auto& [name, t] : whole) {
    const at::Tensor value = value_of(name, t);
    if (value.defined() && zero::storage_allocated(t)) t.detach().copy_(value.view(t.sizes()));
  }
  masters_from_params(states);
}

void EngineCheckpointer::load_partitioned_state(const std::string& dir, const std::string& tag,
                                                int saved_stage, int saved_world,
                                                const Value& model_states) {
  at::NoGradGuard no_grad;
  comm::Comm& comm = engine_.comm();
  // A DeepSpeed-written tag (the transformers Trainer's checkpoint-N) has no manifest: the one
  // its files imply, and its files (DeepSpeed's pickled classes) read in tolerant mode.
  const ckpt::Manifest manifest = ckpt::open_tag(
      ckpt::parent_dir(dir), tag, ckpt::VerifyLevel::kSizes, &CheckpointAccess(engine_).storage());
  ckpt::ReadOptions ro;
  if (manifest.derived) ro.mode = ckpt::ReadMode::kTolerant;
  const bool bf16 = engine_.model_dtype() == at::kBFloat16;
  // Stage 0 always goes through the whole-parameter path: its layouts differ by model dtype
  // (Note [Stage 0 layouts]), and every rank holds everything anyway.
  const bool same =
      saved_stage != 0 && saved_stage == engine_.zero_stage() && saved_world == comm.size();
  Value loss_scaler;
  if (same) {
    loss_scaler = load_same_layout(dir, find_optim_file(manifest, comm.rank(), bf16), ro);
  } else if (saved_stage > 0) {
    // Another world size or stage: each rank reads its new partitions' ranges from every rank's
    // files.
    for (int r = 0; r < saved_world; ++r) find_optim_file(manifest, r, bf16);  // all there
    load_ranged_state(ckpt::ZeroFolder(dir), model_states);
    ZRT_LOG_INFO("resharded checkpoint ", dir, " from stage ", saved_stage, " x ", saved_world,
                 " ranks to stage ", engine_.zero_stage(), " x ", comm.size());
    return;
  } else {
    loss_scaler = load_stage0(dir, saved_world, model_states);
  }
  if (!loss_scaler.is_none()) {
    engine_.loss_scaler().load_state_dict(
        ckpt::ds_loss_scaler_state(loss_scaler, dir, engine_.loss_scaler().state_dict()));
  }
  params_from_masters(engine_.model_states());
  restore_whole_tensors(dir, model_states);
}

Value EngineCheckpointer::load_same_layout(const std::string& dir, const std::string& optim_file,
                                           const ckpt::ReadOptions& read_options) {
  ModelStates& states = engine_.model_states();
  auto& targets = states.targets();
  // Swapped states (NVMe offload) go from the file to the swap files through mappings of the
  // records, so that they are never whole in memory.
  ckpt::ReadOptions options = read_options;
  const bool swapped = states.swap_space() != nullptr;
  if (swapped) options.map_storages_from = uint64_t{1} << 20;
  const ckpt::DsOptimStatesFile file = ckpt::DsOptimStatesFile::read(
      ckpt::load_pt(ckpt::join_path(dir, optim_file), options), optim_file);
  ZRT_CHECK_AS(CheckpointError, file.fp32.size() == targets.size(), optim_file, ": ",
               file.fp32.size(), " fp32 groups saved, the engine has ", targets.size());
  for (size_t g = 0; g < targets.size(); ++g) {
    const at::Tensor& saved = file.fp32[g];
    const int64_t n = targets[g].master.numel();
    ZRT_CHECK_AS(CheckpointError, saved.numel() <= n, optim_file, ": fp32 group ", g, " has ",
                 saved.numel(), " elements, the partition ", n);
    store_master(states, g, saved);  // no whole copy: a swapped master takes it by windows
    if (saved.numel() < n) store_master(states, g, at::zeros({n - saved.numel()}), saved.numel());
  }
  engine_.optimizer()->load_state_dict(optimizer_state_from_value(file.base_view(optim_file)));
  return file.loss_scaler;
}

Value EngineCheckpointer::load_stage0(const std::string& dir, int saved_world,
                                      const Value& model_states) {
  // DeepSpeed without ZeRO writes no param_shapes: its optimizer's groups are the engine's.
  ParamShapes shapes;
  const ValueView ms(model_states, dir);
  if (ms.contains("param_shapes") && !ms["param_shapes"].value().is_none()) {
    shapes = ckpt::param_shapes_of(ms);
  } else {
    for (const GroupPartition& g : engine_.model_states().group_partitions()) {
      shapes.push_back(g.params);
    }
  }
  FullState full = reassemble_stage0_state(shapes, model_states, dir);
  const std::vector<GroupPartition> mine = engine_.model_states().group_partitions();
  ZRT_CHECK_AS(CheckpointError, mine.size() == shapes.size(), dir, ": the checkpoint has ",
               shapes.size(), " parameter groups, the engine ", mine.size());
  for (size_t g = 0; g < mine.size(); ++g) {
    for (const auto& [name, shape] : mine[g].params) {
      const int64_t numel = ckpt::shape_numel(shape);
      auto it = full.params.find(name);
      ZRT_CHECK_AS(CheckpointError, it != full.params.end() && it->second.fp32.defined(), dir,
                   ": parameter '", name, "' of group ", g, " is missing from the checkpoint");
      ZRT_CHECK_AS(CheckpointError, it->second.fp32.numel() == numel, dir, ": parameter '", name,
                   "' has ", it->second.fp32.numel(), " elements in the checkpoint but ", numel,
                   " in the model");
    }
  }
  auto part_of = [&](size_t g, at::Tensor FullParamState::*member) {
    return my_partition(
        static_cast<int>(g), [&](const std::string& n) { return full.params.at(n).*member; },
        at::kFloat);
  };
  auto& targets = engine_.model_states().targets();
  optim::OptimizerState state;
  state.optimizer = full.optimizer;
  for (size_t g = 0; g < targets.size(); ++g) {
    store_master(engine_.model_states(), g, part_of(g, &FullParamState::fp32));
    const std::string& first = mine[g].params.front().first;
    optim::ParamState ps;
    ps.step = full.group_steps[g];
    if (full.params.at(first).exp_avg.defined()) {
      ps.exp_avg = part_of(g, &FullParamState::exp_avg);
      ps.exp_avg_sq = part_of(g, &FullParamState::exp_avg_sq);
      state.state[static_cast<int64_t>(g)] = ps;
    } else if (full.params.at(first).momentum.defined()) {
      ps.momentum_buffer = part_of(g, &FullParamState::momentum);
      state.state[static_cast<int64_t>(g)] = ps;
    }
    optim::ParamGroupState hyper = full.group_hyper[g];
    hyper.params = {static_cast<int64_t>(g)};
    state.param_groups.push_back(hyper);
  }
  engine_.optimizer()->load_state_dict(state);
  ZRT_LOG_INFO("resharded checkpoint ", dir, " from stage 0 x ", saved_world, " ranks to stage ",
               engine_.zero_stage(), " x ", engine_.comm().size());
  return full.loss_scaler;
}

void EngineCheckpointer::to_model_names(Value& model_states) const {
  if (!engine_.renames_checkpoints() || !model_states.is_dict()) return;
  std::map<std::string, std::string> model_name;  // checkpoint name -> the model's
  for (const auto& p : engine_.module().named_parameters())
    model_name[engine_.checkpoint_name(p.key())] = p.key();
  for (const auto& b : engine_.module().named_buffers())
    model_name[engine_.checkpoint_name(b.key())] = b.key();
  auto renamed = [&](const std::string& name) {
    auto it = model_name.find(name);
    return it == model_name.end() ? name : it->second;
  };
  auto rename_keys = [&](Value& dict) {
    if (!dict.is_dict()) return;
    Value out = dict.is_ordered_dict() ? Value::ordered_dict() : Value::dict();
    for (const auto& [key, value] : dict.as_dict().items())
      out.set(key.is_str() ? ckpt::Key(renamed(key.as_str())) : key, value);
    dict = std::move(out);
  };
  for (const char* key : {"module", "frozen_param_shapes", "frozen_param_fragments"}) {
    if (Value* v = model_states.as_dict().find(key)) rename_keys(*v);
  }
  if (Value* groups = model_states.as_dict().find("param_shapes"); groups && groups->is_sequence()) {
    for (Value& g : groups->items()) rename_keys(g);
  }
  if (Value* names = model_states.as_dict().find("buffer_names"); names && names->is_sequence()) {
    for (Value& n : names->items())
      if (n.is_string()) n = Value(renamed(n.as_string()));
  }
  if (Value* shared = model_states.as_dict().find("shared_params"); shared && shared->is_dict()) {
    Value out = Value::dict();
    for (const auto& [alias, owner] : shared->as_dict().items()) {
      out.set(alias.is_str() ? ckpt::Key(renamed(alias.as_str())) : alias,
              owner.is_string() ? Value(renamed(owner.as_string())) : owner);
    }
    *shared = std::move(out);
  }
}

void EngineCheckpointer::restore_whole_tensors(const std::string& dir, const Value& model_states) {
  at::NoGradGuard no_grad;
  const ValueView module = ValueView(model_states, dir)["module"];
  for (const auto& b : engine_.module().named_buffers()) {
    if (module.contains(b.key()))
      b.value().copy_(module[b.key()].as_tensor().view(b.value().sizes()));
  }
  restore_frozen(dir, model_states);
}

std::optional<LoadedCheckpoint> EngineCheckpointer::load(const std::string& load_dir,
                                                         const std::optional<std::string>& tag_arg,
                                                         const LoadCheckpointOptions& options) {
  ZRT_CHECK(
      !CheckpointAccess(engine_).backward_pending(),
      "load_checkpoint() between backward() and step(): load before training or after step()");
  if (engine_.config().checkpoint.load_universal) return load_universal(load_dir, tag_arg, options);
  comm::Comm& comm = engine_.comm();
  ckpt::Storage& storage = CheckpointAccess(engine_).storage();
  std::optional<std::string> tag = tag_arg;
  if (!tag) tag = ckpt::read_latest(load_dir, &storage);
  if (!tag) {
    ZRT_LOG_WARN("Unable to find latest file at ", load_dir,
                 "/latest, if trying to load latest checkpoint please ensure this file exists or "
                 "pass an explicit checkpoint tag when loading a checkpoint.");
    return std::nullopt;
  }
  // A ZeroRT tag is verified against its manifest; a DeepSpeed-written one has none, and its
  // files (which pickle DeepSpeed's own classes) are read in tolerant mode.
  const ckpt::Manifest manifest =
      ckpt::open_tag(load_dir, *tag, ckpt::VerifyLevel::kSizes, &storage);
  ckpt::ReadOptions read_options;
  if (manifest.derived) read_options.mode = ckpt::ReadMode::kTolerant;
  const std::string dir = ckpt::tag_path(load_dir, *tag);
  const int saved_stage = manifest.zero_stage;
  const int saved_world = manifest.world_size;
  const int rank = comm.rank();
  // Stage 0 always goes through the whole-parameter path: its layouts differ by model dtype
  // (Note [Stage 0 layouts]), and every rank holds everything anyway.
  const bool same =
      saved_stage != 0 && saved_stage == engine_.zero_stage() && saved_world == comm.size();
  // Without an optimizer (inference) there is nothing but the module to load into: weights only,
  // as DeepSpeed's load_module_only; the optimizer and scheduler files are never read.
  const bool module_only = options.load_module_only || engine_.optimizer() == nullptr;
  const std::string model_file = ckpt::model_states_name_of(saved_stage, same ? rank : 0);
  Value ms = ckpt::load_pt(ckpt::join_path(dir, model_file), read_options);
  to_model_names(ms);
  if (module_only || !options.load_optimizer_states) {
    load_module_weights(dir, *tag, ms, saved_stage, options.load_module_strict);
  } else {
    load_partitioned_state(dir, *tag, saved_stage, saved_world, ms);
  }
  const std::string rng_name = ckpt::rng_state_name(rank);
  const bool rng = saved_world == comm.size() && manifest.find(rng_name) != nullptr;
  return finish_load(dir, ms, options, module_only, rng ? rng_name : std::string());
}

std::optional<LoadedCheckpoint> EngineCheckpointer::finish_load(
    const std::string& dir, const Value& ms, const LoadCheckpointOptions& options, bool module_only,
    const std::string& rng_file) {
  comm::Comm& comm = engine_.comm();
  const ValueView msv(ms, dir);
  bool scheduler_loaded = false;
  if (!module_only) {
    const int64_t steps = msv["global_steps"].as_int();
    CheckpointAccess(engine_).restore_counters(
        steps,
        msv.contains("global_samples") ? msv["global_samples"].as_int()
                                       : steps * engine_.train_batch_size(),
        msv.contains("skipped_steps") ? msv["skipped_steps"].as_int() : 0);
    if (options.load_lr_scheduler_states && engine_.lr_scheduler() != nullptr &&
        msv.contains("lr_scheduler") && !msv["lr_scheduler"].value().is_none()) {
      CheckpointAccess(engine_).load_lr_scheduler_state(ckpt::to_json(msv["lr_scheduler"].value()));
      scheduler_loaded = true;
    }
    if (!rng_file.empty()) {
      const Value rng = ckpt::load_pt(ckpt::join_path(dir, rng_file));
      at::Generator gen = at::detail::getDefaultCPUGenerator();
      std::lock_guard<std::mutex> lock(gen.mutex());
      gen.set_state(ValueView(rng, rng_file)["cpu_rng_state"].as_tensor());
    }
  }
  LoadedCheckpoint loaded;
  loaded.path = dir;
  loaded.client_state = Value::dict();
  for (const auto& [key, value] : msv.as_dict()) {
    if (!key.is_str() || consumed_key(key.as_str(), scheduler_loaded)) continue;
    loaded.client_state.set(key, value);
  }
  comm.barrier();
  if (module_only) {
    ZRT_LOG_INFO(
        "loaded the module weights of checkpoint ", dir,
        engine_.optimizer() == nullptr ? " (inference: no optimizer or scheduler state)" : "");
  } else {
    ZRT_LOG_INFO("loaded checkpoint ", dir, " (global step ", engine_.global_steps(), ")");
  }
  return loaded;
}

void EngineCheckpointer::load_module_file(const std::string& path, bool strict) {
  ZRT_CHECK(!CheckpointAccess(engine_).backward_pending(),
            "load_module_file() between backward() and step()");
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
  engine_.comm().barrier();
  ZRT_LOG_INFO("loaded the module weights of ", path);
}

}  // namespace zrt::runtime
