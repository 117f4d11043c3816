#include "checkpoint/universal.h"

#include <filesystem>

#include "checkpoint/layout.h"
#include "checkpoint/storage.h"
#include "checkpoint/value_view.h"
#include "checkpoint/zero_folder.h"
#include "core/error.h"

namespace zrt::ckpt {

namespace fs = std::filesystem;

namespace {

constexpr const char* kOptimizerStateFile = "optimizer_state.pt";

// The tensor a universal state file holds: DeepSpeed's {"param": t, ...} or a bare tensor.
const at::Tensor& universal_tensor(const Value& file, const std::string& path) {
  if (file.is_tensor()) return file.as_tensor();
  return ValueView(file, path)["param"].as_tensor();
}

int64_t step_value(const Value& v, const PtIndex& file, const std::string& where) {
  if (v.is_tensor()) return static_cast<int64_t>(file.read(v.as_tensor()).item<double>());
  ZRT_CHECK_AS(CheckpointError, v.is_number(), where, ": expected a step count, got ",
               v.repr(200));
  return static_cast<int64_t>(v.as_double());
}

}  // namespace

std::string universal_state_path(const std::string& folder, const std::string& param,
                                 const std::string& state) {
  ZRT_CHECK_AS(CheckpointError,
               !param.empty() && param != "." && param != ".." &&
                   param.find('/') == std::string::npos && param.find('\0') == std::string::npos,
               folder, ": parameter name '", param, "' cannot name a folder");
  return join_path(join_path(join_path(folder, "zero"), param), state + ".pt");
}

UniversalFolder::UniversalFolder(std::string folder) : folder_(std::move(folder)) {
  const std::string optim = join_path(join_path(folder_, "zero"), kOptimizerStateFile);
  ZRT_CHECK_AS(CheckpointError, fs::is_regular_file(optim), folder_,
               ": not a universal checkpoint (no zero/", kOptimizerStateFile, ")");
  ReadOptions ro;
  ro.mode = ReadMode::kTolerant;  // DeepSpeed pickles its classes there
  optim_ = std::make_unique<PtIndex>(optim, ro);
  for (const std::string& name : {model_states_name(), zero3_model_states_name(0)}) {
    if (fs::is_regular_file(join_path(folder_, name))) {
      model_file_ = name;
      break;
    }
  }
  ZRT_CHECK_AS(CheckpointError, !model_file_.empty(), folder_, ": neither ", model_states_name(),
               " nor ", zero3_model_states_name(0), " (the model states of a universal checkpoint)");
}

bool UniversalFolder::has(const std::string& param, const std::string& state) const {
  return fs::is_regular_file(universal_state_path(folder_, param, state));
}

RangeReader UniversalFolder::reader(const std::string& state) const {
  const std::string folder = folder_;
  return [folder, state](const std::string& name, int64_t numel, ShardInfo range) {
    const std::string path = universal_state_path(folder, name, state);
    ZRT_CHECK_AS(CheckpointError, fs::is_regular_file(path), path,
                 ": missing (the universal checkpoint has no ", state, " for '", name, "')");
    ReadOptions ro;
    ro.mode = ReadMode::kTolerant;
    const PtIndex file(path, ro);
    const at::Tensor& t = universal_tensor(file.value(), path);
    ZRT_CHECK_AS(CheckpointError, t.numel() == numel, path, ": ", t.numel(),
                 " elements, the parameter has ", numel);
    return file.read(t.reshape({-1}), range.offset, range.size);
  };
}

std::map<std::string, int64_t> UniversalFolder::params() const {
  std::map<std::string, int64_t> out;
  for (const auto& entry : fs::directory_iterator(join_path(folder_, "zero"))) {
    const std::string name = entry.path().filename().string();
    if (!entry.is_directory() || !has(name, kFp32State)) continue;
    ReadOptions ro;
    ro.mode = ReadMode::kTolerant;
    const std::string path = universal_state_path(folder_, name, kFp32State);
    out[name] = universal_tensor(PtIndex(path, ro).value(), path).numel();
  }
  return out;
}

std::string UniversalFolder::location(const std::string& param, const std::string& state) const {
  return universal_state_path(folder_, param, state);
}

const Value& UniversalFolder::param_groups() const {
  return ValueView(optimizer_state(), optim_->path())["param_groups"].value();
}

const Value& UniversalFolder::optimizer_name() const {
  static const Value none;
  const Value* osd = optimizer_state().find("optimizer_state_dict");
  const Value* name = osd != nullptr && osd->is_dict() ? osd->find("zrt_optimizer") : nullptr;
  return name != nullptr ? *name : none;
}

const Value& UniversalFolder::loss_scaler() const {
  static const Value none;
  const Value* scaler = optimizer_state().find("loss_scaler");
  return scaler != nullptr ? *scaler : none;
}

std::optional<int64_t> UniversalFolder::step(const std::string& param, size_t group) const {
  const std::string path = universal_state_path(folder_, param, "step");
  if (fs::is_regular_file(path)) {
    ReadOptions ro;
    ro.mode = ReadMode::kTolerant;
    const PtIndex file(path, ro);
    return step_value(file.value(), file, path);
  }
  const Value& o = optimizer_state();
  const Value* osd = o.is_dict() ? o.find("optimizer_state_dict") : nullptr;
  const Value* state = osd != nullptr && osd->is_dict() ? osd->find("state") : nullptr;
  const Value* entry = state != nullptr && state->is_dict()
                           ? state->find(static_cast<int64_t>(group))
                           : nullptr;
  if (entry == nullptr || !entry->is_dict() || !entry->contains("step")) return std::nullopt;
  return step_value(entry->at("step"), *optim_, optim_->path());
}

namespace {

// zero/optimizer_state.pt from the source's rank-0 optimizer state (Note [Universal
// checkpoints]): the global keys, the groups' hyper-parameters, and each group's step in both the
// stage-1/2 and the stage-3 places.
Value universal_optimizer_state(const ZeroFolder& zero) {
  const Value& osd = zero.optimizer_state(0);
  Value out = Value::dict();
  for (const char* key : {"loss_scaler", "dynamic_loss_scale", "overflow", "clip_grad",
                          "partition_count", "ds_version"}) {
    if (const Value* v = osd.find(key)) out.set(key, *v);
  }
  out.set("zero_stage", zero.zero_stage());
  out.set("param_groups", zero.param_groups());
  Value steps = Value::dict();
  for (size_t g = 0; g < zero.groups().size(); ++g) {
    Value entry = Value::dict();
    entry.set("step", zero.group_step(g));
    steps.set(static_cast<int64_t>(g), std::move(entry));
  }
  Value base = Value::dict();
  base.set("state", std::move(steps));
  base.set("param_groups", zero.param_groups());
  const Value& name = zero.optimizer_name();
  if (!name.is_none()) base.set("zrt_optimizer", name);
  out.set("optimizer_state_dict", std::move(base));
  return out;
}

void write_universal_params(const ZeroFolder& zero, const std::string& tmp,
                            UniversalWriteStats& stats) {
  for (size_t g = 0; g < zero.groups().size(); ++g) {
    const int64_t step = zero.group_step(g);
    for (const char* state : {kFp32State, kExpAvgState, kExpAvgSqState, "momentum_buffer"}) {
      if (!zero.has_state(g, state)) continue;
      const RangeReader read = zero.reader(g, state);
      for (const auto& [name, shape] : zero.groups()[g]) {
        const std::string path = universal_state_path(tmp, name, state);
        fs::create_directories(fs::path(path).parent_path());
        const int64_t numel = shape_numel(shape);
        Value file = Value::dict();
        file.set("cat_dim", 0);
        file.set("param", read(name, numel, ShardInfo{0, numel}).to(at::kFloat).reshape(shape));
        stats.bytes += static_cast<int64_t>(save_pt(file, path).size);
        ++stats.files;
      }
    }
    for (const auto& [name, shape] : zero.groups()[g]) {
      stats.bytes += static_cast<int64_t>(save_pt(Value(step), universal_state_path(tmp, name, "step")).size);
      ++stats.files;
      ++stats.params;
    }
  }
}

}  // namespace

UniversalWriteStats write_universal(const std::string& src, const std::string& out) {
  // Converting again replaces an earlier conversion (as DeepSpeed's ds_to_universal does), never
  // anything else.
  const bool replace = fs::exists(out);
  ZRT_CHECK_AS(CheckpointError,
               !replace || fs::is_regular_file(join_path(join_path(out, "zero"), kOptimizerStateFile)),
               out, ": exists and is not a universal checkpoint (refusing to replace it)");
  const ZeroFolder zero(src);
  const fs::path out_path = fs::absolute(out).lexically_normal();
  const std::string tag = out_path.filename().string();
  validate_tag(tag);
  const std::string tmp = out_path.string() + ".universal-tmp";
  UniversalWriteStats stats;
  try {
    fs::remove_all(tmp);  // a leftover of an interrupted conversion to the same folder
    fs::create_directories(join_path(tmp, "zero"));
    write_universal_params(zero, tmp, stats);
    stats.bytes += static_cast<int64_t>(
        save_pt(universal_optimizer_state(zero), join_path(join_path(tmp, "zero"), kOptimizerStateFile))
            .size);
    ++stats.files;
    for (const std::string& name : zero.model_states_files()) {
      fs::copy_file(join_path(src, name), join_path(tmp, name));
      stats.bytes += static_cast<int64_t>(fs::file_size(join_path(tmp, name)));
      ++stats.files;
    }
    PosixStorage storage;
    storage.sync_dir(tmp);
    if (replace) {
      const std::string old = out_path.string() + ".universal-old";
      fs::remove_all(old);
      fs::rename(out_path, old);
      fs::rename(tmp, out_path);
      fs::remove_all(old);
    } else {
      fs::rename(tmp, out_path);
    }
    storage.sync_dir(out_path.parent_path().string());
    storage.write_file_atomic(join_path(out_path.parent_path().string(), kLatestUniversalFile),
                              tag);
  } catch (const fs::filesystem_error& e) {
    std::error_code ignored;
    fs::remove_all(tmp, ignored);
    throw CheckpointError(str(out, ": ", e.what()));
  } catch (...) {
    std::error_code ignored;
    fs::remove_all(tmp, ignored);
    throw;
  }
  return stats;
}

}  // namespace zrt::ckpt
