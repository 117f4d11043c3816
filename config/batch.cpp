#include "config/batch.h"

#include "core/error.h"

namespace zrt::config {
namespace {

int64_t checked_mul(int64_t a, int64_t b) {
  int64_t out = 0;
  if (__builtin_mul_overflow(a, b, &out)) {
    throw ConfigError(str("batch size arithmetic overflows a 64-bit integer (", a, " * ", b,
                          "); check train_batch_size, train_micro_batch_size_per_gpu and "
                          "gradient_accumulation_steps"));
  }
  return out;
}

// a // b where a zero divisor leaves the result undefined (Python would raise
// ZeroDivisionError; the divisor's own "> 0" assertion reports it instead).
std::optional<int64_t> div_or_undefined(std::optional<int64_t> a, int64_t b) {
  if (!a || b == 0) return std::nullopt;
  return floor_div(*a, b);
}

}  // namespace

int64_t floor_div(int64_t a, int64_t b) {
  ZRT_INTERNAL_ASSERT(b != 0, "floor_div by zero");
  if (a == INT64_MIN && b == -1) return INT64_MIN;  // saturate the one overflowing case
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

BatchConfig resolve_batch(std::optional<int64_t> tbs, std::optional<int64_t> mbs,
                          std::optional<int64_t> gas, int world_size) {
  ZRT_CHECK_AS(ConfigError, world_size >= 1, "world size must be at least 1, got ", world_size);
  const int64_t w = world_size;
  std::optional<int64_t> train = tbs, micro = mbs, accum = gas;
  if (tbs && mbs && gas) {
    // all given: nothing to derive
  } else if (tbs && mbs) {
    accum = div_or_undefined(div_or_undefined(*tbs, *mbs), w);
  } else if (tbs && gas) {
    micro = div_or_undefined(floor_div(*tbs, w), *gas);
  } else if (mbs && gas) {
    train = checked_mul(checked_mul(*mbs, *gas), w);
  } else if (tbs) {
    accum = 1;
    micro = floor_div(*tbs, w);
  } else if (mbs) {
    train = checked_mul(*mbs, w);
    accum = 1;
  } else {
    throw ConfigError(
        "Either train_batch_size or train_micro_batch_size_per_gpu needs to be provided");
  }

  // DeepSpeed's assertions, in order. An undefined value (zero divisor) passes its own check;
  // the zero divisor fails its check instead.
  if (train && *train <= 0) {
    throw ConfigError(str("Train batch size: ", *train, " has to be greater than 0"));
  }
  if (micro && *micro <= 0) {
    throw ConfigError(str("Micro batch size per gpu: ", *micro, " has to be greater than 0"));
  }
  if (accum && *accum <= 0) {
    throw ConfigError(str("Gradient accumulation steps: ", *accum, " has to be greater than 0"));
  }
  ZRT_INTERNAL_ASSERT(train && micro && accum, "batch triad left undefined");
  const int64_t product = checked_mul(checked_mul(*micro, *accum), w);
  if (*train != product) {
    throw ConfigError(str(
        "Check batch related parameters. train_batch_size is not equal to micro_batch_per_gpu * "
        "gradient_acc_step * world_size ",
        *train, " != ", *micro, " * ", *accum, " * ", w));
  }
  return BatchConfig{*train, *micro, *accum, world_size};
}

}  // namespace zrt::config
