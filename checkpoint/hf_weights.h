// Hugging Face weight files, as transformers' save_pretrained writes them, indexed without reading
// any tensor data so that a rank reads only the elements it holds:
//   DIR/model.safetensors                  one safetensors file
//   DIR/model.safetensors.index.json       {"weight_map": {name: shard}} and the shards it names
//   DIR/pytorch_model.bin                  a torch.save state dict
//   DIR/pytorch_model.bin.index.json       the same for .bin shards
// looked for in that order (transformers prefers safetensors), or one .safetensors / .bin file.
// safetensors tensors are read by byte range: exactly the elements asked for (a pread into the
// new tensor; no whole tensor, no mapping of the file). A torch.save archive stores each storage
// as one zip record, so a .bin tensor is read whole, one at a time, and cut to the range.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include <ATen/ATen.h>

namespace zrt::ckpt {

struct WeightInfo {
  std::string name;
  at::ScalarType dtype = at::kFloat;
  std::vector<int64_t> shape;
  int file = 0;  // index into HfWeights::files()
  int64_t numel() const;
};

class HfWeights {
 public:
  // Indexes the weights at `path` (a folder or one file). Throws CheckpointError naming the file
  // and the problem: no weight file (listing the names looked for), an index that is not valid
  // JSON or names a shard outside the folder, a shard that lacks a tensor the index maps to it or
  // holds one the index maps elsewhere, a name in two shards, a non-tensor in a state dict.
  explicit HfWeights(const std::string& path);
  ~HfWeights();
  HfWeights(const HfWeights&) = delete;
  HfWeights& operator=(const HfWeights&) = delete;

  const std::string& path() const { return path_; }
  // The files in use (full paths), e.g. the shards in index order.
  const std::vector<std::string>& files() const { return file_paths_; }
  // Every tensor, in file order.
  const std::vector<WeightInfo>& tensors() const { return tensors_; }
  const WeightInfo* find(const std::string& name) const;

  // Elements [begin, begin + count) of tensor `name` flattened, as a new 1-D tensor of its dtype.
  // Throws CheckpointError for an unknown name, a range outside the tensor or a failed read.
  at::Tensor read_range(const std::string& name, int64_t begin, int64_t count) const;
  // The whole tensor, its shape and dtype.
  at::Tensor read(const std::string& name) const;
  // Tensor data bytes read from the files so far (headers and pickles not counted).
  uint64_t bytes_read() const { return bytes_read_; }

 private:
  struct File;
  void index_file(const std::string& file_path);
  void index_sharded(const std::string& index_path);

  std::string path_;
  std::vector<std::string> file_paths_;
  std::vector<std::unique_ptr<File>> files_;
  std::vector<WeightInfo> tensors_;
  std::vector<size_t> entry_of_;  // tensors_[i]'s entry in its file (safetensors)
  std::unordered_map<std::string, size_t> by_name_;
  mutable uint64_t bytes_read_ = 0;
};

}  // namespace zrt::ckpt
