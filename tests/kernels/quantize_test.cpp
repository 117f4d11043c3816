// Symmetric group quantization (kernels/quantize.h): the scalar path against a float64
// reference, every SIMD path this CPU supports against the scalar path bit for bit, the
// round-trip error bound, odd sizes and ragged last groups, zero and non-finite groups, the 4-bit
// packing order, bf16/fp16 in and out, the qgZ accumulate, qwZ's group count, and argument errors.
// No LibTorch.
#include "kernels/quantize.h"

#include <cfloat>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/env.h"
#include "core/error.h"
#include "kernels/adam_math.h"
#include "tests/kernels/quantize_reference.h"

namespace zrt::kernels {
namespace {

using test::read_code;
using test::reference_code;
using test::reference_group;

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// Values spread over many magnitudes, with a different scale per block of 37 elements so groups
// have very different amax.
std::vector<float> random_values(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-20, 20);
  std::vector<float> x(static_cast<size_t>(n));
  float scale = 1.0f;
  for (int64_t i = 0; i < n; ++i) {
    if (i % 37 == 0) scale = std::ldexp(1.0f, exponent(rng));
    x[static_cast<size_t>(i)] = normal(rng) * scale;
  }
  return x;
}

// Input of the given dtype holding x (rounded for 16-bit types), and x re-read as float.
struct Input {
  std::vector<uint8_t> bytes;
  std::vector<float> values;
  DType dtype;
  const void* data() const { return bytes.data(); }
};

Input make_input(const std::vector<float>& x, DType dtype) {
  Input in{std::vector<uint8_t>(x.size() * dtype_size(dtype)), x, dtype};
  for (size_t i = 0; i < x.size(); ++i) {
    if (dtype == DType::kFloat32) {
      std::memcpy(in.bytes.data() + 4 * i, &x[i], 4);
      continue;
    }
    const uint16_t h =
        dtype == DType::kBFloat16 ? float_to_bf16_bits(x[i]) : float_to_fp16_bits(x[i]);
    std::memcpy(in.bytes.data() + 2 * i, &h, 2);
    in.values[i] = dtype == DType::kBFloat16 ? bf16_bits_to_float(h) : fp16_bits_to_float(h);
  }
  return in;
}

struct Quantized {
  std::vector<uint8_t> q;
  std::vector<float> scales;
};

Quantized quantize(const Input& in, int64_t group_size, int bits, CpuIsa isa, int threads = 1) {
  const auto n = static_cast<int64_t>(in.values.size());
  Quantized out{std::vector<uint8_t>(quantized_bytes(n, bits), 0xAB),
                std::vector<float>(quantized_groups(n, group_size), -1.0f)};
  QuantizeConfig config;
  config.isa = isa;
  config.num_threads = threads;
  quantize_symmetric(in.data(), in.dtype, n, group_size, bits, out.q.data(), out.scales.data(),
                     config);
  return out;
}

std::vector<float> dequantize_f32(const Quantized& qz, int64_t n, int64_t group_size, int bits,
                                  CpuIsa isa = CpuIsa::kScalar) {
  std::vector<float> out(static_cast<size_t>(n), -7.0f);
  QuantizeConfig config;
  config.isa = isa;
  dequantize_symmetric(qz.q.data(), qz.scales.data(), n, group_size, bits, out.data(),
                       DType::kFloat32, config);
  return out;
}

std::vector<CpuIsa> supported_isas() {
  std::vector<CpuIsa> isas;
  for (CpuIsa isa : {CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512}) {
    if (cpu_isa_supported(isa)) isas.push_back(isa);
  }
  return isas;
}

struct Shape {
  int64_t numel;
  int64_t group_size;
};

const std::vector<Shape> kShapes = {{0, 16},         {1, 16},        {7, 16},   {9, 4},
                                    {9, 3},          {33, 16},       {100, 7},  {1000, 64},
                                    {1000, 999},     {4096, 2048},   {5000, 1}, {70001, 33},
                                    {1000003, 2048}, {1000003, 4097}};

TEST(Quantize, SizesOfCodesAndScales) {
  EXPECT_EQ(quantized_bytes(0, 8), 0);
  EXPECT_EQ(quantized_bytes(7, 8), 7);
  EXPECT_EQ(quantized_bytes(7, 4), 4);
  EXPECT_EQ(quantized_bytes(8, 4), 4);
  EXPECT_EQ(quantized_groups(0, 5), 0);
  EXPECT_EQ(quantized_groups(10, 5), 2);
  EXPECT_EQ(quantized_groups(11, 5), 3);
}

// The scalar path against the float64 definition: the scale to fp32 rounding, and every code
// equal to the exact rounding except where x·m lies within fp32 rounding of a half-way point.
TEST(Quantize, ScalarMatchesFloat64Reference) {
  for (int bits : {8, 4}) {
    for (const Shape& shape : {Shape{1000, 64}, Shape{1003, 10}, Shape{70001, 33}}) {
      const Input in = make_input(random_values(shape.numel, 11), DType::kFloat32);
      const Quantized qz = quantize(in, shape.group_size, bits, CpuIsa::kScalar);
      const std::vector<double> x(in.values.begin(), in.values.end());
      int64_t near_ties = 0;
      for (int64_t g = 0; g < static_cast<int64_t>(qz.scales.size()); ++g) {
        const int64_t b = g * shape.group_size;
        const int64_t e = std::min(b + shape.group_size, shape.numel);
        const auto ref = reference_group(x, b, e, bits);
        ASSERT_NEAR(qz.scales[g], ref.s, ref.s * 1.2e-7) << "group " << g;
        for (int64_t i = b; i < e; ++i) {
          const double v = x[i] * ref.m;
          const int want = reference_code(v, bits);
          const int got = read_code(qz.q, bits, i);
          if (std::fabs(std::fabs(v - std::floor(v)) - 0.5) < 1e-4) {
            ++near_ties;
            ASSERT_LE(std::abs(got - want), 1) << "element " << i;
          } else {
            ASSERT_EQ(got, want) << "bits " << bits << " element " << i << " x·m " << v;
          }
        }
      }
      EXPECT_LT(near_ties, shape.numel / 100);
    }
  }
}

// Every SIMD path gives the scalar path's codes and scales bit for bit, and the same dequantized
// bits in every output dtype and in the accumulate, for every input dtype.
TEST(Quantize, EverySupportedIsaIsBitwiseEqualToScalar) {
  for (CpuIsa isa : supported_isas()) {
    SCOPED_TRACE(cpu_isa_name(isa));
    for (const Shape& shape : kShapes) {
      for (int bits : {8, 4}) {
        for (DType dtype : {DType::kFloat32, DType::kBFloat16, DType::kFloat16}) {
          SCOPED_TRACE(testing::Message()
                       << "numel " << shape.numel << " group " << shape.group_size << " bits "
                       << bits << " " << dtype_name(dtype));
          std::vector<float> values = random_values(shape.numel, 5);
          if (dtype == DType::kFloat16) {
            for (float& v : values) v = std::fmin(std::fmax(v, -60000.0f), 60000.0f);
          }
          const Input in = make_input(values, dtype);
          const Quantized want = quantize(in, shape.group_size, bits, CpuIsa::kScalar);
          const Quantized got = quantize(in, shape.group_size, bits, isa, 3);
          ASSERT_EQ(got.q, want.q);
          ASSERT_EQ(0, std::memcmp(got.scales.data(), want.scales.data(),
                                   want.scales.size() * sizeof(float)));
          for (DType out_dtype : {DType::kFloat32, DType::kBFloat16, DType::kFloat16}) {
            const size_t bytes = static_cast<size_t>(shape.numel) * dtype_size(out_dtype);
            std::vector<uint8_t> a(bytes), b(bytes);
            QuantizeConfig scalar, simd;
            scalar.isa = CpuIsa::kScalar;
            simd.isa = isa;
            simd.num_threads = 3;
            dequantize_symmetric(want.q.data(), want.scales.data(), shape.numel, shape.group_size,
                                 bits, a.data(), out_dtype, scalar);
            dequantize_symmetric(want.q.data(), want.scales.data(), shape.numel, shape.group_size,
                                 bits, b.data(), out_dtype, simd);
            ASSERT_EQ(a, b) << "out " << dtype_name(out_dtype);
          }
          std::vector<float> acc_a(values), acc_b(values);
          QuantizeConfig scalar, simd;
          scalar.isa = CpuIsa::kScalar;
          simd.isa = isa;
          dequantize_accumulate(want.q.data(), want.scales.data(), shape.numel, shape.group_size,
                                bits, acc_a.data(), scalar);
          dequantize_accumulate(want.q.data(), want.scales.data(), shape.numel, shape.group_size,
                                bits, acc_b.data(), simd);
          ASSERT_EQ(0, std::memcmp(acc_a.data(), acc_b.data(), acc_a.size() * sizeof(float)));
        }
      }
    }
  }
}

// Note [Symmetric group quantization]'s bound: |x − x'| ≤ s/2 except the clamped +amax, which is
// within s; both up to a few fp32 roundings (8 ulp of amax here).
TEST(Quantize, RoundTripErrorBound) {
  for (CpuIsa isa : supported_isas()) {
    for (int bits : {8, 4}) {
      const int64_t n = 100003;
      const int64_t gs = 257;
      const Input in = make_input(random_values(n, 3), DType::kFloat32);
      const Quantized qz = quantize(in, gs, bits, isa, 2);
      const std::vector<float> back = dequantize_f32(qz, n, gs, bits, isa);
      const double half_range = std::ldexp(1.0, bits - 1);
      for (int64_t g = 0; g < static_cast<int64_t>(qz.scales.size()); ++g) {
        const int64_t b = g * gs;
        const int64_t e = std::min(b + gs, n);
        const std::vector<double> x(in.values.begin(), in.values.end());
        const auto ref = reference_group(x, b, e, bits);
        const double slack = 8 * ref.amax * std::ldexp(1.0, -24);
        ASSERT_LE(ref.s, ref.amax / half_range * (1 + 1e-6));  // the header's bound is s
        for (int64_t i = b; i < e; ++i) {
          const double err = std::fabs(x[i] - back[i]);
          const bool clamped = x[i] * ref.m > half_range - 0.5 - 1e-4;
          ASSERT_LE(err, (clamped ? ref.s : ref.s / 2) + slack)
              << "bits " << bits << " element " << i << " x " << x[i] << " x' " << back[i];
        }
      }
    }
  }
}

TEST(Quantize, EightBitCodesAndScaleOfAKnownGroup) {
  const Input in = make_input({1.0f, -1.0f, 0.5f, 0.25f, -0.375f}, DType::kFloat32);
  const Quantized qz = quantize(in, 5, 8, CpuIsa::kScalar);
  // m = 128: +1 clamps to 127, −1 is −128; s = 1/128.
  EXPECT_EQ(qz.q, (std::vector<uint8_t>{127, 0x80, 64, 32, static_cast<uint8_t>(-48)}));
  EXPECT_EQ(qz.scales[0], 1.0f / 128);
}

// Element 2i in the high nibble, 2i+1 in the low one, an odd tail in the high nibble with low 0,
// and with an odd group size a byte shared by two groups.
TEST(Quantize, FourBitPackingOrder) {
  for (CpuIsa isa : supported_isas()) {
    // Group 0 {7, −8, 1}: amax 8, m = 1. Group 1 {2, −2, 1}: m = 4, codes {7 (8 clamped), −8, 4}.
    // Group 2 {3}: m = 8/3, code 7 (8 clamped).
    const Input in = make_input({7, -8, 1, 2, -2, 1, 3}, DType::kFloat32);
    const Quantized qz = quantize(in, 3, 4, isa);
    EXPECT_EQ(qz.q, (std::vector<uint8_t>{0x78, 0x17, 0x84, 0x70})) << cpu_isa_name(isa);
    EXPECT_EQ(qz.scales, (std::vector<float>{1.0f, 0.25f, 1.0f / (8.0f / 3.0f)}));
    const std::vector<float> back = dequantize_f32(qz, 7, 3, 4, isa);
    EXPECT_EQ(back, (std::vector<float>{7, -8, 1, 1.75f, -2, 1, 7.0f * (1.0f / (8.0f / 3.0f))}));
  }
}

// An all-zero group (and one too small for a finite multiplier) gets s = 0 and comes back as
// exact zeros; its neighbours are unaffected.
TEST(Quantize, ZeroAndTinyGroupsComeBackAsExactZeros) {
  for (CpuIsa isa : supported_isas()) {
    for (int bits : {8, 4}) {
      std::vector<float> x = random_values(96, 9);
      for (int i = 32; i < 64; ++i) x[i] = i % 2 ? 0.0f : -0.0f;
      for (int i = 64; i < 96; ++i) x[i] = std::numeric_limits<float>::denorm_min();
      const Quantized qz = quantize(make_input(x, DType::kFloat32), 32, bits, isa);
      EXPECT_EQ(qz.scales[1], 0.0f);
      EXPECT_EQ(qz.scales[2], 0.0f);
      EXPECT_GT(qz.scales[0], 0.0f);
      const std::vector<float> back = dequantize_f32(qz, 96, 32, bits, isa);
      for (int i = 32; i < 96; ++i) EXPECT_EQ(bits_of(back[i]), 0u) << i;
    }
  }
}

// A group with NaN or ±inf has scale NaN and dequantizes to NaN everywhere; other groups keep
// their finite scales and values (Note [Symmetric group quantization]).
TEST(Quantize, NonFiniteGroupsHaveNanScaleAndDoNotLeak) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (CpuIsa isa : supported_isas()) {
    for (int bits : {8, 4}) {
      for (float bad : {nan, inf, -inf}) {
        const int64_t gs = 19;
        std::vector<float> x = random_values(5 * gs, 4);
        x[gs + 3] = bad;      // group 1
        x[3 * gs - 1] = bad;  // group 2, last element
        const Quantized clean = quantize(make_input(random_values(5 * gs, 4), DType::kFloat32), gs,
                                         bits, CpuIsa::kScalar);
        const Quantized qz = quantize(make_input(x, DType::kFloat32), gs, bits, isa);
        const std::vector<float> back = dequantize_f32(qz, 5 * gs, gs, bits, isa);
        const std::vector<float> clean_back = dequantize_f32(clean, 5 * gs, gs, bits);
        for (int64_t g = 0; g < 5; ++g) {
          const bool is_bad = g == 1 || g == 2;
          EXPECT_EQ(std::isnan(qz.scales[g]), is_bad) << "group " << g;
          for (int64_t i = g * gs; i < (g + 1) * gs; ++i) {
            if (is_bad) {
              EXPECT_TRUE(std::isnan(back[i])) << i;
            } else {
              EXPECT_EQ(back[i], clean_back[i]) << i;
            }
          }
        }
        std::vector<float> acc(5 * gs, 1.0f);
        QuantizeConfig config;
        config.isa = isa;
        dequantize_accumulate(qz.q.data(), qz.scales.data(), 5 * gs, gs, bits, acc.data(), config);
        EXPECT_TRUE(std::isnan(acc[gs]));
        EXPECT_FALSE(std::isnan(acc[0]));
      }
    }
  }
}

// bf16 / fp16 input quantizes exactly like its values widened to fp32; bf16 / fp16 output is the
// fp32 output rounded to nearest even.
TEST(Quantize, HalfPrecisionInputsAndOutputs) {
  const int64_t n = 4099;
  const int64_t gs = 128;
  for (int bits : {8, 4}) {
    for (DType dtype : {DType::kBFloat16, DType::kFloat16}) {
      std::vector<float> values = random_values(n, 8);
      for (float& v : values) v = std::fmin(std::fmax(v, -60000.0f), 60000.0f);
      const Input half = make_input(values, dtype);
      const Input widened = make_input(half.values, DType::kFloat32);
      const Quantized a = quantize(half, gs, bits, best_cpu_isa());
      const Quantized b = quantize(widened, gs, bits, CpuIsa::kScalar);
      EXPECT_EQ(a.q, b.q);
      EXPECT_EQ(a.scales, b.scales);
      const std::vector<float> f32 = dequantize_f32(b, n, gs, bits);
      std::vector<uint16_t> out(n);
      dequantize_symmetric(b.q.data(), b.scales.data(), n, gs, bits, out.data(), dtype);
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t want =
            dtype == DType::kBFloat16 ? float_to_bf16_bits(f32[i]) : float_to_fp16_bits(f32[i]);
        ASSERT_EQ(out[i], want) << dtype_name(dtype) << " element " << i;
      }
    }
  }
}

// The qgZ reduce step: three ranks' chunks accumulated in turn equal the fp32 sum of their
// dequantized values, in that order.
TEST(Quantize, AccumulateThreeRanksEqualsFp32SumOfDequantized) {
  const int64_t n = 300007;
  const int64_t gs = 2048;
  for (CpuIsa isa : supported_isas()) {
    for (int bits : {8, 4}) {
      std::vector<float> acc(n, 0.0f);
      std::vector<float> want(n, 0.0f);
      QuantizeConfig config;
      config.isa = isa;
      config.num_threads = 2;
      for (uint32_t rank = 0; rank < 3; ++rank) {
        const Quantized qz =
            quantize(make_input(random_values(n, 100 + rank), DType::kFloat32), gs, bits, isa, 2);
        dequantize_accumulate(qz.q.data(), qz.scales.data(), n, gs, bits, acc.data(), config);
        const std::vector<float> d = dequantize_f32(qz, n, gs, bits);
        for (int64_t i = 0; i < n; ++i) want[i] = want[i] + d[i];
      }
      ASSERT_EQ(0, std::memcmp(acc.data(), want.data(), n * sizeof(float))) << cpu_isa_name(isa);
    }
  }
}

// Splitting the groups over threads changes nothing, including 4-bit with odd group sizes.
TEST(Quantize, ThreadCountDoesNotChangeTheResult) {
  const Input in = make_input(random_values(1000003, 21), DType::kFloat32);
  for (int bits : {8, 4}) {
    for (int64_t gs : {int64_t{1}, int64_t{7}, int64_t{4097}}) {
      const Quantized one = quantize(in, gs, bits, best_cpu_isa(), 1);
      const Quantized four = quantize(in, gs, bits, best_cpu_isa(), 4);
      ASSERT_EQ(one.q, four.q) << "bits " << bits << " group " << gs;
      ASSERT_EQ(one.scales, four.scales);
    }
  }
}

TEST(Quantize, NumelZeroIsANoOp) {
  quantize_symmetric(nullptr, DType::kFloat32, 0, 16, 8, nullptr, nullptr);
  dequantize_symmetric(nullptr, nullptr, 0, 16, 4, nullptr, DType::kBFloat16);
  dequantize_accumulate(nullptr, nullptr, 0, 16, 4, nullptr);
}

TEST(Quantize, QwzGroupCountFollowsDeepSpeedsRule) {
  const std::vector<int64_t> numels = {8,        16,          800,          8000,        8008,
                                       16000,    16008,       64000,        1000000,     8 * 10007,
                                       8 * 8191, 4096 * 4096, 4096 * 11008, 50257 * 768, 3 * 65536};
  for (int64_t n : numels) {
    const int64_t g = qwz_group_count(n);
    EXPECT_EQ(g, test::deepspeed_group_count(n)) << "numel " << n;
    EXPECT_EQ(n % g, 0);
    EXPECT_EQ((n / g) % 8, 0);
    EXPECT_LE(n / g, 8000);
  }
  EXPECT_EQ(qwz_group_count(8000), 1);
  EXPECT_EQ(qwz_group_count(8008), 7);           // 1001 = 7·11·13: the smallest divisor >= 2
  EXPECT_EQ(qwz_group_count(8 * 10007), 10007);  // 10007 is prime: 10007 groups of 8
  for (int64_t bad : {int64_t{0}, int64_t{-8}, int64_t{7}, int64_t{12}, int64_t{1001}}) {
    EXPECT_THROW(qwz_group_count(bad), Error) << bad;
    if (bad > 0) EXPECT_EQ(test::deepspeed_group_count(bad), -1) << bad;
  }
}

template <typename Fn>
void expect_error_mentions(Fn fn, const std::string& needle) {
  try {
    fn();
    ADD_FAILURE() << "no error; expected one mentioning '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(Quantize, ArgumentErrorsNameTheArgument) {
  std::vector<float> x(16, 1.0f);
  std::vector<uint8_t> q(16);
  std::vector<float> s(16);
  const DType bad_dtype = static_cast<DType>(7);
  expect_error_mentions(
      [&] { quantize_symmetric(x.data(), DType::kFloat32, 16, 4, 3, q.data(), s.data()); },
      "bits=3");
  expect_error_mentions(
      [&] { quantize_symmetric(x.data(), DType::kFloat32, 16, 0, 8, q.data(), s.data()); },
      "group_size=0");
  expect_error_mentions(
      [&] { quantize_symmetric(x.data(), DType::kFloat32, -1, 4, 8, q.data(), s.data()); },
      "numel=-1");
  expect_error_mentions(
      [&] { quantize_symmetric(x.data(), bad_dtype, 16, 4, 8, q.data(), s.data()); }, "x_dtype");
  expect_error_mentions(
      [&] { quantize_symmetric(x.data(), DType::kFloat32, 16, 4, 8, nullptr, s.data()); },
      "null pointer");
  expect_error_mentions(
      [&] { dequantize_symmetric(q.data(), s.data(), 16, 4, 8, x.data(), bad_dtype); },
      "out_dtype");
  expect_error_mentions([&] { dequantize_accumulate(q.data(), s.data(), 16, 4, 5, x.data()); },
                        "bits=5");
  expect_error_mentions([&] { dequantize_accumulate(q.data(), nullptr, 16, 4, 8, x.data()); },
                        "null pointer");
  QuantizeConfig config;
  config.num_threads = -2;
  expect_error_mentions(
      [&] { quantize_symmetric(x.data(), DType::kFloat32, 16, 4, 8, q.data(), s.data(), config); },
      "num_threads=-2");
  expect_error_mentions([] { quantized_bytes(10, 2); }, "bits=2");
}

TEST(Quantize, IsaEnvironmentVariable) {
  const char* old = std::getenv(env::kCpuQuantIsa);
  const std::string saved = old ? old : "";
  setenv(env::kCpuQuantIsa, "sse9", 1);
  EXPECT_THROW(cpu_quant_isa(), ConfigError);
  setenv(env::kCpuQuantIsa, "SCALAR", 1);
  EXPECT_EQ(cpu_quant_isa(), CpuIsa::kScalar);
  unsetenv(env::kCpuQuantIsa);
  EXPECT_EQ(cpu_quant_isa(), best_cpu_isa());
  if (old) setenv(env::kCpuQuantIsa, saved.c_str(), 1);
}

}  // namespace
}  // namespace zrt::kernels
