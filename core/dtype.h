// Floating-point formats named by configs (fp32/fp16/bf16) without pulling in LibTorch.
#pragma once

#include <optional>
#include <string>

namespace zrt {

enum class DType { kFloat32, kFloat16, kBFloat16 };

// "fp32"/"fp16"/"bf16" (and "float32", "float16", "bfloat16", "half"), case-insensitive.
std::optional<DType> parse_dtype(const std::string& text);
// "fp32", "fp16" or "bf16".
const char* dtype_name(DType dtype);
// Bytes per element.
int dtype_size(DType dtype);

}  // namespace zrt
