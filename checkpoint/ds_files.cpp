#include "checkpoint/ds_files.h"

#include <algorithm>

#include "checkpoint/ds_objects.h"
#include "core/error.h"
#include "core/shard.h"
#include "core/strings.h"

namespace zrt::ckpt {
namespace {

// The keys that differ by stage (Note [DeepSpeed ZeRO files]).
const char* fp32_key(int stage) {
  return stage == 3 ? "fp32_flat_groups" : "single_partition_of_fp32_groups";
}
const char* base_key(int stage) {
  return stage == 3 ? "optimizer_state_dict" : "base_optimizer_state";
}

bool is_none_or_missing(const ValueView& dict, const char* key) {
  return !dict.contains(key) || dict[key].value().is_none();
}

NamedShapes shapes_of(const ValueView& dict) {
  NamedShapes out;
  for (const auto& [k, v] : dict.as_dict()) {
    if (!k.is_str()) dict.fail(str("parameter name ", k.repr(), " is not a str"));
    out.emplace_back(k.as_str(), dict[k].as_shape());
  }
  return out;
}

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

// partition_count: an int (stage 3) or one per group (stages 1/2; DeepSpeed's are all equal).
int world_size_of(const ValueView& pc) {
  if (!pc.value().is_sequence()) return static_cast<int>(pc.as_int());
  int64_t world = 0;
  for (size_t i = 0; i < pc.length(); ++i) world = std::max(world, pc.at(i).as_int());
  if (pc.length() == 0) pc.fail("an empty list");
  return static_cast<int>(world);
}

}  // namespace

PartitionLayout ds_partition_layout(int zero_stage) {
  return zero_stage == 3 ? PartitionLayout::kPerParam : PartitionLayout::kFlat;
}

int zero_stage_of(const Value& optim_file, const std::string& context) {
  const ValueView z = ValueView(optim_file, context)["optimizer_state_dict"]["zero_stage"];
  const Value& v = z.value();
  if (v.is_int()) return static_cast<int>(v.as_int());
  if (v.is_object()) {
    const ObjectData& o = v.as_object();
    auto is_enum = [](const std::string& type) { return ends_with(type, "ZeroStageEnum"); };
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

// ---- optimizer states ------------------------------------------------------------------------

DsOptimStatesFile DsOptimStatesFile::read(const Value& file, const std::string& context) {
  const ValueView osd = ValueView(file, context)["optimizer_state_dict"];
  ZRT_CHECK_AS(CheckpointError, osd.contains("zero_stage"), context,
               " is not a zero checkpoint (no optimizer_state_dict.zero_stage; a BF16_Optimizer "
               "checkpoint?)");
  DsOptimStatesFile f;
  f.zero_stage = zero_stage_of(file, context);
  ZRT_CHECK_AS(CheckpointError, f.zero_stage >= 1 && f.zero_stage <= 3, context, ": ZeRO stage ",
               f.zero_stage, " has no partitioned optimizer files");
  f.world_size = world_size_of(osd["partition_count"]);
  ZRT_CHECK_AS(CheckpointError, f.world_size >= 1 && f.world_size <= (1 << 20), context,
               ": partition_count ", f.world_size, " is not a world size");
  const ValueView fp32 = osd[fp32_key(f.zero_stage)];
  for (size_t g = 0; g < fp32.length(); ++g) {
    const ValueView t = fp32.at(g);
    if (t.as_tensor().dim() != 1) {
      t.fail(str("expected a 1-D partition, got ", t.as_tensor().dim(), " dimensions"));
    }
    f.fp32.push_back(t.as_tensor());
  }
  // zero_to_fp32 needs only the fp32 partitions; files cut down to them have no base state.
  if (osd.contains(base_key(f.zero_stage))) {
    f.base = osd[base_key(f.zero_stage)].value();
    f.base_view(context)["state"].as_dict();  // a dict, checked here
  }
  if (f.zero_stage != 3 && osd.contains("group_paddings")) {
    const ValueView paddings = osd["group_paddings"];
    for (size_t g = 0; g < paddings.length(); ++g) f.group_paddings.push_back(paddings.at(g).as_int());
  }
  if (osd.contains("loss_scaler")) f.loss_scaler = osd["loss_scaler"].value();
  if (osd.contains("dynamic_loss_scale")) f.dynamic_loss_scale = osd["dynamic_loss_scale"].as_bool();
  if (osd.contains("clip_grad")) f.clip_grad = osd["clip_grad"].as_double();
  return f;
}

Value DsOptimStatesFile::to_value(int rank, const std::vector<NamedShapes>& groups,
                                  const std::vector<at::Tensor>& masters, const Value& ds_config,
                                  const std::string& ds_version) const {
  ZRT_INTERNAL_ASSERT(groups.size() == masters.size(), groups.size(), " groups, ", masters.size(),
                      " master partitions");
  Value osd = Value::dict();
  osd.set("zero_stage", zero_stage);
  osd.set("loss_scaler", loss_scaler);
  osd.set("dynamic_loss_scale", dynamic_loss_scale);
  osd.set("overflow", false);
  osd.set("clip_grad", clip_grad);
  if (zero_stage == 3) {
    osd.set("partition_count", world_size);
    osd.set(base_key(3), base);
    osd.set(fp32_key(3), Value::list(std::vector<Value>(masters.begin(), masters.end())));
  } else {
    osd.set(base_key(zero_stage), base);
    Value singles = Value::list();
    Value paddings = Value::list();
    Value counts = Value::list();
    Value mappings = Value::list();
    for (size_t g = 0; g < groups.size(); ++g) {
      // Note [Partition layouts] (reshard.h): the parameters back to back, padded and cut as
      // zero/flat_layout.h's FlatGroup cuts them.
      const FlatPartition part = make_flat_partition(group_numel(groups[g]), world_size);
      ZRT_INTERNAL_ASSERT(part.partition_size == masters[g].numel(), "group ", g,
                          ": a flat partition of ", masters[g].numel(),
                          " elements where the layout gives ", part.partition_size);
      const int64_t padding = part.padding(rank);
      singles.push_back(with_own_storage(masters[g].narrow(0, 0, part.partition_size - padding)));
      paddings.push_back(padding);
      counts.push_back(world_size);
      Value map = Value::ordered_dict();
      const ShardInfo mine = part.partition(rank);
      int64_t offset = 0;
      for (const auto& [name, shape] : groups[g]) {
        const int64_t numel = shape_numel(shape);
        const ShardInfo frag = intersect(mine, ShardInfo{offset, numel});
        offset += numel;
        if (frag.size == 0) continue;
        map.set(name, ds_fragment_address_value(frag.size, frag.offset - mine.offset));
      }
      mappings.push_back(std::move(map));
    }
    osd.set(fp32_key(zero_stage), std::move(singles));
    osd.set("group_paddings", std::move(paddings));
    osd.set("partition_count", std::move(counts));
    osd.set("param_slice_mappings", std::move(mappings));
  }
  osd.set("ds_version", ds_version);
  Value out = Value::dict();
  out.set("optimizer_state_dict", std::move(osd));
  out.set("ds_config", ds_config);
  out.set("ds_version", ds_version);
  return out;
}

ValueView DsOptimStatesFile::base_view(const std::string& context) const {
  return ValueView(base, context, str("optimizer_state_dict.", base_key(zero_stage)));
}

const Value* DsOptimStatesFile::state_of(size_t group) const {
  if (!base.is_dict() || !base.contains("state")) return nullptr;
  return base.at("state").find(static_cast<int64_t>(group));
}

at::Tensor DsOptimStatesFile::partition(size_t group, const std::string& state,
                                        const std::string& context) const {
  if (state == "fp32") {
    ZRT_CHECK_AS(CheckpointError, group < fp32.size(), context, ": no fp32 partition of group ",
                 group, " (", fp32.size(), " saved)");
    return fp32[group];
  }
  const Value* entry = state_of(group);
  ZRT_CHECK_AS(CheckpointError, entry != nullptr, context, ": ", base_key(zero_stage),
               " has no state for group ", group);
  const ValueView v(*entry, context, str(base_key(zero_stage), ".state[", group, "]"));
  const at::Tensor& t = v[state].as_tensor();
  if (t.dim() != 1) v[state].fail(str("expected a 1-D partition, got ", t.dim(), " dimensions"));
  return t;
}

// ---- model states ----------------------------------------------------------------------------

std::vector<NamedShapes> param_shapes_of(const ValueView& model_states) {
  std::vector<NamedShapes> shapes;
  const ValueView groups = model_states["param_shapes"];
  for (size_t g = 0; g < groups.length(); ++g) shapes.push_back(shapes_of(groups.at(g)));
  return shapes;
}

DsModelStatesFile DsModelStatesFile::read(const Value& file, const std::string& context) {
  const ValueView root(file, context);
  DsModelStatesFile m;
  for (size_t i = 0; i < root["buffer_names"].length(); ++i) {
    m.buffer_names.push_back(root["buffer_names"].at(i).as_string());
  }
  if (!is_none_or_missing(root, "param_shapes")) {
    m.param_shapes = param_shapes_of(root);
  } else {
    // DeepSpeed without ZeRO writes none: one group of the module's other tensors in file order
    // (its optimizer's single group).
    const ValueView module = root["module"];
    NamedShapes group;
    for (const auto& [k, v] : module.as_dict()) {
      const bool buffer = k.is_str() && std::find(m.buffer_names.begin(), m.buffer_names.end(),
                                                  k.as_str()) != m.buffer_names.end();
      if (k.is_str() && !buffer && v.is_tensor()) {
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
    root["frozen_param_fragments"].as_dict();  // a dict, checked here
    m.frozen_fragments = root["frozen_param_fragments"].value();
  }
  if (!is_none_or_missing(root, "shared_params")) {
    const ValueView shared = root["shared_params"];
    for (const auto& [k, v] : shared.as_dict()) {
      m.shared.emplace_back(k.as_str(), shared[k].as_string());
    }
  }
  return m;
}

}  // namespace zrt::ckpt
