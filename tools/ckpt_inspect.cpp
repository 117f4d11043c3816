// zrt-ckpt inspect: facts gathered from the manifest and the pickles of the tag's files.
#include "tools/ckpt_inspect.h"

#include <cstdio>
#include <unordered_set>

#include <ATen/ATen.h>

#include "checkpoint/consolidate.h"
#include "core/error.h"
#include "runtime/model_states.h"

namespace zrt::tools {
namespace {

using ckpt::Value;

const Value* get(const Value* dict, const char* key) {
  if (dict == nullptr || !dict->is_dict()) return nullptr;
  const Value* v = dict->find(key);
  return v != nullptr && !v->is_none() ? v : nullptr;
}

std::optional<int64_t> get_int(const Value* dict, const char* key) {
  const Value* v = get(dict, key);
  if (v != nullptr && v->is_int()) return v->as_int();
  return std::nullopt;
}

std::string get_string(const Value* dict, const char* key) {
  const Value* v = get(dict, key);
  return v != nullptr && v->is_string() ? v->as_string() : "";
}

bool enabled(const Value* config, const char* section) {
  const Value* e = get(get(config, section), "enabled");
  return e != nullptr && e->is_bool() && e->as_bool();
}

std::string dtype_name(at::ScalarType t) {
  switch (t) {
    case at::kFloat:
      return "float32";
    case at::kHalf:
      return "float16";
    case at::kBFloat16:
      return "bfloat16";
    case at::kDouble:
      return "float64";
    default:
      return c10::toString(t);
  }
}

// c10::toString names ("Float", "BFloat16", "Half") as written in the manifest's engine section.
std::string dtype_from_c10_name(const std::string& name) {
  if (name == "Float") return "float32";
  if (name == "Half") return "float16";
  if (name == "BFloat16") return "bfloat16";
  if (name == "Double") return "float64";
  return name;
}

int64_t numel_of(const Value& shape) {
  if (!shape.is_size() && !shape.is_sequence()) return 0;
  int64_t n = 1;
  for (size_t i = 0; i < shape.length(); ++i) {
    const Value d = shape.is_size() ? Value(shape.as_size()[i]) : shape[i];
    if (!d.is_int() || d.as_int() < 0) return 0;
    n = d.as_int() == 0 ? 0 : (n > (int64_t{1} << 62) / d.as_int() ? n : n * d.as_int());
  }
  return n;
}

void count_parameters(Inspection& out, const Value& model) {
  std::unordered_set<std::string> seen;
  if (const Value* shapes = get(&model, "param_shapes");
      shapes != nullptr && shapes->is_sequence()) {
    out.param_groups = static_cast<int64_t>(shapes->length());
    for (const Value& group : shapes->items()) {
      if (!group.is_dict()) continue;
      for (const auto& [k, v] : group.as_dict()) {
        if (k.is_str() && seen.insert(k.as_str()).second) {
          out.trainable_params += numel_of(v);
          ++out.param_tensors;
        }
      }
    }
  }
  if (const Value* frozen = get(&model, "frozen_param_shapes"); frozen && frozen->is_dict()) {
    for (const auto& [k, v] : frozen->as_dict()) {
      if (k.is_str() && seen.insert(k.as_str()).second) {
        out.frozen_params += numel_of(v);
        ++out.param_tensors;
      }
    }
  }
  if (!seen.empty()) return;
  // No param_shapes (a stage-0 DeepSpeed checkpoint): the module's tensors that are not buffers.
  std::unordered_set<std::string> buffers;
  if (const Value* names = get(&model, "buffer_names"); names && names->is_sequence()) {
    for (const Value& n : names->items()) {
      if (n.is_string()) buffers.insert(n.as_string());
    }
  }
  if (const Value* module = get(&model, "module"); module && module->is_dict()) {
    for (const auto& [k, v] : module->as_dict()) {
      if (v.is_tensor() && !(k.is_str() && buffers.count(k.as_str()))) {
        out.trainable_params += v.as_tensor().numel();
        ++out.param_tensors;
      }
    }
  }
}

std::string first_float_dtype(const Value* module) {
  if (module == nullptr || !module->is_dict()) return "";
  for (const auto& [k, v] : module->as_dict()) {
    if (v.is_tensor() && at::isFloatingType(v.as_tensor().scalar_type())) {
      return dtype_name(v.as_tensor().scalar_type());
    }
  }
  return "";
}

std::string with_commas(int64_t n) {
  std::string s = std::to_string(n);
  for (int i = static_cast<int>(s.size()) - 3; i > (n < 0 ? 1 : 0); i -= 3) s.insert(i, ",");
  return s;
}

std::string opt_str(const std::optional<int64_t>& v) { return v ? std::to_string(*v) : "unknown"; }

}  // namespace

Inspection inspect_checkpoint(const CheckpointLocation& location) {
  Inspection out;
  out.location = location;
  try {
    out.manifest = ckpt::read_manifest(location.save_dir, location.tag);
    out.manifest_status = "complete";
  } catch (const CheckpointError& e) {
    out.manifest_status = e.what();
  }
  const bool zrt = out.manifest.has_value();
  const ckpt::ReadMode mode = zrt ? ckpt::ReadMode::kStrict : ckpt::ReadMode::kTolerant;

  Value model, optim;  // rank 0's model states and optimizer partition
  bool have_model = false, have_optim = false;
  for (const TagFile& f : list_tag_files(location.tag_dir)) {
    FileReport r{f, {}, ""};
    const bool pt = f.name.size() > 3 && f.name.compare(f.name.size() - 3, 3, ".pt") == 0;
    if (!f.regular) {
      r.error = "not a regular file";
      out.problems.push_back(f.path + ": not a regular file");
    } else if (pt && f.kind != FileKind::kTemp) {
      try {
        Value v = read_pt_metadata(f.path, mode);
        if (v.is_dict()) {
          for (const auto& [k, _] : v.as_dict()) r.keys.push_back(k.repr());
        } else {
          r.keys.push_back(str("<", v.kind_name(), ">"));
        }
        const bool rank0 = f.rank <= 0;
        if (rank0 && !have_model &&
            (f.kind == FileKind::kModelStates || f.kind == FileKind::kZero3ModelStates)) {
          model = std::move(v);
          have_model = true;
        } else if (rank0 && !have_optim && f.kind == FileKind::kOptimStates) {
          optim = std::move(v);
          have_optim = true;
        }
      } catch (const CheckpointError& e) {
        r.error = e.what();
        out.problems.push_back(e.what());
      }
    }
    out.files.push_back(std::move(r));
  }

  const Value* config = get(&model, "ds_config");
  if (config == nullptr) config = get(&optim, "ds_config");
  out.ds_version = get_string(&model, "ds_version");
  if (out.ds_version.empty()) out.ds_version = get_string(&optim, "ds_version");
  if (zrt) {
    out.writer = "ZeroRT " + out.manifest->zrt_version;
  } else if (out.ds_version.find("+zrt") != std::string::npos) {
    out.writer = "ZeroRT";
  } else {
    out.writer = out.ds_version.empty() ? "unknown" : "DeepSpeed";
  }
  out.global_steps = get_int(&model, "global_steps");
  out.global_samples = get_int(&model, "global_samples");
  out.skipped_steps = get_int(&model, "skipped_steps");
  out.world_size = get_int(&model, "dp_world_size");
  out.mp_world_size = get_int(&model, "mp_world_size");
  if (!out.world_size && zrt) out.world_size = out.manifest->world_size;
  if (have_optim) {
    try {
      out.zero_stage = ckpt::zero_stage_of(optim, "optim states 0");
    } catch (const CheckpointError&) {
    }
  }
  if (!out.zero_stage && zrt) out.zero_stage = out.manifest->zero_stage;
  if (!out.zero_stage && have_model && !have_optim) out.zero_stage = 0;
  count_parameters(out, model);

  // dtype: the engine's record, else the config's precision section, else the module's tensors.
  if (zrt && out.manifest->engine.contains("dtype") && out.manifest->engine["dtype"].is_string()) {
    out.dtype = dtype_from_c10_name(out.manifest->engine["dtype"].get<std::string>());
  } else if (enabled(config, "bf16") || enabled(config, "bfloat16")) {
    out.dtype = "bfloat16";
  } else if (enabled(config, "fp16")) {
    out.dtype = "float16";
  } else {
    out.dtype = first_float_dtype(get(&model, "module"));
  }
  if (out.dtype.empty()) out.dtype = "unknown";

  out.optimizer = get_string(get(config, "optimizer"), "type");
  if (zrt && out.manifest->engine.contains("optimizer") &&
      out.manifest->engine["optimizer"].is_string()) {
    out.optimizer_impl = out.manifest->engine["optimizer"].get<std::string>();
  }
  if (out.optimizer.empty()) out.optimizer = out.optimizer_impl;
  out.scheduler = get_string(get(config, "scheduler"), "type");
  return out;
}

std::string inspection_text(const Inspection& in) {
  std::string s;
  auto row = [&](const char* label, const std::string& value) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%-14s", label);
    s += buf + value + "\n";
  };
  row("checkpoint",
      in.location.tag_dir + "  (tag '" + in.location.tag + "' from " + in.location.how + ")");
  row("manifest", in.manifest ? str("complete: ", ckpt::kManifestFile, " lists ",
                                    in.manifest->files.size(), " files")
                              : "none: " + in.manifest_status);
  row("written by",
      in.writer + (in.ds_version.empty() ? "" : " (ds_version " + in.ds_version + ")"));
  row("zero stage", opt_str(in.zero_stage));
  row("world size", opt_str(in.world_size) + " data parallel" +
                        (in.mp_world_size ? ", model parallel " + opt_str(in.mp_world_size) : ""));
  row("dtype", in.dtype);
  row("global steps", opt_str(in.global_steps) + " (samples " + opt_str(in.global_samples) +
                          ", skipped " + opt_str(in.skipped_steps) + ")");
  row("parameters", with_commas(in.trainable_params + in.frozen_params) + " in " +
                        std::to_string(in.param_tensors) + " tensors (" +
                        with_commas(in.trainable_params) + " trainable in " +
                        std::to_string(in.param_groups) +
                        (in.param_groups == 1 ? " group, " : " groups, ") +
                        with_commas(in.frozen_params) + " frozen)");
  row("optimizer", (in.optimizer.empty() ? std::string("unknown") : in.optimizer) +
                       (in.optimizer_impl.empty() || in.optimizer_impl == in.optimizer
                            ? ""
                            : " (implementation: " + in.optimizer_impl + ")"));
  row("scheduler", in.scheduler.empty() ? "none" : in.scheduler);
  uint64_t total = 0;
  for (const FileReport& f : in.files) total += f.file.size;
  row("files", std::to_string(in.files.size()) + ", " + format_bytes(total));
  for (const FileReport& f : in.files) {
    char buf[160];
    std::snprintf(buf, sizeof(buf), "  %-48s %10s  %s\n", f.file.name.c_str(),
                  format_bytes(f.file.size).c_str(), file_kind_name(f.file.kind));
    s += buf;
    if (!f.error.empty()) {
      s += "      unreadable: " + f.error + "\n";
    } else if (!f.keys.empty()) {
      std::string keys;
      for (const std::string& k : f.keys) keys += (keys.empty() ? "" : ", ") + k;
      s += "      keys: " + keys + "\n";
    }
  }
  return s;
}

Json inspection_json(const Inspection& in) {
  auto opt = [](const std::optional<int64_t>& v) { return v ? Json(*v) : Json(nullptr); };
  Json files = Json::array();
  for (const FileReport& f : in.files) {
    Json j = {{"name", f.file.name}, {"size", f.file.size}, {"kind", file_kind_name(f.file.kind)}};
    if (f.file.rank >= 0) j["rank"] = f.file.rank;
    j["keys"] = f.keys;
    if (!f.error.empty()) j["error"] = f.error;
    files.push_back(std::move(j));
  }
  return Json{{"save_dir", in.location.save_dir},
              {"tag", in.location.tag},
              {"tag_dir", in.location.tag_dir},
              {"tag_from", in.location.how},
              {"complete", in.manifest.has_value()},
              {"manifest", in.manifest ? in.manifest->to_json() : Json(nullptr)},
              {"manifest_status", in.manifest_status},
              {"writer", in.writer},
              {"ds_version", in.ds_version},
              {"zero_stage", opt(in.zero_stage)},
              {"world_size", opt(in.world_size)},
              {"mp_world_size", opt(in.mp_world_size)},
              {"dtype", in.dtype},
              {"global_steps", opt(in.global_steps)},
              {"global_samples", opt(in.global_samples)},
              {"skipped_steps", opt(in.skipped_steps)},
              {"parameters", in.trainable_params + in.frozen_params},
              {"trainable_parameters", in.trainable_params},
              {"frozen_parameters", in.frozen_params},
              {"parameter_tensors", in.param_tensors},
              {"param_groups", in.param_groups},
              {"optimizer", in.optimizer},
              {"optimizer_impl", in.optimizer_impl},
              {"scheduler", in.scheduler},
              {"files", files},
              {"problems", in.problems}};
}

}  // namespace zrt::tools
