// zrt-ckpt verify: the manifest, the files, their agreement, the partitions, the consolidation.
#include "tools/ckpt_verify.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>

#include <ATen/ATen.h>

#include "checkpoint/consolidate.h"
#include "checkpoint/ds_files.h"
#include "checkpoint/layout.h"
#include "checkpoint/manifest.h"
#include "checkpoint/pt/pt_file.h"
#include "checkpoint/reshard.h"
#include "core/error.h"
#include "runtime/model_states.h"

namespace zrt::tools {
namespace {

using ckpt::NamedShapes;
using ckpt::PartitionLayout;
using ckpt::Shape;
using ckpt::Value;

std::optional<Shape> shape_of(const Value& v) {
  if (v.is_size()) return v.as_size();
  if (!v.is_sequence()) return std::nullopt;
  Shape s;
  for (const Value& d : v.items()) {
    if (!d.is_int()) return std::nullopt;
    s.push_back(d.as_int());
  }
  return s;
}

std::string shape_str(const Shape& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

const Value* get(const Value* dict, const char* key) {
  if (dict == nullptr || !dict->is_dict()) return nullptr;
  const Value* v = dict->find(key);
  return v != nullptr && !v->is_none() ? v : nullptr;
}

class Verifier {
 public:
  Verifier(const CheckpointLocation& loc, const VerifyOptions& options) : options_(options) {
    report_.location = loc;
  }

  VerifyReport run() {
    files_ = list_tag_files(report_.location.tag_dir);
    const auto optim_files = files_of(files_, FileKind::kOptimStates);
    bf16_ = !optim_files.empty() && optim_files.front()->bf16;
    check_manifest();
    load_files();
    determine_stage_and_world();
    check_file_set();
    check_counters();
    if (parse_param_shapes()) {
      check_module_shapes();
      check_partitions();
      check_consolidation();
    }
    return std::move(report_);
  }

 private:
  void problem(std::string s) { report_.problems.push_back(std::move(s)); }
  std::string path(const std::string& name) const {
    return ckpt::join_path(report_.location.tag_dir, name);
  }

  void check_manifest() {
    const CheckpointLocation& loc = report_.location;
    try {
      manifest_ = ckpt::read_manifest(loc.save_dir, loc.tag);
    } catch (const CheckpointError& e) {
      const bool absent = !std::any_of(files_.begin(), files_.end(), [](const TagFile& f) {
        return f.kind == FileKind::kManifest;
      });
      if (absent && options_.allow_no_manifest) {
        report_.notes.push_back(str("no ", ckpt::kManifestFile,
                                    ": checked as a DeepSpeed-written checkpoint (no sizes or "
                                    "CRC-32s to compare)"));
      } else {
        problem(e.what());
      }
      return;
    }
    for (std::string& p : ckpt::check_tag(loc.save_dir, loc.tag)) {
      // "<path>: CRC-32 ..., the manifest says ..." (or the size): the bytes are damaged, and
      // parsing the file below would only say so a second time.
      if (p.find("the manifest says") != std::string::npos) {
        damaged_files_.insert(p.substr(0, p.find(": ")));
      }
      problem(std::move(p));
    }
    for (const TagFile& f : files_) {
      if (f.kind != FileKind::kManifest && f.kind != FileKind::kTemp &&
          manifest_->find(f.name) == nullptr) {
        problem(str(f.path, ": not listed in ", ckpt::kManifestFile,
                    " (left over from another save, or added afterwards)"));
      }
    }
  }

  void load_files() {
    ckpt::ReadOptions read;
    read.mode = manifest_ ? ckpt::ReadMode::kStrict : ckpt::ReadMode::kTolerant;
    for (const TagFile& f : files_) {
      report_.bytes += f.size;
      ++report_.files;
      if (f.kind == FileKind::kTemp) {
        report_.notes.push_back(f.path + ": temp file left by an unfinished save (harmless)");
        continue;
      }
      if (!f.regular) {
        problem(f.path + ": not a regular file");
        continue;
      }
      const bool pt = f.name.size() > 3 && f.name.compare(f.name.size() - 3, 3, ".pt") == 0;
      if (!pt) continue;
      ckpt::ReadOptions mode = read;
      if (f.kind == FileKind::kOther) mode.mode = ckpt::ReadMode::kTolerant;
      try {
        Value v = ckpt::load_pt(f.path, mode);
        if (!v.is_dict()) {
          problem(str(f.path, ": holds a ", v.kind_name(), ", not a dict"));
          continue;
        }
        if (f.kind == FileKind::kModelStates) model_ = std::move(v);
        if (f.kind == FileKind::kZero3ModelStates) zero3_models_[f.rank].push_back(std::move(v));
        if (f.kind == FileKind::kOptimStates) optims_[f.rank].push_back(std::move(v));
      } catch (const CheckpointError& e) {
        if (damaged_files_.count(f.path) == 0) problem(e.what());
        unreadable_ = true;
      }
    }
  }

  const Value* rank0_model() const {
    if (model_) return &*model_;
    auto it = zero3_models_.find(0);
    return it != zero3_models_.end() ? &it->second.front() : nullptr;
  }

  const Value* optim_of(int rank) const {
    auto it = optims_.find(rank);
    return it != optims_.end() ? get(&it->second.front(), "optimizer_state_dict") : nullptr;
  }

  static std::optional<int64_t> partition_count(const Value* osd) {
    const Value* pc = get(osd, "partition_count");
    if (pc == nullptr) return std::nullopt;
    if (pc->is_int()) return pc->as_int();
    if (!pc->is_sequence() || pc->length() == 0) return std::nullopt;
    int64_t w = 0;
    for (const Value& v : pc->items()) {
      if (!v.is_int()) return std::nullopt;
      w = std::max(w, v.as_int());
    }
    return w;
  }

  void determine_stage_and_world() {
    std::optional<int> from_optim;
    const std::string optim0 =
        optims_.empty() ? "" : file_name(FileKind::kOptimStates, optims_.begin()->first);
    if (!optims_.empty()) {
      try {
        from_optim = ckpt::zero_stage_of(optims_.begin()->second.front(), path(optim0));
      } catch (const CheckpointError& e) {
        problem(e.what());
      }
    }
    if (manifest_ && from_optim && *from_optim != manifest_->zero_stage) {
      problem(str(path(optim0), ": zero_stage ", *from_optim, " but ", ckpt::kManifestFile,
                  " says ", manifest_->zero_stage));
    }
    const bool has_zero3 = !files_of(files_, FileKind::kZero3ModelStates).empty();
    const bool has_optim = !files_of(files_, FileKind::kOptimStates).empty();
    stage_ = from_optim  ? *from_optim
             : manifest_ ? manifest_->zero_stage
             : has_zero3 ? 3
             : has_optim ? -1
                         : 0;
    report_.zero_stage = stage_;

    std::vector<std::pair<std::string, int64_t>> claims;  // (who, world size)
    if (manifest_) claims.emplace_back(ckpt::kManifestFile, manifest_->world_size);
    const Value* m0 = rank0_model();
    if (const Value* dp = get(m0, "dp_world_size"); dp != nullptr && dp->is_int()) {
      claims.emplace_back(model_ ? ckpt::model_states_name() : ckpt::zero3_model_states_name(0),
                          dp->as_int());
    }
    if (auto pc = partition_count(optim_of(optims_.empty() ? 0 : optims_.begin()->first))) {
      claims.emplace_back(optim0 + " (partition_count)", *pc);
    }
    const size_t per_rank = std::max(optims_.size(), zero3_models_.size());
    world_ =
        claims.empty() ? static_cast<int64_t>(std::max<size_t>(per_rank, 1)) : claims[0].second;
    for (const auto& [who, w] : claims) {
      if (w != world_) {
        problem(str(path(who), ": world size ", w, " but ", claims[0].first, " says ", world_));
      }
    }
    if (world_ < 1 || world_ > (int64_t{1} << 20)) {
      problem(str(report_.location.tag_dir, ": world size ", world_, " is not plausible"));
      world_ = 0;
    }
    report_.world_size = world_;
  }

  std::string file_name(FileKind kind, int rank) const {
    for (const TagFile& f : files_) {
      if (f.kind == kind && f.rank == rank) return f.name;
    }
    if (kind == FileKind::kOptimStates) return ckpt::optim_states_name(rank, bf16_);
    if (kind == FileKind::kZero3ModelStates) return ckpt::zero3_model_states_name(rank);
    return ckpt::rng_state_name(rank);
  }

  // One file of `kind` per rank 0..world-1, nothing beyond.
  void check_per_rank(FileKind kind, const char* what) {
    std::map<int, int> count;
    for (const TagFile* f : files_of(files_, kind)) ++count[f->rank];
    for (int r = 0; r < world_; ++r) {
      if (count[r] == 0) {
        problem(str(path(file_name(kind, r)), ": missing (the ", what, " of rank ", r,
                    "; the checkpoint was saved by ", world_, " ranks)"));
      } else if (count[r] > 1) {
        problem(str(report_.location.tag_dir, ": ", count[r], " ", what, " files for rank ", r,
                    " (bf16_ and plain names mixed?)"));
      }
    }
    for (const auto& [r, n] : count) {
      if (r >= world_) {
        problem(str(path(file_name(kind, r)), ": rank ", r, " is beyond the world size ", world_,
                    " (", what, ")"));
      }
    }
  }

  void check_file_set() {
    if (world_ == 0) return;
    const bool has_model = !files_of(files_, FileKind::kModelStates).empty();
    if (stage_ == 3) {
      check_per_rank(FileKind::kZero3ModelStates, "ZeRO-3 model states");
      if (has_model)
        problem(path(ckpt::model_states_name()) + ": unexpected in a ZeRO-3 checkpoint");
    } else {
      if (!has_model) problem(path(ckpt::model_states_name()) + ": missing (the model states)");
      for (const TagFile* f : files_of(files_, FileKind::kZero3ModelStates)) {
        problem(str(f->path, ": unexpected in a ZeRO stage ", stage_, " checkpoint"));
      }
    }
    if (stage_ >= 1 || stage_ == -1) {
      check_per_rank(FileKind::kOptimStates, "optimizer partition");
    } else {
      for (const TagFile* f : files_of(files_, FileKind::kOptimStates)) {
        problem(str(f->path, ": unexpected in a ZeRO stage 0 checkpoint"));
      }
    }
    if (manifest_) check_per_rank(FileKind::kRngState, "RNG state");
  }

  void check_counters() {
    for (const auto& [r, values] : optims_) {
      const std::string file = path(file_name(FileKind::kOptimStates, r));
      const Value* osd = get(&values.front(), "optimizer_state_dict");
      if (osd == nullptr || !osd->is_dict()) {
        problem(file + ": no optimizer_state_dict");
        continue;
      }
      if (r != optims_.begin()->first && stage_ >= 0) {
        try {
          const int s = ckpt::zero_stage_of(values.front(), file);
          if (s != stage_) problem(str(file, ": zero_stage ", s, ", the other files say ", stage_));
        } catch (const CheckpointError& e) {
          problem(e.what());
        }
      }
      const std::optional<int64_t> pc = partition_count(osd);
      if (!pc || *pc != world_) {
        problem(str(file, ": partition_count ", pc ? std::to_string(*pc) : "missing",
                    ", expected the world size ", world_));
      }
    }
    for (const auto& [r, values] : zero3_models_) {
      const Value* dp = get(&values.front(), "dp_world_size");
      if (r != 0 && (dp == nullptr || !dp->is_int() || dp->as_int() != world_)) {
        problem(str(path(file_name(FileKind::kZero3ModelStates, r)), ": dp_world_size ",
                    dp ? dp->repr(40) : "missing", ", expected ", world_));
      }
    }
  }

  // param_shapes of rank 0's model states; false when it is missing or malformed (reported).
  bool parse_param_shapes() {
    const Value* m0 = rank0_model();
    if (m0 == nullptr || world_ == 0) return false;
    const std::string file =
        path(model_ ? ckpt::model_states_name() : ckpt::zero3_model_states_name(0));
    const Value* shapes = get(m0, "param_shapes");
    if (shapes == nullptr) {
      if (stage_ >= 1) problem(file + ": no param_shapes (needed to consolidate)");
      return false;
    }
    if (!shapes->is_sequence()) {
      problem(str(file, ": param_shapes is a ", shapes->kind_name(), ", not a list"));
      return false;
    }
    bool ok = true;
    for (size_t g = 0; g < shapes->length(); ++g) {
      const Value& group = (*shapes)[g];
      if (!group.is_dict()) {
        problem(str(file, ": param_shapes[", g, "] is a ", group.kind_name(), ", not a dict"));
        ok = false;
        continue;
      }
      NamedShapes named;
      for (const auto& [k, v] : group.as_dict()) {
        const std::optional<Shape> s = shape_of(v);
        // Bounded per dimension and in all, so that the partition arithmetic cannot overflow.
        int64_t n = 1;
        auto plausible = [&](int64_t d) {
          if (d < 0 || d >= (int64_t{1} << 40) || (d != 0 && n > (int64_t{1} << 50) / d)) {
            return false;
          }
          n *= d;
          return true;
        };
        const bool valid = k.is_str() && s && std::all_of(s->begin(), s->end(), plausible);
        if (!valid) {
          problem(str(file, ": param_shapes[", g, "][", k.repr(),
                      "] is not a valid shape: ", v.repr(80)));
          ok = false;
          continue;
        }
        named.emplace_back(k.as_str(), *s);
      }
      shapes_.push_back(std::move(named));
    }
    return ok;
  }

  // Stages 0-2: the module's tensors have the shapes param_shapes records.
  void check_module_shapes() {
    if (!model_) return;
    const std::string file = path(ckpt::model_states_name());
    const Value* module = get(&*model_, "module");
    if (module == nullptr || !module->is_dict()) {
      problem(file + ": no module state dict");
      return;
    }
    for (const NamedShapes& group : shapes_) {
      for (const auto& [name, shape] : group) {
        const Value* t = module->find(name);
        if (t == nullptr || !t->is_tensor()) {
          problem(str(file, ": module has no tensor for parameter '", name, "'"));
        } else if (t->as_tensor().sizes().vec() != shape) {
          problem(str(file, ": module['", name, "'] has shape ",
                      shape_str(t->as_tensor().sizes().vec()), " but param_shapes says ",
                      shape_str(shape)));
        }
      }
    }
  }

  // The moments of group g of rank r's base optimizer hold `expected` elements.
  void check_moments(int r, const ckpt::DsOptimStatesFile& f, size_t g, int64_t expected) {
    const Value* entry = f.state_of(g);
    if (entry == nullptr || !entry->is_dict()) return;
    for (const char* key : {"exp_avg", "exp_avg_sq", "momentum_buffer"}) {
      const Value* t = get(entry, key);
      if (t != nullptr && t->is_tensor() && t->as_tensor().numel() != expected) {
        problem(str(path(file_name(FileKind::kOptimStates, r)), ": optimizer state ", g, ".", key,
                    " has ", t->as_tensor().numel(), " elements, the partition has ", expected));
      }
    }
  }

  // Rank r's partitions against param_shapes (Note [Partition layouts]).
  void check_rank_partitions(int r, const ckpt::DsOptimStatesFile& f) {
    const std::string file = path(file_name(FileKind::kOptimStates, r));
    const int w = static_cast<int>(world_);
    const PartitionLayout layout = ckpt::ds_partition_layout(stage_);
    auto mine = [&](const NamedShapes& group) { return ckpt::rank_partition(layout, group, r, w); };
    if (stage_ == 3) {
      // Every rank's flat groups hold the same padded pieces; sub-groups may cut the groups.
      int64_t expected_total = 0, have_total = 0;
      for (const auto& group : shapes_) expected_total += mine(group).partition_numel;
      for (const at::Tensor& t : f.fp32) have_total += t.numel();
      if (have_total != expected_total) {
        problem(str(file, ": fp32 flat groups hold ", have_total, " elements; with ", w,
                    " ranks the parameters in param_shapes need ", expected_total, " per rank"));
      } else if (f.fp32.size() == shapes_.size()) {
        for (size_t g = 0; g < shapes_.size(); ++g) {
          const int64_t n = mine(shapes_[g]).partition_numel;
          if (f.fp32[g].numel() != n) {
            problem(str(file, ": fp32 flat group ", g, " has ", f.fp32[g].numel(),
                        " elements, its parameters need ", n));
          }
          check_moments(r, f, g, n);
        }
      }
      return;
    }
    if (f.fp32.size() != shapes_.size()) {
      problem(str(file, ": ", f.fp32.size(), " fp32 partitions but param_shapes has ",
                  shapes_.size(), " groups"));
      return;
    }
    for (size_t g = 0; g < shapes_.size(); ++g) {
      const ckpt::RankPartition part = mine(shapes_[g]);
      if (f.fp32[g].numel() != part.valid_numel) {
        problem(str(file, ": fp32 partition of group ", g, " has ", f.fp32[g].numel(),
                    " elements; with ", ckpt::group_numel(shapes_[g]), " parameters over ", w,
                    " ranks rank ", r, " holds ", part.valid_numel));
      }
      if (g < f.group_paddings.size() && f.group_paddings[g] != part.padding()) {
        problem(str(file, ": group_paddings[", g, "] is ", f.group_paddings[g], ", expected ",
                    part.padding()));
      }
      check_moments(r, f, g, part.partition_numel);
    }
  }

  void check_partitions() {
    if (stage_ < 1 || stage_ > 3 || optims_.size() != static_cast<size_t>(world_)) return;
    for (const auto& [r, values] : optims_) {
      try {
        check_rank_partitions(
            r, ckpt::DsOptimStatesFile::read(values.front(),
                                             path(file_name(FileKind::kOptimStates, r))));
      } catch (const CheckpointError& e) {
        problem(e.what());
      }
    }
  }

  void check_consolidation() {
    if (stage_ < 1 || stage_ > 3 || unreadable_ || !report_.problems.empty()) return;
    std::vector<Value> optims, models;
    for (const auto& [r, v] : optims_) optims.push_back(v.front());
    if (stage_ == 3) {
      for (const auto& [r, v] : zero3_models_) models.push_back(v.front());
    } else if (model_) {
      models.push_back(*model_);
    }
    try {
      const ckpt::NamedTensors out =
          ckpt::consolidate_fp32(optims, models, report_.location.tag_dir);
      std::map<std::string, at::Tensor> by_name(out.begin(), out.end());
      int64_t nonfinite = 0;
      for (const auto& group : shapes_) {
        for (const auto& [name, shape] : group) {
          auto it = by_name.find(name);
          if (it == by_name.end() || it->second.sizes().vec() != shape) {
            problem(str(report_.location.tag_dir, ": consolidation did not give '", name,
                        "' with shape ", shape_str(shape)));
            continue;
          }
          report_.parameters += it->second.numel();
          if (!at::isfinite(it->second).all().item<bool>()) ++nonfinite;
        }
      }
      if (nonfinite > 0) {
        report_.notes.push_back(str(nonfinite, " parameter tensors hold NaN or inf values"));
      }
    } catch (const CheckpointError& e) {
      problem(e.what());
    }
  }

  VerifyOptions options_;
  VerifyReport report_;
  std::vector<TagFile> files_;
  std::set<std::string> damaged_files_;  // paths whose size or CRC-32 differ from the manifest
  std::optional<ckpt::Manifest> manifest_;
  std::optional<Value> model_;
  std::map<int, std::vector<Value>> zero3_models_, optims_;
  std::vector<NamedShapes> shapes_;
  int stage_ = -1;
  int64_t world_ = 0;
  bool bf16_ = false;
  bool unreadable_ = false;
};

}  // namespace

VerifyReport verify_checkpoint(const CheckpointLocation& location, const VerifyOptions& options) {
  return Verifier(location, options).run();
}

}  // namespace zrt::tools
