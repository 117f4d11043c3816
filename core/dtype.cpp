#include "core/dtype.h"

#include <algorithm>
#include <cctype>

namespace zrt {

std::optional<DType> parse_dtype(const std::string& text) {
  std::string t = text;
  std::transform(t.begin(), t.end(), t.begin(), [](unsigned char c) { return std::tolower(c); });
  if (t == "fp32" || t == "float32" || t == "float") return DType::kFloat32;
  if (t == "fp16" || t == "float16" || t == "half") return DType::kFloat16;
  if (t == "bf16" || t == "bfloat16") return DType::kBFloat16;
  return std::nullopt;
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return "fp32";
    case DType::kFloat16:
      return "fp16";
    case DType::kBFloat16:
      return "bf16";
  }
  return "?";
}

int dtype_size(DType dtype) { return dtype == DType::kFloat32 ? 4 : 2; }

}  // namespace zrt
