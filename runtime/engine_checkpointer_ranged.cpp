// EngineCheckpointer, loads by ranged reads: each rank reads only the elements of its own
// partitions from whole-parameter state (checkpoint/zero_folder.h WholeStateSource): a ZeRO
// folder of another world size or stage, a universal folder (load_universal), the fp32 flats of a
// ZeRO-3 checkpoint for a weights-only load. The rest of loading is in
// engine_checkpointer_load.cpp.
#include <set>
#include <unordered_map>

#include "checkpoint/ds_objects.h"
#include "checkpoint/layout.h"
#include "checkpoint/pt/pt_file.h"
#include "checkpoint/reshard.h"
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

namespace zrt::runtime {

using ckpt::Value;
using ckpt::ValueView;

namespace {

// Whether the checkpoint has optimizer state (`moment`) for group `gp`: a file of any
// of its parameters says so, and then every parameter must have it.
bool group_stepped(const ckpt::WholeStateSource& folder, const GroupPartition& gp,
                   const char* moment) {
  for (const auto& [name, shape] : gp.params) {
    if (folder.has(name, moment)) return true;
  }
  return false;
}

// Every rank checks every file of every group before any is read, so that all fail alike (a rank
// that alone missed a file of its partition would leave the others waiting in a collective).
void check_complete(const ckpt::WholeStateSource& folder, const std::vector<GroupPartition>& groups,
                    bool sgd) {
  const char* moment = sgd ? "momentum_buffer" : ckpt::kExpAvgState;
  for (const GroupPartition& gp : groups) {
    const bool stepped = group_stepped(folder, gp, moment);
    for (const auto& [name, shape] : gp.params) {
      std::vector<const char*> states = {ckpt::kFp32State};
      if (stepped && sgd) states.push_back("momentum_buffer");
      if (stepped && !sgd) states.insert(states.end(), {ckpt::kExpAvgState, ckpt::kExpAvgSqState});
      for (const char* which : states) {
        ZRT_CHECK_AS(CheckpointError, folder.has(name, which), folder.location(name, which),
                     ": missing (the checkpoint has no ", which, " for '", name, "')");
      }
    }
  }
}

}  // namespace

void EngineCheckpointer::load_partitioned_weights(const ckpt::WholeStateSource& src,
                                                  const Value& model_states, bool strict) {
  ModelStates& states = engine_.model_states();
  const std::vector<GroupPartition> groups = states.group_partitions();
  // Checked on every rank before anything is written: each trainable parameter's fp32 weights
  // are there with its number of elements, and (strict) the checkpoint has no others.
  const std::map<std::string, int64_t> saved = src.params();
  std::set<std::string> trainable;
  for (const GroupPartition& g : groups) {
    for (const auto& [name, shape] : g.params) {
      trainable.insert(name);
      const auto it = saved.find(name);
      ZRT_CHECK_AS(CheckpointError, it != saved.end() || !strict, src.where(),
                   ": the checkpoint has no weights for '", name,
                   "' (load with load_module_strict = false to skip it)");
      ZRT_CHECK_AS(CheckpointError, it == saved.end() || it->second == ckpt::shape_numel(shape),
                   src.where(), ": '", name, "' has ", it->second,
                   " elements in the checkpoint but ", c10::IntArrayRef(shape), " in the model");
    }
  }
  std::set<std::string> aliases;
  for (const auto& [alias, owner] : engine_.tied_parameters()) aliases.insert(alias);
  for (const auto& [name, numel] : saved) {
    ZRT_CHECK_AS(CheckpointError, !strict || trainable.count(name) || aliases.count(name),
                 src.where(), ": the checkpoint has weights for '", name,
                 "', which the model does not have");
  }
  // Each rank reads only its partitions' elements.
  const ckpt::RangeReader fp32 = src.reader(ckpt::kFp32State);
  ckpt::RangeReader read = [&](const std::string& name, int64_t numel, ShardInfo range) {
    return saved.count(name) != 0 ? fp32(name, numel, range) : at::Tensor();
  };
  for (size_t g = 0; g < groups.size(); ++g) {
    const GroupPartition& gp = groups[g];
    at::Tensor master = master_values(states, g);
    ckpt::fill_partition(gp.layout, gp.params, gp.rank, gp.world_size, read, master, src.where());
    store_master(states, g, master);
  }
  params_from_masters(states);
  restore_whole_tensors(src.where(), model_states);
}

std::optional<LoadedCheckpoint> EngineCheckpointer::load_universal(
    const std::string& load_dir, const std::optional<std::string>& tag_arg,
    const LoadCheckpointOptions& options) {
  std::optional<std::string> tag = tag_arg;
  if (!tag) {
    tag = ckpt::read_latest(load_dir, &CheckpointAccess(engine_).storage(),
                            ckpt::kLatestUniversalFile);
  }
  if (!tag) {
    ZRT_LOG_WARN("Unable to find latest_universal file at ", load_dir,
                 ": load_universal needs a universal checkpoint (zrt-ckpt to-universal or "
                 "DeepSpeed's ds_to_universal) or an explicit tag");
    return std::nullopt;
  }
  const std::string dir = ckpt::tag_path(load_dir, *tag);
  const ckpt::UniversalFolder folder(dir);
  ckpt::ReadOptions ro;
  ro.mode = ckpt::ReadMode::kTolerant;  // the model states may be DeepSpeed's
  const Value ms = ckpt::load_pt(ckpt::join_path(dir, folder.model_states_file()), ro);
  const bool module_only = options.load_module_only || engine_.optimizer() == nullptr;
  if (module_only || !options.load_optimizer_states) {
    load_partitioned_weights(folder, ms, options.load_module_strict);
  } else {
    load_ranged_state(folder, ms);
    ZRT_LOG_INFO("loaded universal checkpoint ", dir, " into stage ", engine_.zero_stage(), " x ",
                 engine_.comm().size(), " ranks");
  }
  return finish_load(dir, ms, options, module_only, std::string());
}

void EngineCheckpointer::load_ranged_state(const ckpt::WholeStateSource& src, const Value& ms) {
  at::NoGradGuard no_grad;
  // The groups' hyper-parameters, parsed as a torch optimizer state dict without state.
  Value groups = Value::dict();
  groups.set("state", Value::dict());
  groups.set("param_groups", src.param_groups());
  if (!src.optimizer_name().is_none()) groups.set("zrt_optimizer", src.optimizer_name());
  const optim::OptimizerState saved = optimizer_state_from_value(ValueView(groups, src.where()));
  const std::vector<GroupPartition> mine = engine_.model_states().group_partitions();
  ZRT_CHECK_AS(CheckpointError, saved.param_groups.size() == mine.size(), src.where(),
               ": the checkpoint has ", saved.param_groups.size(), " parameter groups, the engine ",
               mine.size());
  auto& targets = engine_.model_states().targets();
  const bool sgd = saved.optimizer == "SGD";
  const char* moment = sgd ? "momentum_buffer" : ckpt::kExpAvgState;
  check_complete(src, mine, sgd);
  optim::OptimizerState state;
  state.optimizer = saved.optimizer;
  for (size_t g = 0; g < mine.size(); ++g) {
    const GroupPartition& gp = mine[g];
    // This rank's partition of the group's `which`, by ranged reads.
    auto partition = [&](const char* which) {
      at::Tensor part =
          at::zeros({targets[g].master.numel()}, at::TensorOptions().dtype(at::kFloat));
      ckpt::fill_partition(gp.layout, gp.params, gp.rank, gp.world_size, src.reader(which), part,
                           src.where());
      return part;
    };
    store_master(engine_.model_states(), g, partition(ckpt::kFp32State));
    const std::string& first = gp.params.front().first;
    if (group_stepped(src, gp, moment)) {
      const std::optional<int64_t> step = src.step(first, g);
      ZRT_CHECK_AS(CheckpointError, step.has_value(), src.where(), ": group ", g,
                   " has optimizer state but no step (", src.location(first, "step"), ")");
      optim::ParamState ps;
      ps.step = *step;
      if (sgd) {
        ps.momentum_buffer = partition("momentum_buffer");
      } else {
        ps.exp_avg = partition(ckpt::kExpAvgState);
        ps.exp_avg_sq = partition(ckpt::kExpAvgSqState);
      }
      state.state[static_cast<int64_t>(g)] = std::move(ps);
    }
    optim::ParamGroupState hyper = saved.param_groups[g];
    hyper.params = {static_cast<int64_t>(g)};
    state.param_groups.push_back(hyper);
  }
  engine_.optimizer()->load_state_dict(state);
  if (!src.loss_scaler().is_none()) {
    engine_.loss_scaler().load_state_dict(ckpt::ds_loss_scaler_state(
        src.loss_scaler(), src.where(), engine_.loss_scaler().state_dict()));
  }
  params_from_masters(engine_.model_states());
  restore_whole_tensors(src.where(), ms);
}

}  // namespace zrt::runtime
