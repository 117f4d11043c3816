#include "checkpoint/consolidate.h"

#include <algorithm>
#include <limits>
#include <unordered_map>
#include <unordered_set>

#include <ATen/ATen.h>

#include "checkpoint/layout.h"
#include "checkpoint/pt/pt_file.h"
#include "checkpoint/reshard.h"
#include "checkpoint/zero_folder.h"
#include "checkpoint/value_view.h"
#include "core/error.h"
#include "core/strings.h"
#include "core/shard.h"

namespace zrt::ckpt {
namespace {

bool is_none_or_missing(const ValueView& dict, const char* key) {
  return !dict.contains(key) || dict[key].value().is_none();
}

// The buffers of a model states' module (named in buffer_names), as float32, in module order.
NamedTensors buffers_of(const Value& model_states, const DsModelStatesFile& m,
                        const std::string& context) {
  const ValueView module = ValueView(model_states, context)["module"];
  const std::unordered_set<std::string> names(m.buffer_names.begin(), m.buffer_names.end());
  NamedTensors out;
  for (const auto& [k, v] : module.as_dict()) {
    if (k.is_str() && names.count(k.as_str())) {
      out.emplace_back(k.as_str(), module[k].as_tensor().to(at::kFloat));
    }
  }
  return out;
}

// A flat 1-D tensor as float32.
at::Tensor flat_of(const ValueView& v) {
  const at::Tensor& t = v.as_tensor();
  if (t.dim() != 1) v.fail(str("expected a 1-D partition, got ", t.dim(), " dimensions"));
  return t.to(at::kFloat);
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

// Every trainable parameter in param_shapes order, read whole by ranges from the partitions.
void merge_trainable(OrderedTensors& out, const ZeroFolder& zero) {
  for (size_t g = 0; g < zero.groups().size(); ++g) {
    const RangeReader read = zero.reader(g, kFp32State);
    for (const auto& [name, shape] : zero.groups()[g]) {
      const int64_t numel = shape_numel(shape);
      out.set(name, read(name, numel, ShardInfo{0, numel}).to(at::kFloat).view(shape));
    }
  }
}

void merge_frozen(OrderedTensors& out, int stage, const std::vector<DsModelStatesFile>& models,
                  const std::string& context) {
  const DsModelStatesFile& m0 = models[0];
  for (const auto& [name, shape] : m0.frozen_shapes) {
    const int64_t n = checked_shape_numel(shape, context, name);
    std::vector<at::Tensor> frags;
    for (size_t i = 0; i < (stage <= 2 ? 1 : models.size()); ++i) {
      const Value& fragments = models[i].frozen_fragments;
      ZRT_CHECK_AS(CheckpointError, fragments.is_dict(), context,
                   ": frozen_param_fragments missing in model states ", i);
      frags.push_back(ValueView(fragments, context, "frozen_param_fragments")[name]
                          .as_tensor()
                          .reshape({-1}));
    }
    const at::Tensor all = at::cat(frags, 0);
    ZRT_CHECK_AS(CheckpointError, stage <= 2 ? all.numel() == n : all.numel() >= n, context,
                 ": frozen parameter '", name, "' has ", all.numel(), " elements, its shape needs ",
                 n);
    out.set(name, all.narrow(0, 0, n).view(shape));
  }
}

// Buffers, frozen parameters, trainable parameters, shared aliases (consolidate.h's order).
NamedTensors consolidate(const ZeroFolder& zero, const std::vector<Value>& model_states,
                         const std::string& context, const ConsolidateOptions& options) {
  std::vector<DsModelStatesFile> models;
  for (size_t i = 0; i < model_states.size(); ++i) {
    models.push_back(DsModelStatesFile::read(model_states[i], str(context, ": model states ", i)));
  }
  OrderedTensors out;
  for (auto& [name, t] : buffers_of(model_states[0], models[0], context)) out.set(name, t);
  if (!options.exclude_frozen_parameters) merge_frozen(out, zero.zero_stage(), models, context);
  merge_trainable(out, zero);
  for (const auto& [alias, owner] : models[0].shared) {
    if (const at::Tensor* t = out.find(owner)) out.set(alias, *t);
  }
  return out.take();
}

}  // namespace

NamedTensors consolidate_stage0_fp32(const Value& model_states, const std::string& context,
                                     const ConsolidateOptions& options) {
  const DsModelStatesFile m = DsModelStatesFile::read(model_states, context);
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
  for (const auto& [name, t] : buffers_of(model_states, m, context)) {
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
  return consolidate(ZeroFolder(optim_states, model_states[0], context), model_states, context,
                     options);
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
  ReadOptions model_read;
  model_read.mode = ReadMode::kTolerant;  // DeepSpeed's own files pickle its classes
  model_read.only_keys = {"module",       "optimizer",           "buffer_names",
                          "param_shapes", "frozen_param_shapes", "frozen_param_fragments",
                          "shared_params"};
  std::vector<Value> models;
  for (const auto& f : files.model) models.push_back(load_pt(join_path(dir, f), model_read));
  ZRT_CHECK_AS(CheckpointError, !models.empty(), dir, ": no *_model_states.pt files");
  if (files.optim.empty()) {
    ZRT_CHECK_AS(CheckpointError, models.size() == 1, dir, ": ", models.size(),
                 " model-states files and no *_optim_states.pt files (not a ZeRO checkpoint?)");
    return consolidate_stage0_fp32(models[0], str(dir, ": model states 0"), options);
  }
  // The optimizer files by ranges: memory holds the result, not the files.
  return consolidate(ZeroFolder(dir), models, dir, options);
}

}  // namespace zrt::ckpt
