#include "checkpoint/zero_folder.h"

#include "checkpoint/consolidate.h"
#include "checkpoint/layout.h"
#include "checkpoint/value_view.h"
#include "core/error.h"

namespace zrt::ckpt {

std::vector<NamedShapes> param_shapes_of(const ValueView& model_states) {
  std::vector<NamedShapes> shapes;
  const ValueView groups = model_states["param_shapes"];
  for (size_t g = 0; g < groups.length(); ++g) {
    NamedShapes group;
    const ValueView dict = groups.at(g);
    for (const auto& [key, value] : dict.as_dict()) {
      group.emplace_back(key.as_str(), ValueView(value, "", dict.where()).as_shape());
    }
    shapes.push_back(std::move(group));
  }
  return shapes;
}

ZeroFolder::ZeroFolder(const std::string& dir) : dir_(dir) {
  ZeroFiles files = list_zero_files(dir);
  const std::vector<std::string>& optim_files = files.optim;
  model_files_ = std::move(files.model);
  ZRT_CHECK_AS(CheckpointError, !model_files_.empty(), dir, ": no *_model_states.pt file");
  ZRT_CHECK_AS(CheckpointError, !optim_files.empty(), dir,
               ": no *_optim_states.pt files (a stage-0 checkpoint keeps its optimizer in the "
               "model states and has no ZeRO partitions)");
  ReadOptions ro;
  ro.mode = ReadMode::kTolerant;  // DeepSpeed's own files pickle its classes
  for (const std::string& name : optim_files) {
    optim_.push_back(std::make_unique<PtIndex>(join_path(dir, name), ro));
  }
  const Value& osd0 = optimizer_state(0);
  const ValueView v(osd0, optim_files.front());
  stage_ = zero_stage_of(optim_.front()->value(), optim_files.front());
  ZRT_CHECK_AS(CheckpointError, stage_ >= 1 && stage_ <= 3, optim_files.front(),
               ": ZeRO stage ", stage_, " has no partitioned optimizer files");
  const int saved_world = stage_ == 3 ? static_cast<int>(v["partition_count"].as_int())
                                      : static_cast<int>(v["partition_count"].at(0).as_int());
  ZRT_CHECK_AS(CheckpointError, saved_world == world_size(), dir, ": ", world_size(),
               " *_optim_states.pt files but the checkpoint was saved by ", saved_world,
               " ranks");
  ro.only_keys = {"param_shapes"};
  const PtIndex model(join_path(dir, model_files_.front()), ro);
  groups_ = param_shapes_of(ValueView(model.value(), model_files_.front()));
  for (size_t g = 0; g < groups_.size(); ++g) {
    for (const auto& [name, shape] : groups_[g]) group_of_[name] = g;
  }
  for (int r = 0; r < world_size(); ++r) {
    const size_t n = ValueView(optimizer_state(r), optim_file(r).path())
                         [stage_ == 3 ? "fp32_flat_groups" : "single_partition_of_fp32_groups"]
                             .length();
    ZRT_CHECK_AS(CheckpointError, n == groups_.size(), optim_file(r).path(), ": ", n,
                 " fp32 groups but param_shapes has ", groups_.size());
  }
}

const Value& ZeroFolder::optimizer_state(int rank) const {
  return ValueView(optim_file(rank).value(), optim_file(rank).path())["optimizer_state_dict"]
      .value();
}

const Value& ZeroFolder::base(int rank) const {
  return ValueView(optimizer_state(rank), optim_file(rank).path())
      [stage_ == 3 ? "optimizer_state_dict" : "base_optimizer_state"]
          .value();
}

bool ZeroFolder::has_state(size_t group, const std::string& state) const {
  if (state == kFp32State) return true;
  const Value* entry = base(0).at("state").find(static_cast<int64_t>(group));
  return entry != nullptr && entry->contains(state);
}

at::Tensor ZeroFolder::partition(int rank, size_t group, const std::string& state) const {
  const std::string& file = optim_file(rank).path();
  if (state == kFp32State) {
    return ValueView(optimizer_state(rank), file)
        [stage_ == 3 ? "fp32_flat_groups" : "single_partition_of_fp32_groups"]
            .at(group)
            .as_tensor();
  }
  return ValueView(base(rank), file)["state"][static_cast<int64_t>(group)][state].as_tensor();
}

RangeReader ZeroFolder::reader(size_t group, const std::string& state) const {
  ZRT_CHECK_AS(CheckpointError, group < groups_.size(), dir_, ": no parameter group ", group);
  const std::string context = dir_ + " (" + state + ")";
  const NamedShapes& params = groups_[group];
  const PartitionLayout layout =
      stage_ == 3 ? PartitionLayout::kPerParam : PartitionLayout::kFlat;
  const int world = world_size();
  // Each rank's partition, checked once: the moments of stages 1/2 keep the padding at the end,
  // the fp32 partitions drop it; both start at the partition's first element.
  std::vector<at::Tensor> parts;
  for (int r = 0; r < world; ++r) {
    at::Tensor t = partition(r, group, state);
    const RankPartition want = rank_partition(layout, params, r, world);
    ZRT_CHECK_AS(CheckpointError, t.numel() >= want.valid_numel && t.numel() <= want.partition_numel,
                 optim_file(r).path(), ": the ", state, " partition of group ", group, " has ",
                 t.numel(), " elements, param_shapes needs ", want.valid_numel, " to ",
                 want.partition_numel);
    ZRT_CHECK_AS(CheckpointError, t.is_contiguous(), optim_file(r).path(), ": the ", state,
                 " partition of group ", group, " is not contiguous");
    parts.push_back(t.reshape({-1}));
  }
  PartReader part = [this, parts](int rank, int64_t offset, int64_t count) {
    return optim_file(rank).read(parts.at(static_cast<size_t>(rank)), offset, count);
  };
  return whole_from_partitions(layout, params, world, part, context);
}

int64_t ZeroFolder::group_step(size_t group) const {
  const Value* entry = base(0).at("state").find(static_cast<int64_t>(group));
  if (entry == nullptr || !entry->contains("step")) return 0;
  const Value& step = entry->at("step");
  if (step.is_tensor()) {
    return static_cast<int64_t>(optim_file(0).read(step.as_tensor()).item<double>());
  }
  return static_cast<int64_t>(step.as_double());
}

bool ZeroFolder::has(const std::string& param, const std::string& state) const {
  const auto it = group_of_.find(param);
  return it != group_of_.end() && has_state(it->second, state);
}

std::string ZeroFolder::location(const std::string& param, const std::string& state) const {
  return str(dir_, ": ", state, " of '", param, "'");
}

RangeReader ZeroFolder::reader(const std::string& state) const {
  auto readers = std::make_shared<std::map<size_t, RangeReader>>();
  return [this, state, readers](const std::string& name, int64_t numel, ShardInfo range) {
    const auto it = group_of_.find(name);
    ZRT_CHECK_AS(CheckpointError, it != group_of_.end(), dir_, ": no parameter '", name,
                 "' in param_shapes");
    auto r = readers->find(it->second);
    if (r == readers->end()) r = readers->emplace(it->second, reader(it->second, state)).first;
    return r->second(name, numel, range);
  };
}

std::map<std::string, int64_t> ZeroFolder::params() const {
  std::map<std::string, int64_t> out;
  for (const NamedShapes& group : groups_) {
    for (const auto& [name, shape] : group) out[name] = shape_numel(shape);
  }
  return out;
}

std::optional<int64_t> ZeroFolder::step(const std::string& param, size_t) const {
  const auto it = group_of_.find(param);
  if (it == group_of_.end()) return std::nullopt;
  return group_step(it->second);
}

const Value& ZeroFolder::optimizer_name() const {
  static const Value none;
  const Value* name = base(0).find("zrt_optimizer");
  return name != nullptr ? *name : none;
}

const Value& ZeroFolder::loss_scaler() const {
  static const Value none;
  const Value* scaler = optimizer_state(0).find("loss_scaler");
  return scaler != nullptr ? *scaler : none;
}

const Value& ZeroFolder::param_groups() const {
  return ValueView(base(0), optim_file(0).path())["param_groups"].value();
}

}  // namespace zrt::ckpt
