// Python's view of JSON values. Several messages ZeroRT must reproduce word for word were
// produced by Python f-strings (transformers' mismatch lines, accelerate's "Can't find" error,
// DeepSpeed's key lists), so values are printed the way Python prints them: floats in repr form
// (5e-05, 0.9, 1e+16), True/False/None, 'quoted' strings, [a, b] and {'k': v}. Equality and
// truthiness follow Python too (1 == 1.0 == True; "false" is truthy).
#pragma once

#include <string>

#include "core/json.h"

namespace zrt::config {

// repr(float(x)): the shortest digits that round-trip, scientific notation when the decimal
// exponent is < -4 or >= 16 ("5e-05", "0.0001", "1e+16", "1000000000000000.0", "inf", "nan").
std::string py_float_repr(double x);

// repr(value) of the Python object json.load would build from `value`.
std::string py_repr(const Json& value);

// str(value), what an f-string prints: strings unquoted, everything else as py_repr.
std::string py_str(const Json& value);

// Python's `a == b` for JSON-built objects: numbers (and bools, as 0/1) compare by value,
// lists element-wise, dicts key-wise, strings exactly.
bool py_equal(const Json& a, const Json& b);

// Python's bool(value): None, False, 0, 0.0, "", [] and {} are false; everything else true.
bool py_truthy(const Json& value);

}  // namespace zrt::config
