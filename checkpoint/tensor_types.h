// The tensor element types the checkpoint formats accept, and their names in each format:
// torch's pickled storage classes ("FloatStorage"), safetensors' dtype strings ("F32") and
// torch's dtype objects ("float32").
// Anything not listed (complex, quantized, float8, unsigned > 8 bit) is refused by readers and
// writers alike.
#pragma once

#include <optional>
#include <string>

#include <c10/core/ScalarType.h>

namespace zrt::ckpt {

// True for float64/32/16, bfloat16, int64/32/16/8, uint8 and bool.
bool is_checkpoint_dtype(at::ScalarType dtype);
// "FloatStorage" for float32, ...; throws CheckpointError for a dtype outside the set.
const char* storage_class_name(at::ScalarType dtype);
// The inverse; nullopt for an unknown name.
std::optional<at::ScalarType> dtype_of_storage_class(const std::string& name);
// "F32", "BF16", "BOOL", ...; throws CheckpointError for a dtype outside the set.
const char* safetensors_dtype_name(at::ScalarType dtype);
std::optional<at::ScalarType> dtype_of_safetensors_name(const std::string& name);
// "float16" for torch.float16, ...: the torch attribute a dtype object pickles as (GLOBAL
// 'torch float16'); throws CheckpointError for a dtype outside the set.
const char* python_dtype_name(at::ScalarType dtype);
std::optional<at::ScalarType> dtype_of_python_name(const std::string& name);
// Bytes per element (1, 2, 4 or 8).
int64_t dtype_itemsize(at::ScalarType dtype);

}  // namespace zrt::ckpt
