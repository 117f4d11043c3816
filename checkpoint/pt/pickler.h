// Value -> pickle bytes (protocol 2) exactly as torch.save lays them out, plus the list of tensor
// storages the pickle refers to by persistent id. Owns the opcode choice and memo policy (Note
// [What torch.save emits]); writing the zip container is pt_writer.h's job.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "checkpoint/value.h"

namespace zrt::ckpt {

// One storage referenced by the pickle: record "data/<key>" holds its `nbytes` bytes.
struct PickledStorage {
  std::string key;  // "0", "1", ... in order of first use
  at::ScalarType dtype = at::kFloat;
  int64_t numel = 0;
  const void* data = nullptr;
  size_t nbytes = 0;
  c10::Storage storage;  // keeps `data` alive
};

struct PickleResult {
  std::string bytes;
  std::vector<PickledStorage> storages;
};

// Throws CheckpointError naming the key path of anything that cannot be written: undefined,
// non-CPU, sparse or quantized tensors, dtypes outside tensor_types.h, two tensors viewing one
// storage with different dtypes, and objects other than a global reference or a plain instance
// (Note [What torch.save emits] in pickler.cpp).
PickleResult pickle_value(const Value& value);

}  // namespace zrt::ckpt
