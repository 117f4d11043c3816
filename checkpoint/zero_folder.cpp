#include "checkpoint/zero_folder.h"

#include <algorithm>

#include "checkpoint/layout.h"
#include "checkpoint/value_view.h"
#include "core/error.h"

namespace zrt::ckpt {

ZeroFolder::ZeroFolder(const std::string& dir) : dir_(dir) {
  ZeroFiles files = list_zero_files(dir);
  model_files_ = std::move(files.model);
  ZRT_CHECK_AS(CheckpointError, !model_files_.empty(), dir, ": no *_model_states.pt file");
  ZRT_CHECK_AS(CheckpointError, !files.optim.empty(), dir,
               ": no *_optim_states.pt files (a stage-0 checkpoint keeps its optimizer in the "
               "model states and has no ZeRO partitions)");
  ReadOptions ro;
  ro.mode = ReadMode::kTolerant;  // DeepSpeed's own files pickle its classes
  for (const std::string& name : files.optim) {
    Rank rank;
    rank.name = join_path(dir, name);
    rank.index = std::make_unique<PtIndex>(rank.name, ro);
    rank.value = &rank.index->value();
    rank.file = DsOptimStatesFile::read(*rank.value, rank.name);
    ranks_.push_back(std::move(rank));
  }
  ro.only_keys = {"param_shapes"};
  const std::string model = join_path(dir, model_files_.front());
  open(PtIndex(model, ro).value(), model);
}

ZeroFolder::ZeroFolder(const std::vector<Value>& optim_files, const Value& model_states,
                       const std::string& context)
    : dir_(context), held_(optim_files) {
  ZRT_CHECK_AS(CheckpointError, !held_.empty(), context,
               ": no *_optim_states.pt files (not a ZeRO checkpoint?)");
  for (size_t r = 0; r < held_.size(); ++r) {
    Rank rank;
    rank.name = str(context, ": optim states ", r);
    rank.value = &held_[r];
    rank.file = DsOptimStatesFile::read(held_[r], rank.name);
    ranks_.push_back(std::move(rank));
  }
  open(model_states, str(context, ": model states 0"));
}

void ZeroFolder::open(const Value& model_states, const std::string& model_name) {
  const int saved_world = file(0).world_size;
  ZRT_CHECK_AS(CheckpointError, saved_world == world_size(), "Expected ", saved_world,
               " of '*_optim_states.pt' under '", dir_, "' but found ", world_size(),
               " files. The checkpoint is incomplete or mixes two saves.");
  groups_ = param_shapes_of(ValueView(model_states, model_name));
  for (size_t g = 0; g < groups_.size(); ++g) {
    for (const auto& [name, shape] : groups_[g]) {
      checked_shape_numel(shape, model_name, name);
      group_of_[name] = g;
      all_params_.emplace_back(name, shape);
    }
  }
  for (int r = 0; r < world_size(); ++r) {
    const DsOptimStatesFile& f = file(r);
    ZRT_CHECK_AS(CheckpointError, f.zero_stage == zero_stage(), file_name(r), ": zero_stage ",
                 f.zero_stage, ", rank 0's file says ", zero_stage());
    // Stage 3 may cut a group into several sub-groups (its partitions are read back to back).
    ZRT_CHECK_AS(CheckpointError, zero_stage() == 3 || f.fp32.size() == groups_.size(),
                 file_name(r), ": ", f.fp32.size(), " fp32 groups but param_shapes has ",
                 groups_.size());
  }
}

const Value& ZeroFolder::optimizer_state(int rank) const {
  return ValueView(*ranks_.at(static_cast<size_t>(rank)).value, file_name(rank))
      ["optimizer_state_dict"]
          .value();
}

at::Tensor ZeroFolder::read(int rank, const at::Tensor& t, int64_t offset, int64_t count) const {
  const Rank& r = ranks_.at(static_cast<size_t>(rank));
  if (r.index) return r.index->read(t, offset, count);
  ZRT_CHECK_AS(CheckpointError, offset >= 0 && count >= 0 && offset + count <= t.numel(), r.name,
               ": elements [", offset, ", ", offset + count, ") of a tensor of ", t.numel());
  return t.reshape({-1}).narrow(0, offset, count);
}

bool ZeroFolder::has_state(size_t group, const std::string& state) const {
  if (state == kFp32State) return true;
  const Value* entry = file(0).state_of(zero_stage() == 3 ? 0 : group);
  return entry != nullptr && entry->contains(state);
}

std::vector<at::Tensor> ZeroFolder::pieces(int rank, size_t group, const std::string& state) const {
  const DsOptimStatesFile& f = file(rank);
  if (zero_stage() != 3) return {f.partition(group, state, file_name(rank))};
  std::vector<at::Tensor> out;
  for (size_t i = 0; i < f.fp32.size(); ++i) out.push_back(f.partition(i, state, file_name(rank)));
  return out;
}

RangeReader ZeroFolder::reader(size_t group, const std::string& state) const {
  ZRT_CHECK_AS(CheckpointError, group < groups_.size(), dir_, ": no parameter group ", group);
  const bool s3 = zero_stage() == 3;
  const NamedShapes& params = s3 ? all_params_ : groups_[group];
  const PartitionLayout layout = ds_partition_layout(zero_stage());
  const int world = world_size();
  // Each rank's partition, checked once: it starts at the partition's first element; the moments
  // of stages 1/2 keep the padding at the end, their fp32 partitions drop it; stage 3 keeps it.
  std::vector<std::vector<at::Tensor>> parts;
  for (int r = 0; r < world; ++r) {
    std::vector<at::Tensor> mine = pieces(r, group, state);
    int64_t numel = 0;
    for (const at::Tensor& t : mine) {
      ZRT_CHECK_AS(CheckpointError, t.is_contiguous(), file_name(r), ": a ", state,
                   " partition is not contiguous");
      numel += t.numel();
    }
    const RankPartition want = rank_partition(layout, params, r, world);
    const int64_t least = s3 ? want.partition_numel : want.valid_numel;
    ZRT_CHECK_AS(CheckpointError, numel >= least && numel <= want.partition_numel, file_name(r),
                 ": the ", state, s3 ? " partitions hold " : str(" partition of group ", group, " holds "),
                 numel, " elements, param_shapes needs ",
                 least == want.partition_numel ? str(least) : str(least, " to ", want.partition_numel));
    parts.push_back(std::move(mine));
  }
  PartReader part = [this, parts](int rank, int64_t offset, int64_t count) {
    // The requested range may cross sub-group boundaries (stage 3).
    std::vector<at::Tensor> got;
    for (const at::Tensor& t : parts.at(static_cast<size_t>(rank))) {
      const int64_t take = std::min(count, t.numel() - offset);
      if (take > 0) {
        got.push_back(read(rank, t, offset, take));
        count -= take;
        offset = 0;
      } else {
        offset -= t.numel();
      }
      if (count == 0) break;
    }
    if (got.empty()) return at::empty({0}, at::kFloat);
    return got.size() == 1 ? got.front() : at::cat(got, 0);
  };
  return whole_from_partitions(layout, params, world, part, dir_ + " (" + state + ")");
}

int64_t ZeroFolder::group_step(size_t group) const {
  const size_t saved = zero_stage() == 3 ? std::min(group, file(0).fp32.size() - 1) : group;
  const Value* entry = file(0).state_of(saved);
  if (entry == nullptr || !entry->contains("step")) return 0;
  const Value& step = entry->at("step");
  if (step.is_tensor()) {
    const at::Tensor& t = step.as_tensor();
    return static_cast<int64_t>(read(0, t, 0, t.numel()).item<double>());
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
    const size_t key = zero_stage() == 3 ? 0 : it->second;  // stage 3: one reader for all
    auto r = readers->find(key);
    if (r == readers->end()) r = readers->emplace(key, reader(it->second, state)).first;
    return r->second(name, numel, range);
  };
}

std::map<std::string, int64_t> ZeroFolder::params() const {
  std::map<std::string, int64_t> out;
  for (const auto& [name, shape] : all_params_) out[name] = shape_numel(shape);
  return out;
}

std::optional<int64_t> ZeroFolder::step(const std::string& param, size_t) const {
  const auto it = group_of_.find(param);
  if (it == group_of_.end()) return std::nullopt;
  return group_step(it->second);
}

const Value& ZeroFolder::optimizer_name() const {
  static const Value none;
  const Value* name = file(0).base.is_dict() ? file(0).base.find("zrt_optimizer") : nullptr;
  return name != nullptr ? *name : none;
}

const Value& ZeroFolder::loss_scaler() const { return file(0).loss_scaler; }

const Value& ZeroFolder::param_groups() const {
  return file(0).base_view(file_name(0))["param_groups"].value();
}

}  // namespace zrt::ckpt
