#include "checkpoint/value.h"

#include <cmath>
#include <limits>
#include <sstream>

#include <ATen/ATen.h>

#include "core/error.h"

namespace zrt::ckpt {

const char* value_kind_name(ValueKind kind) {
  switch (kind) {
    case ValueKind::kNone:
      return "None";
    case ValueKind::kBool:
      return "bool";
    case ValueKind::kInt:
      return "int";
    case ValueKind::kDouble:
      return "float";
    case ValueKind::kString:
      return "str";
    case ValueKind::kList:
      return "list";
    case ValueKind::kTuple:
      return "tuple";
    case ValueKind::kDict:
      return "dict";
    case ValueKind::kSize:
      return "torch.Size";
    case ValueKind::kTensor:
      return "tensor";
    case ValueKind::kObject:
      return "object";
  }
  return "?";
}

// ---- Key ----

int64_t Key::as_int() const {
  ZRT_CHECK_AS(CheckpointError, is_int_, "expected an int dict key, got ", repr());
  return int_;
}

const std::string& Key::as_str() const {
  ZRT_CHECK_AS(CheckpointError, !is_int_, "expected a str dict key, got ", repr());
  return str_;
}

std::string Key::repr() const { return is_int_ ? std::to_string(int_) : "'" + str_ + "'"; }

size_t Key::hash() const {
  return is_int_ ? std::hash<int64_t>()(int_) : std::hash<std::string>()(str_) * 31 + 7;
}

// ---- Dict ----

Dict::Dict() = default;
Dict::Dict(const Dict& other) = default;
Dict::Dict(Dict&& other) noexcept = default;
Dict& Dict::operator=(const Dict& other) = default;
Dict& Dict::operator=(Dict&& other) noexcept = default;
Dict::~Dict() = default;

const Value* Dict::find(const Key& key) const {
  auto it = index_.find(key);
  return it == index_.end() ? nullptr : &items_[it->second].second;
}

Value* Dict::find(const Key& key) {
  auto it = index_.find(key);
  return it == index_.end() ? nullptr : &items_[it->second].second;
}

Value& Dict::set(Key key, Value value) {
  auto it = index_.find(key);
  if (it != index_.end()) {
    items_[it->second].second = std::move(value);
    return items_[it->second].second;
  }
  index_.emplace(key, items_.size());
  items_.emplace_back(std::move(key), std::move(value));
  return items_.back().second;
}

// ---- Value: construction ----

Value::Value(bool b) : kind_(ValueKind::kBool), bool_(b) {}
Value::Value(int i) : kind_(ValueKind::kInt), int_(i) {}
Value::Value(int64_t i) : kind_(ValueKind::kInt), int_(i) {}
Value::Value(double d) : kind_(ValueKind::kDouble), double_(d) {}
Value::Value(const char* s) : kind_(ValueKind::kString), string_(s) {}
Value::Value(std::string s) : kind_(ValueKind::kString), string_(std::move(s)) {}
Value::Value(at::Tensor t) : kind_(ValueKind::kTensor), tensor_(std::move(t)) {
  ZRT_INTERNAL_ASSERT(tensor_.defined(), "Value built from an undefined tensor");
}
Value::Value(Dict d, bool ordered)
    : kind_(ValueKind::kDict), ordered_(ordered), dict_(std::make_unique<Dict>(std::move(d))) {}

Value::Value(const Value& other)
    : kind_(other.kind_),
      ordered_(other.ordered_),
      bool_(other.bool_),
      int_(other.int_),
      double_(other.double_),
      string_(other.string_),
      items_(other.items_),
      dims_(other.dims_),
      dict_(other.dict_ ? std::make_unique<Dict>(*other.dict_) : nullptr),
      tensor_(other.tensor_),
      object_(other.object_) {}

Value& Value::operator=(const Value& other) {
  if (this != &other) {
    Value copy(other);
    *this = std::move(copy);
  }
  return *this;
}

Value::~Value() = default;

Value Value::list(std::vector<Value> items) {
  Value v;
  v.kind_ = ValueKind::kList;
  v.items_ = std::move(items);
  return v;
}

Value Value::tuple(std::vector<Value> items) {
  Value v = list(std::move(items));
  v.kind_ = ValueKind::kTuple;
  return v;
}

Value Value::dict() { return Value(Dict(), false); }
Value Value::ordered_dict() { return Value(Dict(), true); }

Value Value::torch_size(std::vector<int64_t> dims) {
  Value v;
  v.kind_ = ValueKind::kSize;
  v.dims_ = std::move(dims);
  return v;
}

Value Value::object(std::string type, Value args, Value state, Value list_items, Value dict_items) {
  Value v;
  v.kind_ = ValueKind::kObject;
  auto data = std::make_shared<ObjectData>();
  data->type = std::move(type);
  data->args = std::move(args);
  data->state = std::move(state);
  data->list_items = std::move(list_items);
  data->dict_items = std::move(dict_items);
  v.object_ = std::move(data);
  return v;
}

Value Value::object(std::string type) {
  return object(std::move(type), Value(), Value(), Value(), Value());
}

Value Value::object(std::string type, Value args) {
  return object(std::move(type), std::move(args), Value(), Value(), Value());
}

// ---- Value: access ----

void Value::kind_error(const char* expected) const {
  throw CheckpointError(str("expected ", expected, ", got ", kind_name()));
}

bool Value::as_bool() const {
  if (!is_bool()) kind_error("bool");
  return bool_;
}

int64_t Value::as_int() const {
  if (!is_int()) kind_error("int");
  return int_;
}

double Value::as_double() const {
  if (is_int()) return static_cast<double>(int_);
  if (!is_double()) kind_error("float");
  return double_;
}

const std::string& Value::as_string() const {
  if (!is_string()) kind_error("str");
  return string_;
}

const at::Tensor& Value::as_tensor() const {
  if (!is_tensor()) kind_error("tensor");
  return tensor_;
}

const std::vector<int64_t>& Value::as_size() const {
  if (!is_size()) kind_error("torch.Size");
  return dims_;
}

const std::vector<Value>& Value::items() const {
  if (!is_sequence()) kind_error("list or tuple");
  return items_;
}

std::vector<Value>& Value::items() {
  if (!is_sequence()) kind_error("list or tuple");
  return items_;
}

const Dict& Value::as_dict() const {
  if (!is_dict()) kind_error("dict");
  return *dict_;
}

Dict& Value::as_dict() {
  if (!is_dict()) kind_error("dict");
  return *dict_;
}

const ObjectData& Value::as_object() const {
  if (!is_object()) kind_error("object");
  return *object_;
}

size_t Value::length() const {
  switch (kind_) {
    case ValueKind::kList:
    case ValueKind::kTuple:
      return items_.size();
    case ValueKind::kDict:
      return dict_->size();
    case ValueKind::kSize:
      return dims_.size();
    default:
      kind_error("list, tuple, dict or torch.Size");
  }
}

const Value& Value::operator[](size_t i) const {
  const auto& v = items();
  ZRT_CHECK_AS(CheckpointError, i < v.size(), "index ", i, " out of range for a ", kind_name(),
               " of length ", v.size());
  return v[i];
}

Value& Value::push_back(Value v) {
  items().push_back(std::move(v));
  return items_.back();
}

bool Value::contains(const Key& key) const { return as_dict().contains(key); }
const Value* Value::find(const Key& key) const { return as_dict().find(key); }

const Value& Value::at(const Key& key) const {
  const Value* v = as_dict().find(key);
  ZRT_CHECK_AS(CheckpointError, v != nullptr, "missing key ", key.repr());
  return *v;
}

Value& Value::at(const Key& key) {
  Value* v = as_dict().find(key);
  ZRT_CHECK_AS(CheckpointError, v != nullptr, "missing key ", key.repr());
  return *v;
}

Value& Value::set(Key key, Value value) { return as_dict().set(std::move(key), std::move(value)); }

bool Value::equals(const Value& o) const {
  if (kind_ != o.kind_) return false;
  switch (kind_) {
    case ValueKind::kNone:
      return true;
    case ValueKind::kBool:
      return bool_ == o.bool_;
    case ValueKind::kInt:
      return int_ == o.int_;
    case ValueKind::kDouble:
      return double_ == o.double_ || (std::isnan(double_) && std::isnan(o.double_));
    case ValueKind::kString:
      return string_ == o.string_;
    case ValueKind::kList:
    case ValueKind::kTuple:
      if (items_.size() != o.items_.size()) return false;
      for (size_t i = 0; i < items_.size(); ++i) {
        if (!items_[i].equals(o.items_[i])) return false;
      }
      return true;
    case ValueKind::kDict: {
      if (ordered_ != o.ordered_ || dict_->size() != o.dict_->size()) return false;
      for (size_t i = 0; i < dict_->size(); ++i) {
        const auto& a = dict_->items()[i];
        const auto& b = o.dict_->items()[i];
        if (a.first != b.first || !a.second.equals(b.second)) return false;
      }
      return true;
    }
    case ValueKind::kSize:
      return dims_ == o.dims_;
    case ValueKind::kTensor:
      return tensor_.scalar_type() == o.tensor_.scalar_type() &&
             tensor_.sizes() == o.tensor_.sizes() && at::equal(tensor_, o.tensor_);
    case ValueKind::kObject:
      return object_->type == o.object_->type && object_->args.equals(o.object_->args) &&
             object_->state.equals(o.object_->state) &&
             object_->list_items.equals(o.object_->list_items) &&
             object_->dict_items.equals(o.object_->dict_items);
  }
  return false;
}

namespace {

void repr_into(const Value& v, std::ostringstream& os, size_t max_chars) {
  if (static_cast<size_t>(os.tellp()) > max_chars) return;
  switch (v.kind()) {
    case ValueKind::kNone:
      os << "None";
      break;
    case ValueKind::kBool:
      os << (v.as_bool() ? "True" : "False");
      break;
    case ValueKind::kInt:
      os << v.as_int();
      break;
    case ValueKind::kDouble:
      os << v.as_double();
      break;
    case ValueKind::kString:
      os << "'" << v.as_string() << "'";
      break;
    case ValueKind::kList:
    case ValueKind::kTuple: {
      os << (v.is_list() ? "[" : "(");
      const auto& items = v.items();
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) os << ", ";
        repr_into(items[i], os, max_chars);
      }
      os << (v.is_list() ? "]" : (items.size() == 1 ? ",)" : ")"));
      break;
    }
    case ValueKind::kDict: {
      os << (v.is_ordered_dict() ? "OrderedDict({" : "{");
      bool first = true;
      for (const auto& [k, item] : v.as_dict()) {
        if (!first) os << ", ";
        first = false;
        os << k.repr() << ": ";
        repr_into(item, os, max_chars);
      }
      os << (v.is_ordered_dict() ? "})" : "}");
      break;
    }
    case ValueKind::kSize: {
      os << "torch.Size([";
      const auto& d = v.as_size();
      for (size_t i = 0; i < d.size(); ++i) os << (i ? ", " : "") << d[i];
      os << "])";
      break;
    }
    case ValueKind::kTensor: {
      const auto& t = v.as_tensor();
      os << "tensor(" << c10::toString(t.scalar_type()) << t.sizes() << ")";
      break;
    }
    case ValueKind::kObject:
      os << "<" << v.as_object().type << " object>";
      break;
  }
}

}  // namespace

std::string Value::repr(size_t max_chars) const {
  std::ostringstream os;
  repr_into(*this, os, max_chars);
  std::string s = os.str();
  if (s.size() > max_chars) s = s.substr(0, max_chars) + "...";
  return s;
}

Value ordered_dict_of(const NamedTensors& tensors) {
  Value d = Value::ordered_dict();
  for (const auto& [name, t] : tensors) d.set(name, t);
  return d;
}

}  // namespace zrt::ckpt
