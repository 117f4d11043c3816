// safetensors files (https://github.com/huggingface/safetensors format, restated in FORMAT.md):
// an 8-byte little-endian header length, a JSON header naming each tensor's dtype, shape and
// byte range, then the raw little-endian tensor bytes. Used for save_16bit_model and
// `zrt-ckpt to-fp32 --safetensors`. The reader validates the header like the reference loader
// (size cap, exact coverage of the data, shape x dtype = byte length, overflow checks).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

#include "checkpoint/io.h"
#include "checkpoint/storage.h"
#include "checkpoint/value.h"

namespace zrt::ckpt {

using StringPairs = std::vector<std::pair<std::string, std::string>>;

struct SafetensorsFile {
  NamedTensors tensors;  // in data order
  StringPairs metadata;  // the optional "__metadata__" (str -> str)
};

struct SafetensorsReadOptions {
  uint64_t max_header_bytes = 100'000'000;  // the reference loader's limit
  size_t max_tensors = size_t{1} << 20;
};

// Writes `tensors` in the given order (non-contiguous ones are written as contiguous copies).
// Throws CheckpointError for an empty, duplicate or "__metadata__" name, a non-CPU or
// unsupported tensor, and for sink failures.
void write_safetensors(const NamedTensors& tensors, ByteSink& sink,
                       const StringPairs& metadata = {});
FileInfo save_safetensors(const NamedTensors& tensors, const std::string& path,
                          const StringPairs& metadata = {}, Storage* storage = nullptr);

// One tensor of a safetensors file, located without reading its data.
struct SafetensorsEntry {
  std::string name;
  at::ScalarType dtype = at::kFloat;
  std::vector<int64_t> shape;
  uint64_t offset = 0;  // of its first byte in the file
  uint64_t nbytes = 0;
  int64_t numel() const;
};

struct SafetensorsIndex {
  std::vector<SafetensorsEntry> tensors;  // in data order
  StringPairs metadata;
};

// Reads and validates the header only (every check of read_safetensors but the bool bytes).
// Throws CheckpointError naming the file and the first problem.
SafetensorsIndex index_safetensors(const ByteSource& source,
                                   const SafetensorsReadOptions& options = {});
// Elements [begin, begin + count) of `entry`'s flattened tensor as a new 1-D tensor of its dtype;
// reads only those bytes. Throws CheckpointError for a range outside the tensor, a failed read,
// or a bool byte other than 0 or 1.
at::Tensor read_safetensors_range(const ByteSource& source, const SafetensorsEntry& entry,
                                  int64_t begin, int64_t count);

// Throws CheckpointError naming the file and the first problem.
SafetensorsFile read_safetensors(const ByteSource& source,
                                 const SafetensorsReadOptions& options = {});
SafetensorsFile load_safetensors(const std::string& path,
                                 const SafetensorsReadOptions& options = {});

}  // namespace zrt::ckpt
