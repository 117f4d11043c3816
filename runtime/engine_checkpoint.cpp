// Engine checkpoints in DeepSpeed's layout (spec/deepspeed.md §4; checkpoint/FORMAT.md "Engine
// keys"): what each rank writes, how a checkpoint is read back — at the same world size and stage
// from this rank's own files, otherwise by reassembling whole parameters from every rank's files —
// and save_16bit_model.
#include <ATen/CPUGeneratorImpl.h>

#include "checkpoint/commit.h"
#include "checkpoint/consolidate.h"
#include "checkpoint/layout.h"
#include "checkpoint/manifest.h"
#include "checkpoint/pt_file.h"
#include "checkpoint/safetensors.h"
#include "config/resolved.h"
#include "core/error.h"
#include "core/logging.h"
#include "core/shard.h"
#include "optim/loss_scaler.h"
#include "optim/optimizer.h"
#include "runtime/checkpoint_state.h"
#include "runtime/engine.h"
#include "runtime/flat_model_states.h"
#include "runtime/stage3_model_states.h"
#include "sched/lr_scheduler.h"
#include "zrt/build_config.h"

namespace zrt {

using ckpt::Value;
using ckpt::ValueView;

namespace {

// DeepSpeed's loaders compare ds_version; a local version label keeps them working.
std::string ds_version() { return std::string("0.16.5+zrt.") + ZRT_VERSION; }

}  // namespace

// ---- what is written ------------------------------------------------------------------------

Value Engine::module_state_dict() {
  auto* s3 = dynamic_cast<runtime::Stage3ModelStates*>(states_.get());
  Value module = Value::ordered_dict();
  for (const auto& p : model_->named_parameters()) {
    at::Tensor t = p.value().detach();
    // Under ZeRO-3 DeepSpeed writes an empty tensor for every partitioned parameter, gathered or
    // not (its load_checkpoint copies the module into parameters of shape [0] and refuses full
    // shapes); the weights are in the optimizer files.
    if (s3 != nullptr && (p.value().requires_grad() || !zero::storage_allocated(t))) {
      t = at::empty({0}, t.options());
    }
    module.set(p.key(), t);
  }
  for (const auto& b : model_->named_buffers()) module.set(b.key(), b.value().detach());
  return module;
}

std::vector<std::vector<std::pair<std::string, std::vector<int64_t>>>> Engine::param_shapes()
    const {
  std::vector<std::vector<std::pair<std::string, std::vector<int64_t>>>> shapes;
  for (runtime::GroupPartition& g : states_->group_partitions()) shapes.push_back(std::move(g.params));
  return shapes;
}

Value Engine::model_states_value(bool with_module) {
  Value d = Value::dict();
  d.set("module", with_module ? module_state_dict() : Value::ordered_dict());
  Value buffer_names = Value::list();
  for (const auto& b : model_->named_buffers()) buffer_names.push_back(b.key());
  d.set("buffer_names", std::move(buffer_names));
  const int stage = config_.zero.stage;
  if (stage == 0 && optimizer_) {
    // DeepSpeed's non-ZeRO layout: the optimizer inside the model states, with its fp32 flat
    // groups (as its FP16_Optimizer saves fp32_groups_flat).
    Value opt = Value::dict();
    opt.set("optimizer_state_dict", runtime::optimizer_state_to_value(optimizer_->state_dict()));
    Value flats = Value::list();
    for (const auto& t : states_->targets()) flats.push_back(t.master);
    opt.set("fp32_groups_flat", std::move(flats));
    opt.set("loss_scaler", ckpt::from_json(loss_scaler_->state_dict()));
    opt.set("dynamic_loss_scale",
            config_.effective_loss_scale().dynamic && model_dtype_ == at::kHalf);
    opt.set("clip_grad", config_.gradient_clipping);
    d.set("optimizer", std::move(opt));
  } else {
    d.set("optimizer", Value());
  }
  Value shapes = Value::list();
  for (const auto& group : param_shapes()) {
    Value g = Value::ordered_dict();
    for (const auto& [name, shape] : group) g.set(name, Value::torch_size(shape));
    shapes.push_back(std::move(g));
  }
  d.set("param_shapes", std::move(shapes));
  if (stage >= 2) {
    Value frozen_shapes = Value::ordered_dict();
    Value fragments = Value::dict();
    for (const auto& p : model_->named_parameters()) {
      if (p.value().requires_grad()) continue;
      frozen_shapes.set(p.key(), Value::torch_size(p.value().sizes().vec()));
      at::Tensor full = p.value().detach().reshape({-1});
      if (stage == 3) {
        const ShardInfo mine = param_shard(full.numel(), comm_->rank(), comm_->size());
        at::Tensor frag =
            at::zeros({param_partition_size(full.numel(), comm_->size())}, full.options());
        if (mine.size > 0)
          frag.narrow(0, 0, mine.size).copy_(full.narrow(0, mine.offset, mine.size));
        fragments.set(p.key(), frag);
      } else {
        fragments.set(p.key(), p.value().detach());
      }
    }
    d.set("frozen_param_shapes", std::move(frozen_shapes));
    d.set("frozen_param_fragments", std::move(fragments));
  }
  Value shared = Value::dict();
  if (comm_->rank() == 0) {
    for (const auto& [alias, owner] : aliases_) shared.set(alias, owner);
  }
  d.set("shared_params", std::move(shared));
  d.set("lr_scheduler", scheduler_ ? ckpt::from_json(scheduler_->state_dict()) : Value());
  d.set("data_sampler", Value());
  d.set("random_ltd", Value());
  d.set("sparse_tensor_module_names", Value::list());
  d.set("skipped_steps", skipped_steps_);
  d.set("global_steps", global_steps_);
  d.set("global_samples", global_samples_);
  d.set("dp_world_size", comm_->size());
  d.set("mp_world_size", 1);
  d.set("ds_config", ckpt::from_json(config::to_json(config_)));
  d.set("ds_version", ds_version());
  return d;
}

namespace {

// The .pt writer, like torch.save, writes the whole storage of every tensor it meets. A master
// partition of stages 1-2 may be a view into the whole flat buffer (fp32 models train the flat
// parameters in place), so it is re-wrapped without a copy in a storage of its own bytes: each
// rank's optimizer file then holds its Ψ/N, not the whole Ψ.
at::Tensor with_own_storage(const at::Tensor& t) {
  if (t.storage_offset() == 0 && t.storage().nbytes() == t.nbytes()) return t;
  ZRT_INTERNAL_ASSERT(t.is_contiguous(), "a master partition is contiguous");
  at::Tensor keep_alive = t;
  return at::from_blob(
      t.data_ptr(), t.sizes(), [keep_alive](void*) {}, t.options());
}

}  // namespace

Value Engine::optim_states_value() {
  const int stage = config_.zero.stage;
  const int rank = comm_->rank();
  Value osd = Value::dict();
  osd.set("zero_stage", stage);
  osd.set("loss_scaler", ckpt::from_json(loss_scaler_->state_dict()));
  osd.set("dynamic_loss_scale",
          config_.effective_loss_scale().dynamic && model_dtype_ == at::kHalf);
  osd.set("overflow", false);
  osd.set("clip_grad", config_.gradient_clipping);
  const Value base = runtime::optimizer_state_to_value(optimizer_->state_dict());
  const auto& targets = states_->targets();
  if (stage == 3) {
    osd.set("partition_count", comm_->size());
    osd.set("optimizer_state_dict", base);
    Value flats = Value::list();
    for (const auto& t : targets) flats.push_back(t.master);
    osd.set("fp32_flat_groups", std::move(flats));
  } else {
    const auto& flat = dynamic_cast<const runtime::FlatModelStates&>(*states_);
    osd.set("base_optimizer_state", base);
    Value singles = Value::list();
    Value paddings = Value::list();
    Value counts = Value::list();
    Value mappings = Value::list();
    for (size_t g = 0; g < targets.size(); ++g) {
      const zero::FlatGroup& group = flat.groups()[g];
      const FlatPartition& part = group.partition();
      const int64_t padding = part.padding(rank);
      singles.push_back(
          with_own_storage(targets[g].master.narrow(0, 0, part.partition_size - padding)));
      paddings.push_back(padding);
      counts.push_back(comm_->size());
      Value map = Value::ordered_dict();
      const ShardInfo mine = part.partition(rank);
      for (const zero::FlatParam& p : group.params()) {
        const ShardInfo frag = intersect(mine, ShardInfo{p.offset, p.numel});
        if (frag.size == 0) continue;
        Value address = Value::dict();
        address.set("numel", frag.size);
        address.set("start", frag.offset - mine.offset);
        map.set(p.name, std::move(address));
      }
      mappings.push_back(std::move(map));
    }
    osd.set("single_partition_of_fp32_groups", std::move(singles));
    osd.set("group_paddings", std::move(paddings));
    osd.set("partition_count", std::move(counts));
    osd.set("param_slice_mappings", std::move(mappings));
  }
  osd.set("ds_version", ds_version());
  Value file = Value::dict();
  file.set("optimizer_state_dict", std::move(osd));
  file.set("ds_config", ckpt::from_json(config::to_json(config_)));
  file.set("ds_version", ds_version());
  return file;
}

std::string Engine::save_checkpoint(const std::string& save_dir,
                                    const std::optional<std::string>& tag,
                                    const Value& client_state, bool save_latest) {
  ZRT_CHECK(!backward_pending_,
            "save_checkpoint() between backward() and step(): save after step()");
  ZRT_CHECK_AS(CheckpointError, client_state.is_dict(),
               "save_checkpoint: client_state must be a dict, got ", client_state.kind_name());
  const std::string name = tag.value_or(ckpt::default_tag(global_steps_));
  ckpt::validate_tag(name);
  const int stage = config_.zero.stage;
  const int rank = comm_->rank();
  const bool writer =
      config_.checkpoint.use_node_local_storage ? comm_->local_rank() == 0 : rank == 0;
  std::vector<ckpt::PendingFile> files;
  if (stage == 3 || writer) {
    Value ms = model_states_value(/*with_module=*/true);
    for (const auto& [key, value] : client_state.as_dict()) ms.set(key, value);
    files.push_back(ckpt::PendingFile::pt(
        stage == 3 ? ckpt::zero3_model_states_name(rank) : ckpt::model_states_name(),
        std::move(ms)));
  }
  if (stage >= 1 && optimizer_) {
    files.push_back(ckpt::PendingFile::pt(
        ckpt::optim_states_name(rank, model_dtype_ == at::kBFloat16), optim_states_value()));
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
  spec.engine = {{"global_steps", global_steps_},
                 {"global_samples", global_samples_},
                 {"dtype", c10::toString(model_dtype_)},
                 {"optimizer", optimizer_ ? optimizer_->name() : "none"}};
  const ckpt::CommitResult result =
      ckpt::commit_checkpoint(*comm_, *storage_, spec, config_.checkpoint);
  ZRT_LOG_INFO("saved checkpoint ", result.tag_dir, " (", result.manifest.files.size(), " files)");
  return result.tag_dir;
}

}  // namespace zrt
