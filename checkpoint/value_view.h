// ValueView: read access to a ckpt::Value tree that names the file and key path in every error
// ("optim.pt: optimizer_state_dict.state[0].exp_avg: expected tensor, got int"). The engine reads
// loaded checkpoints through it. Owns only access and messages; the tree is value.h's.
#pragma once

#include <string>
#include <vector>

#include "checkpoint/value.h"

namespace zrt::ckpt {

// Read access with the path in every error: ValueView(v, "model_states.pt")["module"]["w"]
// .as_tensor() throws CheckpointError("model_states.pt: module.w: expected tensor, got int").
class ValueView {
 public:
  ValueView(const Value& value, std::string context, std::string path = "")
      : value_(&value), context_(std::move(context)), path_(std::move(path)) {}

  const Value& value() const { return *value_; }
  const std::string& path() const { return path_; }
  ValueKind kind() const { return value_->kind(); }

  bool contains(const Key& key) const;
  ValueView operator[](const Key& key) const;  // dict entry; throws when missing
  ValueView at(size_t index) const;            // list/tuple element
  size_t length() const;

  bool as_bool() const;
  int64_t as_int() const;
  double as_double() const;
  const std::string& as_string() const;
  const at::Tensor& as_tensor() const;
  std::vector<int64_t> as_shape() const;  // torch.Size, or a list/tuple of ints
  const Dict& as_dict() const;
  const std::vector<Value>& items() const;  // list or tuple

  // Throws CheckpointError("<context>: <path>: <message>").
  [[noreturn]] void fail(const std::string& message) const;
  // "<context>: <path>" for messages of callers.
  std::string where() const;

 private:
  void expect(bool ok, const char* expected) const;

  const Value* value_;
  std::string context_;
  std::string path_;
};

// The path of `key` under `parent`: "a.b", "a[3]", "a['x.y']".
std::string value_key_path(const std::string& parent, const Key& key);

}  // namespace zrt::ckpt
