#include "checkpoint/consolidate.h"

#include <algorithm>
#include <limits>
#include <unordered_map>
#include <unordered_set>

#include <ATen/ATen.h>

#include "checkpoint/layout.h"
#include "checkpoint/pt/pt_file.h"
#include "checkpoint/reshard.h"
#include "checkpoint/value_view.h"
#include "core/error.h"
#include "core/strings.h"
#include "core/shard.h"

namespace zrt::ckpt {
namespace {

NamedShapes shapes_of(const ValueView& dict) {
  NamedShapes out;
  for (const auto& [k, v] : dict.as_dict()) {
    if (!k.is_str()) dict.fail(str("parameter name ", k.repr(), " is not a str"));
    out.emplace_back(k.as_str(), dict[k].as_shape());
  }
  return out;
}

bool is_none_or_missing(const ValueView& dict, const char* key) {
  return !dict.contains(key) || dict[key].value().is_none();
}

// What zero_to_fp32 takes from a *_model_states.pt.
struct ModelState {
  NamedTensors buffers;
  std::vector<NamedShapes> param_shapes;  // per group (stage 3: per sub-group)
  bool inferred_shapes = false;            // no param_shapes in the file (DeepSpeed's stage 0)
  NamedShapes frozen_shapes;
  std::optional<ValueView> frozen_fragments;
  std::vector<std::pair<std::string, std::string>> shared;  // alias -> owner
};

ModelState parse_model_state(const Value& value, const std::string& context) {
  ValueView root(value, context);
  ModelState m;
  std::unordered_set<std::string> buffer_names;
  for (size_t i = 0; i < root["buffer_names"].length(); ++i) {
    buffer_names.insert(root["buffer_names"].at(i).as_string());
  }
  const ValueView module = root["module"];
  for (const auto& [k, v] : module.as_dict()) {
    if (k.is_str() && buffer_names.count(k.as_str())) {
      m.buffers.emplace_back(k.as_str(), module[k].as_tensor().to(at::kFloat));
    }
  }
  if (!is_none_or_missing(root, "param_shapes")) {
    const ValueView shapes = root["param_shapes"];
    for (size_t g = 0; g < shapes.length(); ++g) m.param_shapes.push_back(shapes_of(shapes.at(g)));
  } else {
    // DeepSpeed without ZeRO writes none: one group of the module's other tensors in file order
    // (its optimizer's single group; stage 0 checks that the flat masters hold exactly these).
    NamedShapes group;
    for (const auto& [k, v] : module.as_dict()) {
      if (k.is_str() && !buffer_names.count(k.as_str()) && v.is_tensor()) {
        group.emplace_back(k.as_str(), v.as_tensor().sizes().vec());
      }
    }
    m.param_shapes.push_back(std::move(group));
    m.inferred_shapes = true;
  }
  if (!is_none_or_missing(root, "frozen_param_shapes")) {
    m.frozen_shapes = shapes_of(root["frozen_param_shapes"]);
  }
  if (!is_none_or_missing(root, "frozen_param_fragments")) {
    m.frozen_fragments = root["frozen_param_fragments"];
  }
  if (!is_none_or_missing(root, "shared_params")) {
    const ValueView shared = root["shared_params"];
    for (const auto& [k, v] : shared.as_dict()) {
      m.shared.emplace_back(k.as_str(), shared[k].as_string());
    }
  }
  return m;
}

// An insertion-ordered name -> tensor map (Python's OrderedDict assignment semantics).
class OrderedTensors {
 public:
  void set(const std::string& name, at::Tensor t) {
    auto it = index_.find(name);
    if (it != index_.end()) {
      items_[it->second].second = std::move(t);
      return;
    }
    index_.emplace(name, items_.size());
    items_.emplace_back(name, std::move(t));
  }
  const at::Tensor* find(const std::string& name) const {
    auto it = index_.find(name);
    return it == index_.end() ? nullptr : &items_[it->second].second;
  }
  NamedTensors take() { return std::move(items_); }

 private:
  NamedTensors items_;
  std::unordered_map<std::string, size_t> index_;
};

// A flat 1-D partition tensor as float32.
at::Tensor flat_of(const ValueView& v) {
  const at::Tensor& t = v.as_tensor();
  if (t.dim() != 1) v.fail(str("expected a 1-D partition, got ", t.dim(), " dimensions"));
  return t.to(at::kFloat);
}

at::Tensor cat_or_empty(const std::vector<at::Tensor>& parts) {
  return parts.empty() ? at::empty({0}, at::kFloat) : at::cat(parts, 0);
}

void merge_stage12(OrderedTensors& out, const std::vector<ValueView>& osds, int world,
                   const ModelState& m0, const std::string& context) {
  std::vector<std::vector<at::Tensor>> per_rank;  // [rank][group]
  for (const ValueView& osd : osds) {
    const ValueView groups = osd["single_partition_of_fp32_groups"];
    std::vector<at::Tensor> flats;
    for (size_t g = 0; g < groups.length(); ++g) flats.push_back(flat_of(groups.at(g)));
    if (!per_rank.empty() && flats.size() != per_rank[0].size()) {
      groups.fail(str(flats.size(), " groups, rank 0 has ", per_rank[0].size()));
    }
    per_rank.push_back(std::move(flats));
  }
  const size_t num_groups = per_rank[0].size();
  ZRT_CHECK_AS(CheckpointError, m0.param_shapes.size() == num_groups, context,
               ": param_shapes has ", m0.param_shapes.size(),
               " groups but the optimizer partitions have ", num_groups);
  for (size_t g = 0; g < num_groups; ++g) {
    std::vector<at::Tensor> parts;
    for (const auto& flats : per_rank) parts.push_back(flats[g]);
    const NamedShapes& params = m0.param_shapes[g];
    for (auto& [name, t] :
         merge_partitions(PartitionLayout::kFlat, parts, params, context, static_cast<int>(g))) {
      out.set(name, std::move(t));
    }
    // DeepSpeed pads each group to a multiple of 2 * world; both counts round up the same way.
    int64_t avail = 0;
    for (const at::Tensor& p : parts) avail += p.numel();
    const int64_t align = flat_alignment(world);
    const int64_t consumed = round_up(group_numel(params), align);
    avail = round_up(avail, align);
    ZRT_CHECK_AS(CheckpointError, consumed == avail, context, ": consumed ", consumed,
                 " numels out of ", avail, " - something is wrong");
  }
}

void merge_stage3(OrderedTensors& out, const std::vector<ValueView>& osds, int world,
                  const ModelState& m0, const std::string& context) {
  std::vector<at::Tensor> flats;  // per rank: its sub-group flats concatenated
  for (const ValueView& osd : osds) {
    const ValueView groups = osd["fp32_flat_groups"];
    std::vector<at::Tensor> parts;
    for (size_t g = 0; g < groups.length(); ++g) parts.push_back(flat_of(groups.at(g)));
    flats.push_back(cat_or_empty(parts));
  }
  NamedShapes merged;  // the sub-groups' dicts merged in order (later duplicates win)
  std::unordered_map<std::string, size_t> position;
  for (const auto& group : m0.param_shapes) {
    for (const auto& [name, shape] : group) {
      auto it = position.find(name);
      if (it != position.end()) {
        merged[it->second].second = shape;
      } else {
        position.emplace(name, merged.size());
        merged.emplace_back(name, shape);
      }
    }
  }
  for (auto& [name, t] : merge_partitions(PartitionLayout::kPerParam, flats, merged, context)) {
    out.set(name, std::move(t));
  }
  const int64_t offset =
      rank_partition(PartitionLayout::kPerParam, merged, 0, world).partition_numel;
  const int64_t avail = flats[0].numel() * world;
  ZRT_CHECK_AS(CheckpointError, offset * world == avail, context, ": consumed ", offset * world,
               " numels out of ", avail, " - something is wrong");
}

void merge_frozen(OrderedTensors& out, int stage, const std::vector<ModelState>& models,
                  const std::string& context) {
  const ModelState& m0 = models[0];
  if (m0.frozen_shapes.empty()) return;
  for (const auto& [name, shape] : m0.frozen_shapes) {
    const int64_t n = checked_shape_numel(shape, context, name);
    std::vector<at::Tensor> frags;
    for (size_t i = 0; i < (stage <= 2 ? 1 : models.size()); ++i) {
      ZRT_CHECK_AS(CheckpointError, models[i].frozen_fragments.has_value(), context,
                   ": frozen_param_fragments missing in model states ", i);
      frags.push_back((*models[i].frozen_fragments)[name].as_tensor().reshape({-1}));
    }
    const at::Tensor all = at::cat(frags, 0);
    ZRT_CHECK_AS(CheckpointError, stage <= 2 ? all.numel() == n : all.numel() >= n, context,
                 ": frozen parameter '", name, "' has ", all.numel(), " elements, its shape needs ",
                 n);
    out.set(name, all.narrow(0, 0, n).view(shape));
  }
}

}  // namespace

int zero_stage_of(const Value& optim_state, const std::string& context) {
  const ValueView z = ValueView(optim_state, context)["optimizer_state_dict"]["zero_stage"];
  const Value& v = z.value();
  if (v.is_int()) return static_cast<int>(v.as_int());
  if (v.is_object()) {
    const ObjectData& o = v.as_object();
    auto is_enum = [](const std::string& type) {
      const std::string suffix = "ZeroStageEnum";
      return type.size() >= suffix.size() &&
             type.compare(type.size() - suffix.size(), suffix.size(), suffix) == 0;
    };
    if (is_enum(o.type) && o.args.is_tuple() && o.args.length() == 1 && o.args[0].is_int()) {
      return static_cast<int>(o.args[0].as_int());
    }
    if (o.type == "builtins.getattr" && o.args.is_tuple() && o.args.length() == 2 &&
        o.args[0].is_object() && is_enum(o.args[0].as_object().type) && o.args[1].is_string()) {
      const std::string& member = o.args[1].as_string();
      const char* names[] = {"disabled", "optimizer_states", "gradients", "weights"};
      for (int i = 0; i < 4; ++i) {
        if (member == names[i]) return i;
      }
    }
  }
  z.fail(str("expected the ZeRO stage (an int or ZeroStageEnum), got ", v.repr(200)));
}

NamedTensors consolidate_stage0_fp32(const Value& model_states, const std::string& context,
                                     const ConsolidateOptions& options) {
  const ModelState m = parse_model_state(model_states, context);
  const ValueView root(model_states, context);
  const ValueView module = root["module"];
  // The fp32 masters when the file has them (ZeroRT's and DeepSpeed's FP16_Optimizer state:
  // optimizer.fp32_groups_flat, one flat tensor per group in param_shapes order); else the
  // module's own weights, which are the fp32 weights of an fp32 run.
  std::unordered_map<std::string, at::Tensor> masters;
  if (!is_none_or_missing(root, "optimizer") && root["optimizer"].kind() == ValueKind::kDict &&
      root["optimizer"].contains("fp32_groups_flat")) {
    const ValueView flats = root["optimizer"]["fp32_groups_flat"];
    ZRT_CHECK_AS(CheckpointError, flats.length() == m.param_shapes.size(), context, ": ",
                 flats.length(), " fp32 groups but ", m.param_shapes.size(),
                 " groups in param_shapes");
    for (size_t g = 0; g < m.param_shapes.size(); ++g) {
      ZRT_CHECK_AS(CheckpointError,
                   !m.inferred_shapes || flat_of(flats.at(g)).numel() == group_numel(m.param_shapes[g]),
                   context, ": no param_shapes, and the fp32 flat group holds ",
                   flat_of(flats.at(g)).numel(), " elements, not the module's ",
                   group_numel(m.param_shapes[g]), " (frozen parameters or several groups)");
      for (auto& [name, t] : merge_partitions(PartitionLayout::kFlat, {flat_of(flats.at(g))},
                                              m.param_shapes[g], context, static_cast<int>(g))) {
        masters[name] = std::move(t);
      }
    }
  }
  OrderedTensors out;
  std::unordered_set<std::string> known;
  for (const auto& [name, t] : m.buffers) {
    out.set(name, t);
    known.insert(name);
  }
  for (const auto& group : m.param_shapes) {
    for (const auto& [name, shape] : group) known.insert(name);
  }
  // Frozen parameters: what the module has besides buffers and trainable parameters (a stage-0
  // file need not list them in frozen_param_shapes), as saved, as DeepSpeed leaves them.
  for (const auto& [k, v] : module.as_dict()) {
    if (!k.is_str() || known.count(k.as_str()) || !v.is_tensor()) continue;
    if (!options.exclude_frozen_parameters) out.set(k.as_str(), v.as_tensor());
  }
  for (const auto& group : m.param_shapes) {
    for (const auto& [name, shape] : group) {
      auto it = masters.find(name);
      if (it != masters.end()) {
        out.set(name, it->second);
        continue;
      }
      ZRT_CHECK_AS(CheckpointError, module.contains(name), context, ": parameter '", name,
                   "' of param_shapes is not in the module");
      const at::Tensor& t = module[name].as_tensor();
      ZRT_CHECK_AS(CheckpointError, t.sizes().vec() == shape, context, ": parameter '", name,
                   "' has shape ", t.sizes(), " in the module but ", at::IntArrayRef(shape),
                   " in param_shapes");
      out.set(name, t.to(at::kFloat));
    }
  }
  for (const auto& [alias, owner] : m.shared) {
    if (const at::Tensor* t = out.find(owner)) out.set(alias, *t);
  }
  return out.take();
}

NamedTensors consolidate_fp32(const std::vector<Value>& optim_states,
                              const std::vector<Value>& model_states, const std::string& context,
                              const ConsolidateOptions& options) {
  ZRT_CHECK_AS(CheckpointError, !model_states.empty(), context, ": no *_model_states.pt files");
  if (optim_states.empty() && model_states.size() == 1) {
    // Stage 0: no optimizer partitions; the weights are in the model-states file.
    return consolidate_stage0_fp32(model_states[0], str(context, ": model states 0"), options);
  }
  ZRT_CHECK_AS(CheckpointError, !optim_states.empty(), context,
               ": no *_optim_states.pt files (not a ZeRO checkpoint?)");
  std::vector<ValueView> osds;
  for (size_t r = 0; r < optim_states.size(); ++r) {
    osds.push_back(
        ValueView(optim_states[r], str(context, ": optim states ", r))["optimizer_state_dict"]);
  }
  ZRT_CHECK_AS(CheckpointError, osds[0].contains("zero_stage"), context,
               ": optim states 0 is not a zero checkpoint (no zero_stage; a BF16_Optimizer "
               "checkpoint?)");
  const int stage = zero_stage_of(optim_states[0], str(context, ": optim states 0"));
  ZRT_CHECK_AS(CheckpointError, stage >= 1 && stage <= 3, context, ": ZeRO stage ", stage,
               " cannot be consolidated");
  const ValueView pc = osds[0]["partition_count"];
  int64_t world = 0;
  if (pc.value().is_sequence()) {
    for (size_t i = 0; i < pc.length(); ++i) world = std::max(world, pc.at(i).as_int());
  } else {
    world = pc.as_int();
  }
  ZRT_CHECK_AS(CheckpointError, world == static_cast<int64_t>(optim_states.size()), "Expected ",
               world, " of '*_optim_states.pt' under '", context, "' but found ",
               optim_states.size(), " files. The checkpoint is incomplete or mixes two saves.");

  std::vector<ModelState> models;
  for (size_t i = 0; i < model_states.size(); ++i) {
    models.push_back(parse_model_state(model_states[i], str(context, ": model states ", i)));
  }
  OrderedTensors out;
  for (const auto& [name, t] : models[0].buffers) out.set(name, t);
  if (!options.exclude_frozen_parameters) merge_frozen(out, stage, models, context);
  if (stage <= 2) {
    merge_stage12(out, osds, static_cast<int>(world), models[0], context);
  } else {
    merge_stage3(out, osds, static_cast<int>(world), models[0], context);
  }
  for (const auto& [alias, owner] : models[0].shared) {
    if (const at::Tensor* t = out.find(owner)) out.set(alias, *t);
  }
  return out.take();
}

NamedTensors load_fp32_state_dict(const std::string& save_dir,
                                  const std::optional<std::string>& tag,
                                  const ConsolidateOptions& options) {
  std::string t;
  if (tag) {
    t = *tag;
  } else {
    std::optional<std::string> latest = read_latest(save_dir);
    ZRT_CHECK_AS(CheckpointError, latest.has_value(), "Unable to find 'latest' file at ",
                 join_path(save_dir, kLatestFile));
    t = *latest;
  }
  const std::string dir = tag_path(save_dir, t);
  const ZeroFiles files = list_zero_files(dir);
  const std::vector<std::string>& optim_files = files.optim;
  const std::vector<std::string>& model_files = files.model;
  ReadOptions optim_read;
  optim_read.mode = ReadMode::kTolerant;
  optim_read.only_keys = {"optimizer_state_dict"};
  ReadOptions model_read = optim_read;
  model_read.only_keys = {"module",       "optimizer",           "buffer_names",
                          "param_shapes", "frozen_param_shapes", "frozen_param_fragments",
                          "shared_params"};
  std::vector<Value> optims, models;
  for (const auto& f : optim_files) optims.push_back(load_pt(join_path(dir, f), optim_read));
  for (const auto& f : model_files) models.push_back(load_pt(join_path(dir, f), model_read));
  return consolidate_fp32(optims, models, dir, options);
}

}  // namespace zrt::ckpt
