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

// Throws CheckpointError naming the file and the first problem.
SafetensorsFile read_safetensors(const ByteSource& source,
                                 const SafetensorsReadOptions& options = {});
SafetensorsFile load_safetensors(const std::string& path,
                                 const SafetensorsReadOptions& options = {});

}  // namespace zrt::ckpt
