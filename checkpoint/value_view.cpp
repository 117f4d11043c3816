#include "checkpoint/value_view.h"

#include <cmath>
#include <limits>

#include "core/error.h"

namespace zrt::ckpt {

// ---- ValueView ----

std::string value_key_path(const std::string& parent, const Key& key) {
  if (key.is_int()) return parent + "[" + std::to_string(key.as_int()) + "]";
  const std::string& s = key.as_str();
  const bool plain = !s.empty() && s.find_first_of(".[]' ") == std::string::npos;
  if (plain) return parent.empty() ? s : parent + "." + s;
  return parent + "['" + s + "']";
}

std::string ValueView::where() const {
  return path_.empty() ? context_ + ": <root>" : context_ + ": " + path_;
}

void ValueView::fail(const std::string& message) const {
  throw CheckpointError(where() + ": " + message);
}

void ValueView::expect(bool ok, const char* expected) const {
  if (!ok) fail(str("expected ", expected, ", got ", value_->kind_name()));
}

bool ValueView::contains(const Key& key) const {
  expect(value_->is_dict(), "dict");
  return value_->contains(key);
}

ValueView ValueView::operator[](const Key& key) const {
  expect(value_->is_dict(), "dict");
  const Value* v = value_->find(key);
  if (v == nullptr) fail(str("missing key ", key.repr()));
  return ValueView(*v, context_, value_key_path(path_, key));
}

ValueView ValueView::at(size_t index) const {
  expect(value_->is_sequence(), "list or tuple");
  const auto& items = value_->items();
  if (index >= items.size()) {
    fail(str("index ", index, " out of range (length ", items.size(), ")"));
  }
  return ValueView(items[index], context_, path_ + "[" + std::to_string(index) + "]");
}

size_t ValueView::length() const {
  expect(value_->is_sequence() || value_->is_dict() || value_->is_size(),
         "list, tuple, dict or torch.Size");
  return value_->length();
}

bool ValueView::as_bool() const {
  expect(value_->is_bool(), "bool");
  return value_->as_bool();
}

int64_t ValueView::as_int() const {
  expect(value_->is_int(), "int");
  return value_->as_int();
}

double ValueView::as_double() const {
  expect(value_->is_number(), "float");
  return value_->as_double();
}

const std::string& ValueView::as_string() const {
  expect(value_->is_string(), "str");
  return value_->as_string();
}

const at::Tensor& ValueView::as_tensor() const {
  expect(value_->is_tensor(), "tensor");
  return value_->as_tensor();
}

std::vector<int64_t> ValueView::as_shape() const {
  if (value_->is_size()) return value_->as_size();
  expect(value_->is_sequence(), "torch.Size");
  std::vector<int64_t> dims;
  for (size_t i = 0; i < value_->items().size(); ++i) dims.push_back(at(i).as_int());
  return dims;
}

const Dict& ValueView::as_dict() const {
  expect(value_->is_dict(), "dict");
  return value_->as_dict();
}

const std::vector<Value>& ValueView::items() const {
  expect(value_->is_sequence(), "list or tuple");
  return value_->items();
}

// ---- JSON ----

Value from_json(const Json& json) {
  switch (json.type()) {
    case Json::value_t::null:
      return Value();
    case Json::value_t::boolean:
      return Value(json.get<bool>());
    case Json::value_t::number_integer:
      return Value(json.get<int64_t>());
    case Json::value_t::number_unsigned: {
      const uint64_t u = json.get<uint64_t>();
      ZRT_CHECK_AS(CheckpointError, u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()),
                   "JSON integer ", u, " does not fit in int64");
      return Value(static_cast<int64_t>(u));
    }
    case Json::value_t::number_float:
      return Value(json.get<double>());
    case Json::value_t::string:
      return Value(json.get<std::string>());
    case Json::value_t::array: {
      Value list = Value::list();
      for (const auto& item : json) list.push_back(from_json(item));
      return list;
    }
    case Json::value_t::object: {
      Value dict = Value::dict();
      for (const auto& [k, item] : json.items()) dict.set(k, from_json(item));
      return dict;
    }
    default:
      throw CheckpointError(str("JSON value of type ", json.type_name(), " has no Value"));
  }
}

namespace {

Json to_json_at(const Value& v, const std::string& path) {
  auto fail = [&](const std::string& what) {
    throw CheckpointError(
        str("cannot convert ", path.empty() ? "<root>" : path, " to JSON: ", what));
  };
  switch (v.kind()) {
    case ValueKind::kNone:
      return nullptr;
    case ValueKind::kBool:
      return v.as_bool();
    case ValueKind::kInt:
      return v.as_int();
    case ValueKind::kDouble:
      if (!std::isfinite(v.as_double())) fail(str("non-finite float ", v.as_double()));
      return v.as_double();
    case ValueKind::kString:
      return v.as_string();
    case ValueKind::kList:
    case ValueKind::kTuple: {
      Json a = Json::array();
      for (size_t i = 0; i < v.items().size(); ++i) {
        a.push_back(to_json_at(v.items()[i], path + "[" + std::to_string(i) + "]"));
      }
      return a;
    }
    case ValueKind::kSize:
      return Json(v.as_size());
    case ValueKind::kDict: {
      Json o = Json::object();
      for (const auto& [k, item] : v.as_dict()) {
        if (k.is_int()) fail(str("dict key ", k.repr(), " is an int (JSON keys are strings)"));
        o[k.as_str()] = to_json_at(item, value_key_path(path, k));
      }
      return o;
    }
    case ValueKind::kTensor:
      fail("it is a tensor");
    case ValueKind::kObject:
      fail(str("it is a Python object of type ", v.as_object().type));
  }
  return nullptr;
}

}  // namespace

Json to_json(const Value& value) { return to_json_at(value, ""); }

}  // namespace zrt::ckpt
