// EngineCheckpointer: the frozen parameters on load (Note [Frozen parameters in checkpoints]).
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "checkpoint/layout.h"
#include "checkpoint/pt/pt_file.h"
#include "checkpoint/storage.h"
#include "checkpoint/value_view.h"
#include "core/error.h"
#include "core/logging.h"
#include "core/shard.h"
#include "runtime/engine_checkpointer.h"
#include "runtime/model_states.h"
#include "zero/stage3_layout.h"

namespace zrt::runtime {

using ckpt::Value;
using ckpt::ValueView;

// Note [Frozen parameters in checkpoints]
// Parameters that do not require grad are in no optimizer file. DeepSpeed records them, from
// stage 2 on, in the model states: "frozen_param_shapes" and "frozen_param_fragments" — the whole
// tensor at stage 2, at stage 3 each rank's partition (pn = ceil(numel/W) elements, zero-padded)
// in that rank's zero_pp_rank_{r}_mp_rank_00_model_states.pt; at stages 0-1 the module's tensor
// is the only copy. A load takes each frozen parameter from the module when it holds the whole
// tensor, else from the fragments, and writes the elements this rank keeps: its partition at
// stage 3 (Note [Frozen parameters under ZeRO-3], zero/stage3_layout.cpp), the whole parameter
// below. Stage-3 fragments are read file by file, each file only when it holds elements this rank
// needs, so a load at the same world size reads this rank's file alone and no rank ever holds
// more than one file's fragments beside its own partitions. A frozen parameter the checkpoint
// does not have (a universal folder holds only the optimizer's parameters) keeps its value, with
// a warning naming it. A PeftModel's checkpoint names them as PEFT wraps them (key_in).

namespace {

// One frozen parameter being restored: the elements [mine.offset, mine.offset + mine.size) of
// its flattened whole value, staged on the CPU and written back at the end.
struct FrozenTarget {
  std::string name;
  at::Tensor param;
  int64_t numel = 0;
  ShardInfo mine;
  at::Tensor staged;
  std::pair<size_t, int64_t> place{0, 0};  // stage 3: read_lp / write_lp's index and offset
  bool whole = false;                      // taken from a whole value
  bool found = false;                      // taken from anything
};

// The key of frozen parameter `name` in `dict`: the name itself, or the name PEFT's wrapping gives
// it in a checkpoint that transformers' Trainer and DeepSpeed wrote of a PeftModel
// ("base_model.model." + the name, an adapted layer's weight as "<layer>.base_layer.weight").
// Empty when `dict` has neither.
std::string key_in(const ValueView& dict, const std::string& name) {
  if (dict.contains(name)) return name;
  const std::string wrapped = "base_model.model." + name;
  if (dict.contains(wrapped)) return wrapped;
  const size_t dot = wrapped.rfind('.');
  const std::string base_layer = wrapped.substr(0, dot) + ".base_layer" + wrapped.substr(dot);
  return dict.contains(base_layer) ? base_layer : std::string();
}

// Copies the elements of `value` (1-D, covering [begin, begin + value.numel()) of the whole
// parameter) that `t` keeps.
void take(FrozenTarget& t, const at::Tensor& value, int64_t begin) {
  const ShardInfo have{begin, std::min(value.numel(), t.numel - begin)};
  const ShardInfo both = intersect(have, t.mine);
  if (both.size > 0) {
    t.staged.narrow(0, both.offset - t.mine.offset, both.size)
        .copy_(value.narrow(0, both.offset - begin, both.size));
  }
  t.found = true;
}

// The stage-3 fragments of every rank's model-states file in `dir` (saved at `saved_world`
// ranks), each file read only when it holds elements a target without a whole value needs.
void take_fragments(const std::string& dir, int saved_world, std::vector<FrozenTarget>& targets) {
  ckpt::ReadOptions ro;
  ro.mode = ckpt::ReadMode::kTolerant;
  for (int r = 0; r < saved_world; ++r) {
    auto range_of = [&](const FrozenTarget& t) {
      const int64_t pn = param_partition_size(t.numel, saved_world);
      return ShardInfo{r * pn, std::max<int64_t>(0, std::min(pn, t.numel - r * pn))};
    };
    bool needed = false;
    for (const FrozenTarget& t : targets)
      needed = needed || (!t.whole && intersect(range_of(t), t.mine).size > 0);
    if (!needed) continue;
    const std::string file = ckpt::join_path(dir, ckpt::model_states_name_of(3, r));
    const Value value = ckpt::load_pt(file, ro);
    const ValueView fragments = ValueView(value, file)["frozen_param_fragments"];
    for (FrozenTarget& t : targets) {
      const std::string key = t.whole ? std::string() : key_in(fragments, t.name);
      if (key.empty()) continue;
      const at::Tensor frag = fragments[key].as_tensor().reshape({-1});
      ZRT_CHECK_AS(CheckpointError, frag.numel() == param_partition_size(t.numel, saved_world),
                   file, ": the fragment of frozen parameter '", t.name, "' has ", frag.numel(),
                   " elements, not ceil(", t.numel, " / ", saved_world, ")");
      take(t, frag, range_of(t).offset);
    }
  }
}

}  // namespace

void EngineCheckpointer::restore_frozen(const std::string& dir, const Value& model_states) {
  at::NoGradGuard no_grad;
  comm::Comm& comm = engine_.comm();
  ModelStates& states = engine_.model_states();
  const FrozenPlaces places = frozen_places(states);
  const bool partitioned = states.partitions_params();
  std::set<std::string> aliases;
  for (const auto& [alias, owner] : engine_.tied_parameters()) aliases.insert(alias);
  std::vector<FrozenTarget> targets;
  for (const auto& p : engine_.module().named_parameters()) {
    if (p.value().requires_grad() || aliases.count(p.key()) != 0) continue;
    FrozenTarget t;
    t.name = p.key();
    t.param = p.value();
    t.numel = p.value().numel();
    auto it = places.find(t.name);
    if (partitioned && it != places.end()) {
      t.place = it->second;
      t.mine = param_shard(t.numel, comm.rank(), comm.size());
      t.staged =
          states.read_lp(t.place.first, t.place.second, t.mine.size).to(at::kCPU, false, true);
    } else if (zero::storage_allocated(p.value())) {
      t.mine = {0, t.numel};
      t.staged = p.value().detach().reshape({-1}).to(at::kCPU, false, true);
    } else {
      continue;  // held by no one here (cannot happen for a frozen parameter; nothing to write)
    }
    targets.push_back(std::move(t));
  }
  // Whole values: the module's tensor, or the fragments of a stages 0-2 checkpoint.
  const ValueView ms(model_states, dir);
  const ValueView module = ms["module"];
  const bool has_fragments =
      ms.contains("frozen_param_fragments") && !ms["frozen_param_fragments"].value().is_none();
  const bool per_rank =
      std::filesystem::exists(ckpt::join_path(dir, ckpt::model_states_name_of(3, 0)));
  for (FrozenTarget& t : targets) {
    const std::string in_module = key_in(module, t.name);
    if (!in_module.empty() && module[in_module].as_tensor().numel() == t.numel) {
      take(t, module[in_module].as_tensor().reshape({-1}), 0);
      t.whole = true;
    } else if (has_fragments && !per_rank &&
               !key_in(ms["frozen_param_fragments"], t.name).empty()) {
      const ValueView fragments = ms["frozen_param_fragments"];
      const at::Tensor whole = fragments[key_in(fragments, t.name)].as_tensor().reshape({-1});
      // A stage-3 fragment without its rank files (a universal folder keeps rank 0's model
      // states) is no whole value: the parameter keeps its own, with the warning below.
      if (whole.numel() == t.numel) {
        take(t, whole, 0);
        t.whole = true;
      }
    }
  }
  // Stage-3 fragments, file by file.
  if (has_fragments && per_rank) {
    take_fragments(dir, static_cast<int>(ms["dp_world_size"].as_int()), targets);
  }
  std::vector<std::string> missing;
  for (FrozenTarget& t : targets) {
    if (!t.found) {
      missing.push_back(t.name);
    } else if (partitioned && places.count(t.name) != 0) {
      states.write_lp(t.place.first, t.place.second, t.staged);
    } else {
      t.param.detach().copy_(t.staged.view(t.param.sizes()));
    }
  }
  states.frozen_partitions_written();
  if (!missing.empty() && comm.rank() == 0) {
    std::string names;
    for (const std::string& n : missing) names += (names.empty() ? "" : ", ") + n;
    ZRT_LOG_WARN(dir, ": no values for the frozen parameters ", names,
                 "; they keep the values they had");
  }
}

}  // namespace zrt::runtime
