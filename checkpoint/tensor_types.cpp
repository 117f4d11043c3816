#include "checkpoint/tensor_types.h"

#include "core/error.h"

namespace zrt::ckpt {
namespace {

struct TypeRow {
  at::ScalarType dtype;
  const char* storage;
  const char* safetensors;
  int64_t itemsize;
  const char* python;  // the torch attribute a dtype pickles as: torch.<python>
};

constexpr TypeRow kTypes[] = {
    {at::kDouble, "DoubleStorage", "F64", 8, "float64"},
    {at::kFloat, "FloatStorage", "F32", 4, "float32"},
    {at::kHalf, "HalfStorage", "F16", 2, "float16"},
    {at::kBFloat16, "BFloat16Storage", "BF16", 2, "bfloat16"},
    {at::kLong, "LongStorage", "I64", 8, "int64"},
    {at::kInt, "IntStorage", "I32", 4, "int32"},
    {at::kShort, "ShortStorage", "I16", 2, "int16"},
    {at::kChar, "CharStorage", "I8", 1, "int8"},
    {at::kByte, "ByteStorage", "U8", 1, "uint8"},
    {at::kBool, "BoolStorage", "BOOL", 1, "bool"},
};

const TypeRow* row_of(at::ScalarType dtype) {
  for (const auto& r : kTypes) {
    if (r.dtype == dtype) return &r;
  }
  return nullptr;
}

const TypeRow& checked_row(at::ScalarType dtype) {
  const TypeRow* r = row_of(dtype);
  ZRT_CHECK_AS(CheckpointError, r != nullptr, "tensor dtype ", c10::toString(dtype),
               " is not supported in checkpoints (float64/32/16, bfloat16, int64/32/16/8, uint8, "
               "bool are)");
  return *r;
}

}  // namespace

bool is_checkpoint_dtype(at::ScalarType dtype) { return row_of(dtype) != nullptr; }
const char* storage_class_name(at::ScalarType dtype) { return checked_row(dtype).storage; }
const char* safetensors_dtype_name(at::ScalarType dtype) { return checked_row(dtype).safetensors; }
int64_t dtype_itemsize(at::ScalarType dtype) { return checked_row(dtype).itemsize; }
const char* python_dtype_name(at::ScalarType dtype) { return checked_row(dtype).python; }

std::optional<at::ScalarType> dtype_of_python_name(const std::string& name) {
  for (const auto& r : kTypes) {
    if (name == r.python) return r.dtype;
  }
  return std::nullopt;
}

std::optional<at::ScalarType> dtype_of_storage_class(const std::string& name) {
  for (const auto& r : kTypes) {
    if (name == r.storage) return r.dtype;
  }
  return std::nullopt;
}

std::optional<at::ScalarType> dtype_of_safetensors_name(const std::string& name) {
  for (const auto& r : kTypes) {
    if (name == r.safetensors) return r.dtype;
  }
  return std::nullopt;
}

}  // namespace zrt::ckpt
