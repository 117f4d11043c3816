#include "config/py_format.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace zrt::config {
namespace {

// Shortest "%.{p}e" rendering of x that parses back to x: returns the digits (no dot) and the
// decimal exponent of the first digit.
void shortest_digits(double x, std::string& digits, int& exponent) {
  char buf[64];
  for (int precision = 0; precision < 17; ++precision) {
    std::snprintf(buf, sizeof(buf), "%.*e", precision, x);
    if (std::strtod(buf, nullptr) == x) break;
  }
  const std::string text(buf);
  const std::size_t e = text.find('e');
  digits.clear();
  for (std::size_t i = 0; i < e; ++i) {
    if (text[i] >= '0' && text[i] <= '9') digits += text[i];
  }
  exponent = std::atoi(text.c_str() + e + 1);
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
}

std::string py_string_repr(const std::string& s) {
  const bool has_single = s.find('\'') != std::string::npos;
  const bool has_double = s.find('"') != std::string::npos;
  const char quote = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, quote);
  for (unsigned char c : s) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == static_cast<unsigned char>(quote)) {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  out += quote;
  return out;
}

bool is_numberish(const Json& v) { return v.is_number() || v.is_boolean(); }

// Exact comparison of two JSON numbers (or bools) the way Python compares int/float/bool.
bool numbers_equal(const Json& a, const Json& b) {
  auto as_bool_int = [](const Json& v) -> int64_t { return v.get<bool>() ? 1 : 0; };
  if (a.is_boolean() && b.is_boolean()) return a.get<bool>() == b.get<bool>();
  if (a.is_boolean()) return numbers_equal(Json(as_bool_int(a)), b);
  if (b.is_boolean()) return numbers_equal(a, Json(as_bool_int(b)));
  if (a.is_number_float() || b.is_number_float()) {
    const Json& f = a.is_number_float() ? a : b;
    const Json& o = a.is_number_float() ? b : a;
    const double x = f.get<double>();
    if (o.is_number_float()) return x == o.get<double>();
    // float vs integer: equal only if x is integral and has the same integer value.
    if (!std::isfinite(x) || std::floor(x) != x) return false;
    if (o.is_number_unsigned()) {
      return x >= 0 && x < 18446744073709551616.0 && static_cast<uint64_t>(x) == o.get<uint64_t>();
    }
    return x >= -9223372036854775808.0 && x < 9223372036854775808.0 &&
           static_cast<int64_t>(x) == o.get<int64_t>();
  }
  if (a.is_number_unsigned() || b.is_number_unsigned()) {
    const Json& u = a.is_number_unsigned() ? a : b;
    const Json& o = a.is_number_unsigned() ? b : a;
    if (o.is_number_unsigned()) return u.get<uint64_t>() == o.get<uint64_t>();
    const int64_t s = o.get<int64_t>();
    return s >= 0 && static_cast<uint64_t>(s) == u.get<uint64_t>();
  }
  return a.get<int64_t>() == b.get<int64_t>();
}

}  // namespace

std::string py_float_repr(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  if (x == 0) return std::signbit(x) ? "-0.0" : "0.0";
  std::string digits;
  int exponent = 0;
  shortest_digits(x, digits, exponent);
  std::string out = x < 0 ? "-" : "";
  if (exponent < -4 || exponent >= 16) {
    out += digits[0];
    if (digits.size() > 1) out += "." + digits.substr(1);
    char buf[16];
    std::snprintf(buf, sizeof(buf), "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
    return out + buf;
  }
  if (exponent < 0) {
    return out + "0." + std::string(static_cast<std::size_t>(-exponent - 1), '0') + digits;
  }
  const std::size_t int_digits = static_cast<std::size_t>(exponent) + 1;
  if (digits.size() <= int_digits) {
    return out + digits + std::string(int_digits - digits.size(), '0') + ".0";
  }
  return out + digits.substr(0, int_digits) + "." + digits.substr(int_digits);
}

std::string py_repr(const Json& value) {
  switch (value.type()) {
    case Json::value_t::null:
      return "None";
    case Json::value_t::boolean:
      return value.get<bool>() ? "True" : "False";
    case Json::value_t::number_integer:
      return std::to_string(value.get<int64_t>());
    case Json::value_t::number_unsigned:
      return std::to_string(value.get<uint64_t>());
    case Json::value_t::number_float:
      return py_float_repr(value.get<double>());
    case Json::value_t::string:
      return py_string_repr(value.get<std::string>());
    case Json::value_t::array: {
      std::string out = "[";
      bool first = true;
      for (const auto& item : value) {
        if (!first) out += ", ";
        first = false;
        out += py_repr(item);
      }
      return out + "]";
    }
    case Json::value_t::object: {
      std::string out = "{";
      bool first = true;
      for (const auto& [key, item] : value.items()) {
        if (!first) out += ", ";
        first = false;
        out += py_string_repr(key) + ": " + py_repr(item);
      }
      return out + "}";
    }
    default:
      return "<binary>";
  }
}

std::string py_str(const Json& value) {
  if (value.is_string()) return value.get<std::string>();
  return py_repr(value);
}

bool py_equal(const Json& a, const Json& b) {
  if (is_numberish(a) && is_numberish(b)) return numbers_equal(a, b);
  if (a.type() != b.type()) return false;
  if (a.is_array()) {
    if (a.size() != b.size()) return false;
    for (std::size_t i = 0; i < a.size(); ++i) {
      if (!py_equal(a[i], b[i])) return false;
    }
    return true;
  }
  if (a.is_object()) {
    if (a.size() != b.size()) return false;
    for (const auto& [key, item] : a.items()) {
      auto it = b.find(key);
      if (it == b.end() || !py_equal(item, *it)) return false;
    }
    return true;
  }
  return a == b;
}

bool py_truthy(const Json& value) {
  switch (value.type()) {
    case Json::value_t::null:
      return false;
    case Json::value_t::boolean:
      return value.get<bool>();
    case Json::value_t::number_integer:
      return value.get<int64_t>() != 0;
    case Json::value_t::number_unsigned:
      return value.get<uint64_t>() != 0;
    case Json::value_t::number_float:
      return value.get<double>() != 0.0;
    case Json::value_t::string:
      return !value.get_ref<const std::string&>().empty();
    case Json::value_t::array:
    case Json::value_t::object:
      return !value.empty();
    default:
      return true;
  }
}

}  // namespace zrt::config
