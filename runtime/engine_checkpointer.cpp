// EngineCheckpointer, the save side: what each rank writes (docs/DEEPSPEED.md §4;
// checkpoint/FORMAT.md "Engine keys") and save_16bit_model. The load side is in
// runtime/engine_checkpointer_load.cpp.
#include "runtime/engine_checkpointer.h"

#include <ATen/CPUGeneratorImpl.h>
#include <sys/stat.h>

#include <filesystem>

#include "checkpoint/commit.h"
#include "checkpoint/ds_files.h"
#include "checkpoint/ds_objects.h"
#include "checkpoint/layout.h"
#include "checkpoint/manifest.h"
#include "checkpoint/pt/pt_file.h"
#include "checkpoint/reshard.h"
#include "checkpoint/safetensors.h"
#include "checkpoint/storage.h"
#include "checkpoint/value_view.h"
#include "config/resolved.h"
#include "core/error.h"
#include "core/logging.h"
#include "core/shard.h"
#include "optim/loss_scaler.h"
#include "optim/optimizer.h"
#include "runtime/checkpoint_access.h"
#include "runtime/checkpoint_state.h"
#include "runtime/gathered_parameters.h"
#include "runtime/model_states.h"
#include "sched/lr_scheduler.h"
#include "zero/stage3_layout.h"
#include "zrt/build_config.h"

namespace zrt::runtime {

using ckpt::Value;
using ckpt::ValueView;

namespace {

// DeepSpeed's loaders compare ds_version; a local version label keeps them working.
std::string ds_version() { return std::string("0.16.5+zrt.") + ZRT_VERSION; }

}  // namespace

// ---- what is written ------------------------------------------------------------------------

ckpt::NamedShapes EngineCheckpointer::checkpoint_names(const ckpt::NamedShapes& params) const {
  ckpt::NamedShapes out;
  for (const auto& [name, shape] : params) out.emplace_back(engine_.checkpoint_name(name), shape);
  return out;
}

Value EngineCheckpointer::module_state_dict() {
  const bool partitioned = engine_.model_states().partitions_params();
  Value module = Value::ordered_dict();
  for (const auto& p : engine_.module().named_parameters()) {
    at::Tensor t = p.value().detach();
    // Under ZeRO-3 DeepSpeed writes an empty tensor for every partitioned parameter, gathered or
    // not (its load_checkpoint copies the module into parameters of shape [0] and refuses full
    // shapes); the weights are in the optimizer files, the frozen ones in frozen_param_fragments.
    if (partitioned) {
      t = at::empty({0}, t.options());
    }
    module.set(engine_.checkpoint_name(p.key()), t);
  }
  for (const auto& b : engine_.module().named_buffers())
    module.set(engine_.checkpoint_name(b.key()), b.value().detach());
  return module;
}

// Stage 2 and up: the frozen parameters' shapes (into *shapes) and their values, whole at stage 2,
// this rank's fragment at stage 3: its partition (Note [Frozen parameters under ZeRO-3]), or for
// a parameter held whole (a tied alias) the same elements cut from it.
Value EngineCheckpointer::frozen_params_value(Value* shapes) {
  comm::Comm& comm = engine_.comm();
  ModelStates& states = engine_.model_states();
  const FrozenPlaces places = frozen_places(states);
  Value fragments = Value::dict();
  for (const auto& p : engine_.module().named_parameters()) {
    if (p.value().requires_grad()) continue;
    const std::string name = engine_.checkpoint_name(p.key());
    shapes->set(name, Value::torch_size(p.value().sizes().vec()));
    if (engine_.zero_stage() != 3) {
      fragments.set(name, p.value().detach());
      continue;
    }
    const int64_t size = param_partition_size(p.value().numel(), comm.size());
    if (auto it = places.find(p.key()); it != places.end()) {
      const auto& [flat, offset] = it->second;
      fragments.set(name, states.read_lp(flat, offset, size).clone());
      continue;
    }
    const at::Tensor full = p.value().detach().reshape({-1});
    const ShardInfo mine = param_shard(full.numel(), comm.rank(), comm.size());
    at::Tensor frag = at::zeros({size}, full.options());
    if (mine.size > 0) frag.narrow(0, 0, mine.size).copy_(full.narrow(0, mine.offset, mine.size));
    fragments.set(name, frag);
  }
  return fragments;
}

Value EngineCheckpointer::model_states_value(bool with_module) {
  const config::ResolvedConfig& config = engine_.config();
  comm::Comm& comm = engine_.comm();
  ModelStates& states = engine_.model_states();
  optim::Optimizer* optimizer = engine_.optimizer();
  Value d = Value::dict();
  d.set("module", with_module ? module_state_dict() : Value::ordered_dict());
  Value buffer_names = Value::list();
  for (const auto& b : engine_.module().named_buffers())
    buffer_names.push_back(engine_.checkpoint_name(b.key()));
  d.set("buffer_names", std::move(buffer_names));
  const int stage = config.zero.stage;
  const std::vector<GroupPartition> groups = states.group_partitions();
  if (stage == 0 && optimizer != nullptr) {
    // DeepSpeed's non-ZeRO layouts: the optimizer inside the model states, as the optimizer it
    // wraps for the model dtype saves itself (Note [Stage 0 layouts]).
    std::vector<at::Tensor> masters;
    for (size_t g = 0; g < states.targets().size(); ++g)
      masters.push_back(master_values(states, g));
    ParamShapes shapes;
    for (const GroupPartition& group : groups) shapes.push_back(checkpoint_names(group.params));
    d.set("optimizer",
          stage0_optimizer_value(optimizer->state_dict(), masters, shapes, engine_.model_dtype(),
                                 engine_.loss_scaler().state_dict(), config.gradient_clipping));
  } else {
    d.set("optimizer", Value());
  }
  Value shapes = Value::list();
  for (const GroupPartition& group : groups) {
    Value g = Value::ordered_dict();
    for (const auto& [name, shape] : group.params)
      g.set(engine_.checkpoint_name(name), Value::torch_size(shape));
    shapes.push_back(std::move(g));
  }
  d.set("param_shapes", std::move(shapes));
  if (stage >= 2) {
    Value frozen_shapes = Value::ordered_dict();
    Value fragments = frozen_params_value(&frozen_shapes);
    d.set("frozen_param_shapes", std::move(frozen_shapes));
    d.set("frozen_param_fragments", std::move(fragments));
  }
  Value shared = Value::dict();
  if (comm.rank() == 0) {
    for (const auto& [alias, owner] : engine_.tied_parameters())
      shared.set(engine_.checkpoint_name(alias), engine_.checkpoint_name(owner));
  }
  d.set("shared_params", std::move(shared));
  sched::LRScheduler* scheduler = engine_.lr_scheduler();
  d.set("lr_scheduler", scheduler != nullptr ? ckpt::from_json(scheduler->state_dict()) : Value());
  d.set("data_sampler", Value());
  d.set("random_ltd", Value());
  d.set("sparse_tensor_module_names", Value::list());
  d.set("skipped_steps", engine_.skipped_steps());
  d.set("global_steps", engine_.global_steps());
  d.set("global_samples", engine_.global_samples());
  d.set("dp_world_size", comm.size());
  d.set("mp_world_size", 1);
  d.set("ds_config", ckpt::from_json(config::to_json(config)));
  d.set("ds_version", ds_version());
  return d;
}

Value EngineCheckpointer::optim_states_value() {
  const config::ResolvedConfig& config = engine_.config();
  ModelStates& states = engine_.model_states();
  ckpt::DsOptimStatesFile file;
  file.zero_stage = config.zero.stage;
  file.world_size = engine_.comm().size();
  file.base = optimizer_state_to_value(engine_.optimizer()->state_dict());
  file.loss_scaler = ckpt::ds_loss_scaler_value(engine_.loss_scaler().state_dict());
  file.dynamic_loss_scale =
      config.effective_loss_scale().dynamic && engine_.model_dtype() == at::kHalf;
  file.clip_grad = config.gradient_clipping;
  std::vector<ckpt::NamedShapes> groups;
  for (const GroupPartition& group : states.group_partitions())
    groups.push_back(checkpoint_names(group.params));
  std::vector<at::Tensor> masters;
  for (size_t g = 0; g < states.targets().size(); ++g) masters.push_back(master_to_read(states, g));
  return file.to_value(engine_.comm().rank(), groups, masters,
                       ckpt::from_json(config::to_json(config)), ds_version());
}

namespace {

// Note [zero_to_fp32.py in a save_dir]: DeepSpeed copies its zero_to_fp32.py into every ZeRO
// save_dir (docs/DEEPSPEED.md §4.1) and HF users run `python zero_to_fp32.py . out`. ZeroRT writes
// its own script of that name and those arguments, which runs `zrt-ckpt to-fp32` (found next to
// the program that saved, through ZRT_CKPT, or on PATH); DeepSpeed's own script reads the
// checkpoint as well.
std::string zero_to_fp32_script() {
  std::error_code ec;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  const std::string beside = ec ? "" : (self.parent_path() / "zrt-ckpt").string();
  std::string quoted;  // a Python string literal of `beside`
  for (char c : beside) {
    if (c == '\\' || c == '"') quoted += '\\';
    quoted += c;
  }
  return str(R"PY(#!/usr/bin/env python3
"""Consolidates this ZeRO checkpoint into full fp32 weights, as DeepSpeed's script of this name
does and with its arguments (CHECKPOINT_DIR OUTPUT [--safetensors] [--tag T]
[--exclude_frozen_parameters]). Written by ZeroRT: it runs ZeroRT's `zrt-ckpt to-fp32`. DeepSpeed's
own zero_to_fp32.py reads this checkpoint too."""
import os
import shutil
import sys

SAVED_BY = ")PY", quoted, R"PY("  # zrt-ckpt next to the program that saved
tool = os.environ.get("ZRT_CKPT") or (SAVED_BY if os.access(SAVED_BY, os.X_OK) else None)
tool = tool or shutil.which("zrt-ckpt")
if not tool:
    sys.exit("zero_to_fp32.py: zrt-ckpt not found: set ZRT_CKPT or put ZeroRT's bin folder on "
             "PATH (DeepSpeed's own zero_to_fp32.py reads this checkpoint too)")
os.execv(tool, [tool, "to-fp32"] + sys.argv[1:])
)PY");
}

void write_zero_to_fp32(ckpt::Storage& storage, const std::string& save_dir) {
  const std::string path = ckpt::join_path(save_dir, "zero_to_fp32.py");
  try {
    storage.write_file_atomic(path, zero_to_fp32_script());
    ::chmod(path.c_str(), 0755);  // as DeepSpeed's copy (a storage other than POSIX: no effect)
  } catch (const std::exception& e) {
    ZRT_LOG_WARN("could not write ", path, ": ", e.what(), " (the checkpoint itself is saved)");
  }
}

}  // namespace

std::string EngineCheckpointer::save(const std::string& save_dir,
                                     const std::optional<std::string>& tag,
                                     const Value& client_state, bool save_latest) {
  ZRT_CHECK(!CheckpointAccess(engine_).backward_pending(),
            "save_checkpoint() between backward() and step(): save after step()");
  ZRT_CHECK_AS(CheckpointError, client_state.is_dict(),
               "save_checkpoint: client_state must be a dict, got ", client_state.kind_name());
  const config::ResolvedConfig& config = engine_.config();
  comm::Comm& comm = engine_.comm();
  const at::ScalarType dtype = engine_.model_dtype();
  optim::Optimizer* optimizer = engine_.optimizer();
  const std::string name = tag.value_or(ckpt::default_tag(engine_.global_steps()));
  ckpt::validate_tag(name);
  const int stage = config.zero.stage;
  const int rank = comm.rank();
  const bool writer = config.checkpoint.use_node_local_storage ? comm.local_rank() == 0 : rank == 0;
  std::vector<ckpt::PendingFile> files;
  if (stage == 3 || writer) {
    Value ms = model_states_value(/*with_module=*/true);
    for (const auto& [key, value] : client_state.as_dict()) ms.set(key, value);
    files.push_back(ckpt::PendingFile::pt(ckpt::model_states_name_of(stage, rank), std::move(ms)));
  }
  if (stage >= 1 && optimizer != nullptr) {
    files.push_back(ckpt::PendingFile::pt(ckpt::optim_states_name(rank, dtype == at::kBFloat16),
                                          optim_states_value()));
  }
  Value rng = Value::dict();
  rng.set("cpu_rng_state", at::detail::getDefaultCPUGenerator().get_state());
  files.push_back(ckpt::PendingFile::pt(ckpt::rng_state_name(rank), std::move(rng)));

  ckpt::CommitSpec spec;
  spec.save_dir = save_dir;
  spec.tag = name;
  spec.files = std::move(files);
  spec.zero_stage = stage;
  spec.save_latest = save_latest;
  spec.engine = {{"global_steps", engine_.global_steps()},
                 {"global_samples", engine_.global_samples()},
                 {"dtype", c10::toString(dtype)},
                 {"optimizer", optimizer != nullptr ? optimizer->name() : "none"}};
  const ckpt::CommitResult result =
      ckpt::commit_checkpoint(comm, CheckpointAccess(engine_).storage(), spec, config.checkpoint);
  if (stage > 0 && rank == 0) {
    write_zero_to_fp32(CheckpointAccess(engine_).storage(), save_dir);
  }
  ZRT_LOG_INFO("saved checkpoint ", result.tag_dir, " (", result.manifest.files.size(), " files)");
  return result.tag_dir;
}

bool EngineCheckpointer::save_16bit_model(const std::string& dir, const std::string& name) {
  const bool stage3 = engine_.zero_stage() == 3;
  if (stage3 && !engine_.config().zero.gather_16bit_weights_on_model_save) {
    ZRT_LOG_WARN("Did not save the model ", ckpt::join_path(dir, name),
                 " because `stage3_gather_16bit_weights_on_model_save` is False; use zrt-ckpt "
                 "to-fp32 to consolidate a checkpoint instead");
    return false;
  }
  ckpt::validate_file_name(name);
  ckpt::Storage& storage = CheckpointAccess(engine_).storage();
  {
    std::optional<GatheredParameters> access;
    if (stage3) access.emplace(engine_);
    if (engine_.comm().rank() == 0) {
      ckpt::NamedTensors tensors;
      for (const auto& p : engine_.module().named_parameters()) {
        tensors.emplace_back(p.key(), p.value().detach().clone());
      }
      for (const auto& b : engine_.module().named_buffers()) {
        tensors.emplace_back(b.key(), b.value().clone());
      }
      storage.make_dirs(dir);
      const std::string path = ckpt::join_path(dir, name);
      const bool st = name.size() > 12 && name.substr(name.size() - 12) == ".safetensors";
      if (st) {
        ckpt::save_safetensors(tensors, path, {}, &storage);
      } else {
        ckpt::save_pt(ckpt::ordered_dict_of(tensors), path, &storage);
      }
    }
  }
  engine_.comm().barrier();
  return true;
}

}  // namespace zrt::runtime
