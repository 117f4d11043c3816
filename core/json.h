// ZeroRT's JSON value type. Ordered, so dumps keep the user's key order and pickled dicts keep
// insertion order. Also the value type of non-tensor state dicts (schedulers, loss scaler).
#pragma once

#include <nlohmann/json.hpp>

namespace zrt {
using Json = nlohmann::ordered_json;
}  // namespace zrt
