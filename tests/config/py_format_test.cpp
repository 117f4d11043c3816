// Python-style printing and comparison of JSON values (the texts of HF and DeepSpeed messages).
#include "config/py_format.h"

#include <limits>

#include <gtest/gtest.h>

#include "test_util.h"

namespace zrt::config {
namespace {

using test::J;

TEST(PyFormat, FloatReprMatchesPython) {
  EXPECT_EQ(py_float_repr(5e-5), "5e-05");
  EXPECT_EQ(py_float_repr(0.9), "0.9");
  EXPECT_EQ(py_float_repr(0.999), "0.999");
  EXPECT_EQ(py_float_repr(1e-8), "1e-08");
  EXPECT_EQ(py_float_repr(0.0001), "0.0001");
  EXPECT_EQ(py_float_repr(0.00001), "1e-05");
  EXPECT_EQ(py_float_repr(1.0), "1.0");
  EXPECT_EQ(py_float_repr(0.0), "0.0");
  EXPECT_EQ(py_float_repr(-0.0), "-0.0");
  EXPECT_EQ(py_float_repr(3e-4), "0.0003");
  EXPECT_EQ(py_float_repr(500000000.0), "500000000.0");
  EXPECT_EQ(py_float_repr(1e15), "1000000000000000.0");
  EXPECT_EQ(py_float_repr(1e16), "1e+16");
  EXPECT_EQ(py_float_repr(1.5e300), "1.5e+300");
  EXPECT_EQ(py_float_repr(0.1 + 0.2), "0.30000000000000004");
  EXPECT_EQ(py_float_repr(-2.5), "-2.5");
  EXPECT_EQ(py_float_repr(123.456), "123.456");
  EXPECT_EQ(py_float_repr(std::numeric_limits<double>::infinity()), "inf");
}

TEST(PyFormat, ReprOfStructures) {
  EXPECT_EQ(py_repr(J(R"([0.9, 0.999])")), "[0.9, 0.999]");
  EXPECT_EQ(py_repr(J(R"({"a": true, "b": null, "c": "x", "d": [1, 2.0]})")),
            "{'a': True, 'b': None, 'c': 'x', 'd': [1, 2.0]}");
  EXPECT_EQ(py_repr(J(R"("it's")")), "\"it's\"");
  EXPECT_EQ(py_repr(J(R"("a\nb")")), "'a\\nb'");
  EXPECT_EQ(py_repr(J("{}")), "{}");
  EXPECT_EQ(py_str(J(R"("O2")")), "O2");
  EXPECT_EQ(py_str(J("false")), "False");
  EXPECT_EQ(py_str(J("8")), "8");
}

TEST(PyFormat, EqualityFollowsPython) {
  EXPECT_TRUE(py_equal(J("1"), J("1.0")));
  EXPECT_TRUE(py_equal(J("true"), J("1")));
  EXPECT_TRUE(py_equal(J("false"), J("0.0")));
  EXPECT_FALSE(py_equal(J("1"), J("1.5")));
  EXPECT_TRUE(py_equal(J("[0.9, 0.999]"), J("[0.9, 0.999]")));
  EXPECT_FALSE(py_equal(J("[0.9, 0.999]"), J("[0.9, 0.99]")));
  EXPECT_FALSE(py_equal(J(R"("1")"), J("1")));
  EXPECT_TRUE(py_equal(J(R"({"a": 1})"), J(R"({"a": 1.0})")));
  EXPECT_TRUE(py_equal(J("500000000"), J("5e8")));
  EXPECT_FALSE(py_equal(J("18446744073709551615"), J("-1")));
}

TEST(PyFormat, Truthiness) {
  EXPECT_FALSE(py_truthy(J("null")));
  EXPECT_FALSE(py_truthy(J("0")));
  EXPECT_FALSE(py_truthy(J("0.0")));
  EXPECT_FALSE(py_truthy(J(R"("")")));
  EXPECT_FALSE(py_truthy(J("[]")));
  EXPECT_TRUE(py_truthy(J(R"("false")")));
  EXPECT_TRUE(py_truthy(J(R"("auto")")));
  EXPECT_TRUE(py_truthy(J("[0]")));
}

}  // namespace
}  // namespace zrt::config
