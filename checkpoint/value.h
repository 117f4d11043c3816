// ckpt::Value: the values a DeepSpeed-layout checkpoint holds, i.e. the subset of Python objects
// that torch.save pickles for state dicts: None, bool, int, float, str, list, tuple, dict
// (str or int keys; optionally an OrderedDict), torch.Size, CPU tensors, and an opaque placeholder
// for Python objects the tolerant reader met but did not build.
// Owns the value type, builders, typed access and the JSON conversion (implemented in
// value_view.cpp with ValueView, the path-naming access of value_view.h). Does not own
// (un)pickling: see pickler.h and unpickler.h.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

#include "core/json.h"

namespace zrt::ckpt {

enum class ValueKind {
  kNone,
  kBool,
  kInt,
  kDouble,
  kString,
  kList,
  kTuple,
  kDict,
  kSize,
  kTensor,
  kObject
};
// "None", "bool", "int", "float", "str", "list", "tuple", "dict", "torch.Size", "tensor", "object".
const char* value_kind_name(ValueKind kind);

// A dict key: a Python str or int.
class Key {
 public:
  Key(const char* s) : is_int_(false), str_(s) {}             // NOLINT(google-explicit-constructor)
  Key(std::string s) : is_int_(false), str_(std::move(s)) {}  // NOLINT
  Key(int i) : is_int_(true), int_(i) {}                      // NOLINT
  Key(int64_t i) : is_int_(true), int_(i) {}                  // NOLINT

  bool is_int() const { return is_int_; }
  bool is_str() const { return !is_int_; }
  int64_t as_int() const;             // throws CheckpointError for a str key
  const std::string& as_str() const;  // throws CheckpointError for an int key
  // Python repr: 'name' or 3.
  std::string repr() const;

  bool operator==(const Key& o) const {
    return is_int_ == o.is_int_ && (is_int_ ? int_ == o.int_ : str_ == o.str_);
  }
  bool operator!=(const Key& o) const { return !(*this == o); }
  size_t hash() const;

 private:
  bool is_int_;
  int64_t int_ = 0;
  std::string str_;
};

struct KeyHash {
  size_t operator()(const Key& k) const { return k.hash(); }
};

class Value;
struct ObjectData;

// An insertion-ordered dict with O(1) lookup. Setting an existing key keeps its position (Python
// semantics).
class Dict {
 public:
  using Item = std::pair<Key, Value>;

  Dict();
  Dict(const Dict& other);
  Dict(Dict&& other) noexcept;
  Dict& operator=(const Dict& other);
  Dict& operator=(Dict&& other) noexcept;
  ~Dict();

  // Defined after Value: clang instantiates vector<Item>::size() here, where Value is incomplete.
  size_t size() const;
  bool empty() const;
  bool contains(const Key& key) const { return index_.count(key) != 0; }
  const Value* find(const Key& key) const;
  Value* find(const Key& key);
  // Inserts or replaces; returns the stored value.
  Value& set(Key key, Value value);
  const std::vector<Item>& items() const { return items_; }
  std::vector<Item>::const_iterator begin() const { return items_.begin(); }
  std::vector<Item>::const_iterator end() const { return items_.end(); }

 private:
  std::vector<Item> items_;
  std::unordered_map<Key, size_t, KeyHash> index_;
};

// A value tree. Copies are deep for containers and shallow for tensors (like copying a Python
// dict of tensors). Scalar and container accessors throw CheckpointError("expected int, got str")
// on a kind mismatch; use ValueView (value_view.h) to get the key path into such messages.
class Value {
 public:
  Value() = default;                    // None
  Value(std::nullptr_t) {}              // NOLINT(google-explicit-constructor)
  Value(bool b);                        // NOLINT
  Value(int i);                         // NOLINT
  Value(int64_t i);                     // NOLINT
  Value(double d);                      // NOLINT
  Value(const char* s);                 // NOLINT
  Value(std::string s);                 // NOLINT
  Value(at::Tensor t);                  // NOLINT
  Value(Dict d, bool ordered = false);  // NOLINT

  static Value list(std::vector<Value> items = {});
  static Value tuple(std::vector<Value> items = {});
  static Value dict();          // a plain dict
  static Value ordered_dict();  // collections.OrderedDict
  static Value torch_size(std::vector<int64_t> dims);
  // A Python object that is not one of the kinds above. The reader keeps what it did not build as
  // such a placeholder (tolerant mode; strict mode only DeepSpeed's loss scalers and torch dtypes,
  // pt/unpickle_globals.cpp). `type` is "module.qualname"; `args` what the class or function was
  // called with; `state` what BUILD set; `list_items` / `dict_items` what APPEND / SETITEM added.
  // Writable are a bare global (`object(type)`, e.g. "torch.float16") and a plain instance (args
  // `()`, a state or None: what pickle makes of an object with a __dict__).
  static Value object(std::string type, Value args, Value state, Value list_items,
                      Value dict_items);
  static Value object(std::string type);
  static Value object(std::string type, Value args);

  ValueKind kind() const { return kind_; }
  const char* kind_name() const { return value_kind_name(kind_); }
  bool is_none() const { return kind_ == ValueKind::kNone; }
  bool is_bool() const { return kind_ == ValueKind::kBool; }
  bool is_int() const { return kind_ == ValueKind::kInt; }
  bool is_double() const { return kind_ == ValueKind::kDouble; }
  bool is_number() const { return is_int() || is_double(); }
  bool is_string() const { return kind_ == ValueKind::kString; }
  bool is_list() const { return kind_ == ValueKind::kList; }
  bool is_tuple() const { return kind_ == ValueKind::kTuple; }
  bool is_sequence() const { return is_list() || is_tuple(); }
  bool is_dict() const { return kind_ == ValueKind::kDict; }
  bool is_ordered_dict() const { return is_dict() && ordered_; }
  bool is_size() const { return kind_ == ValueKind::kSize; }
  bool is_tensor() const { return kind_ == ValueKind::kTensor; }
  bool is_object() const { return kind_ == ValueKind::kObject; }

  bool as_bool() const;
  int64_t as_int() const;    // int only (not bool, not float)
  double as_double() const;  // float, or int converted (Python code mixes 1 and 1.0)
  const std::string& as_string() const;
  const at::Tensor& as_tensor() const;
  const std::vector<int64_t>& as_size() const;
  // Elements of a list or tuple.
  const std::vector<Value>& items() const;
  std::vector<Value>& items();
  const Dict& as_dict() const;
  Dict& as_dict();
  const ObjectData& as_object() const;

  // Sequence helpers: number of elements of a list, tuple, dict or torch.Size.
  size_t length() const;
  const Value& operator[](size_t i) const;  // list/tuple element, bounds-checked
  Value& push_back(Value v);                // list/tuple

  // Dict helpers (throw on a non-dict; at() throws CheckpointError naming a missing key).
  bool contains(const Key& key) const;
  const Value* find(const Key& key) const;
  const Value& at(const Key& key) const;
  Value& at(const Key& key);
  Value& set(Key key, Value value);  // returns the stored value

  // Structural equality; tensors compare by dtype, shape and values (at::equal).
  bool equals(const Value& other) const;
  // Python-like repr, tensors abbreviated ("tensor(float32[2, 3])"), truncated at `max_chars`.
  std::string repr(size_t max_chars = 2000) const;

 private:
  [[noreturn]] void kind_error(const char* expected) const;

  ValueKind kind_ = ValueKind::kNone;
  bool ordered_ = false;  // OrderedDict
  bool bool_ = false;
  int64_t int_ = 0;
  double double_ = 0;
  std::string string_;
  std::vector<Value> items_;   // list / tuple
  std::vector<int64_t> dims_;  // torch.Size
  std::unique_ptr<Dict> dict_;
  at::Tensor tensor_;
  std::shared_ptr<const ObjectData> object_;  // immutable, so sharing is a copy

 public:
  Value(const Value& other);
  Value(Value&& other) noexcept = default;
  Value& operator=(const Value& other);
  Value& operator=(Value&& other) noexcept = default;
  ~Value();
};

inline size_t Dict::size() const { return items_.size(); }
inline bool Dict::empty() const { return items_.empty(); }

struct ObjectData {
  std::string type;
  Value args, state, list_items, dict_items;
};

// An ordered list of named tensors (state dicts for safetensors and consolidation).
using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;
// NamedTensors as an OrderedDict Value (what torch.save of a state dict holds).
Value ordered_dict_of(const NamedTensors& tensors);

// JSON <-> Value for non-tensor state (scheduler and loss-scaler state dicts). Integers stay ints
// and floats stay floats. from_json makes plain dicts; to_json accepts None, bool, int, float, str,
// list, tuple, torch.Size and dicts with str keys, and throws CheckpointError naming the path of
// anything else (tensors, objects, int keys, non-finite floats).
Value from_json(const Json& json);
Json to_json(const Value& value);

}  // namespace zrt::ckpt
