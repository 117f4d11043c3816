#include "checkpoint/hf_weights.h"

#include <algorithm>
#include <map>

#include "checkpoint/io.h"
#include "checkpoint/pt/pt_file.h"
#include "checkpoint/safetensors.h"
#include "checkpoint/storage.h"
#include "core/error.h"
#include "core/strings.h"
#include "core/json.h"
#include <sys/stat.h>

namespace zrt::ckpt {

struct HfWeights::File {
  std::string path;
  bool safetensors = true;
  std::unique_ptr<FileSource> source;
  std::vector<SafetensorsEntry> entries;  // safetensors only
};

namespace {

constexpr uint64_t kMaxIndexBytes = uint64_t{64} << 20;

bool is_regular(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

bool is_directory(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

}  // namespace

int64_t WeightInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

HfWeights::HfWeights(const std::string& path) : path_(path) {
  if (is_regular(path)) {
    if (ends_with(path, ".index.json")) {
      index_sharded(path);
    } else {
      index_file(path);
    }
    return;
  }
  ZRT_CHECK_AS(CheckpointError, is_directory(path), path, ": no such file or folder of weights");
  for (const char* name : {"model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                           "pytorch_model.bin.index.json"}) {
    const std::string candidate = join_path(path, name);
    if (!is_regular(candidate)) continue;
    if (ends_with(candidate, ".index.json")) {
      index_sharded(candidate);
    } else {
      index_file(candidate);
    }
    return;
  }
  throw CheckpointError(str(path, ": no weights found (looked for model.safetensors, ",
                            "model.safetensors.index.json, pytorch_model.bin and ",
                            "pytorch_model.bin.index.json)"));
}

HfWeights::~HfWeights() = default;

void HfWeights::index_file(const std::string& file_path) {
  auto file = std::make_unique<File>();
  file->path = file_path;
  file->safetensors = ends_with(file_path, ".safetensors");
  file->source = std::make_unique<FileSource>(file_path);
  const int index = static_cast<int>(files_.size());
  auto add = [&](WeightInfo info, size_t entry) {
    auto seen = by_name_.find(info.name);
    if (seen != by_name_.end()) {
      throw CheckpointError(str(file_path, ": tensor '", info.name, "' is also in ",
                                file_paths_.at(tensors_[seen->second].file)));
    }
    info.file = index;
    by_name_[info.name] = tensors_.size();
    tensors_.push_back(std::move(info));
    entry_of_.push_back(entry);
  };
  file_paths_.push_back(file_path);
  if (file->safetensors) {
    file->entries = index_safetensors(*file->source).tensors;
    for (size_t i = 0; i < file->entries.size(); ++i) {
      const SafetensorsEntry& e = file->entries[i];
      add(WeightInfo{e.name, e.dtype, e.shape, 0}, i);
    }
  } else {
    ReadOptions options;
    options.meta_tensors = true;
    const Value state = read_pt(*file->source, options);
    ZRT_CHECK_AS(CheckpointError, state.is_dict(), file_path, ": holds a value of type ",
                 state.kind_name(), ", not a state dict");
    for (const auto& [key, value] : state.as_dict()) {
      ZRT_CHECK_AS(CheckpointError, key.is_str(), file_path, ": state dict key ", key.repr(),
                   " is not a string");
      ZRT_CHECK_AS(CheckpointError, value.is_tensor(), file_path, ": '", key.as_str(),
                   "' holds a value of type ", value.kind_name(), ", not a tensor");
      const at::Tensor& t = value.as_tensor();
      add(WeightInfo{key.as_str(), t.scalar_type(), t.sizes().vec(), 0}, 0);
    }
  }
  files_.push_back(std::move(file));
}

void HfWeights::index_sharded(const std::string& index_path) {
  const FileSource source(index_path);
  ZRT_CHECK_AS(CheckpointError, source.size() <= kMaxIndexBytes, index_path, ": ", source.size(),
               " bytes is too large for a weight index");
  Json index;
  try {
    index = Json::parse(source.read_string(0, source.size()));
  } catch (const Json::exception& e) {
    throw CheckpointError(str(index_path, ": not valid JSON: ", e.what()));
  }
  ZRT_CHECK_AS(CheckpointError,
               index.is_object() && index.contains("weight_map") && index["weight_map"].is_object(),
               index_path, ": no \"weight_map\" object");
  const std::string folder = parent_dir(index_path);
  std::map<std::string, std::string> mapped;  // tensor -> shard
  std::vector<std::string> shards;            // in order of first mention
  for (const auto& [name, shard] : index["weight_map"].items()) {
    ZRT_CHECK_AS(CheckpointError, shard.is_string(), index_path, ": weight_map['", name,
                 "'] is not a file name");
    const std::string file = shard.get<std::string>();
    ZRT_CHECK_AS(
        CheckpointError,
        !file.empty() && file != "." && file != ".." && file.find('/') == std::string::npos,
        index_path, ": weight_map['", name, "'] = '", file,
        "' is not a file name in the index's folder");
    mapped[name] = file;
    if (std::find(shards.begin(), shards.end(), file) == shards.end()) shards.push_back(file);
  }
  for (const std::string& shard : shards) {
    const std::string shard_path = join_path(folder, shard);
    ZRT_CHECK_AS(CheckpointError, is_regular(shard_path), index_path, ": shard '", shard,
                 "' is missing");
    const size_t first = tensors_.size();
    index_file(shard_path);
    for (size_t i = first; i < tensors_.size(); ++i) {
      auto it = mapped.find(tensors_[i].name);
      ZRT_CHECK_AS(
          CheckpointError, it != mapped.end() && it->second == shard, shard_path, ": holds '",
          tensors_[i].name, "', which ", index_path,
          it == mapped.end() ? std::string(" does not list") : str(" maps to '", it->second, "'"));
    }
  }
  for (const auto& [name, shard] : mapped) {
    ZRT_CHECK_AS(CheckpointError, by_name_.count(name) != 0, index_path, ": maps '", name, "' to '",
                 shard, "', which does not hold it");
  }
}

const WeightInfo* HfWeights::find(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &tensors_[it->second];
}

at::Tensor HfWeights::read_range(const std::string& name, int64_t begin, int64_t count) const {
  auto it = by_name_.find(name);
  ZRT_CHECK_AS(CheckpointError, it != by_name_.end(), path_, ": has no tensor '", name, "'");
  const WeightInfo& info = tensors_[it->second];
  const File& file = *files_[static_cast<size_t>(info.file)];
  const int64_t numel = info.numel();
  ZRT_CHECK_AS(CheckpointError,
               begin >= 0 && count >= 0 && begin <= numel && count <= numel - begin, file.path,
               ": tensor '", name, "': elements [", begin, ", ", begin + count,
               ") lie outside its ", numel);
  if (file.safetensors) {
    at::Tensor t =
        read_safetensors_range(*file.source, file.entries[entry_of_[it->second]], begin, count);
    bytes_read_ += static_cast<uint64_t>(t.nbytes());
    return t;
  }
  ReadOptions options;
  options.only_keys = {name};
  const Value state = read_pt(*file.source, options);
  const Value* value = state.as_dict().find(name);
  ZRT_INTERNAL_ASSERT(value != nullptr && value->is_tensor(), "indexed tensor '", name,
                      "' vanished from ", file.path);
  const at::Tensor& whole = value->as_tensor();
  bytes_read_ += static_cast<uint64_t>(whole.nbytes());
  return whole.reshape({-1}).narrow(0, begin, count).clone();
}

at::Tensor HfWeights::read(const std::string& name) const {
  const WeightInfo* info = find(name);
  ZRT_CHECK_AS(CheckpointError, info != nullptr, path_, ": has no tensor '", name, "'");
  return read_range(name, 0, info->numel()).view(info->shape);
}

}  // namespace zrt::ckpt
