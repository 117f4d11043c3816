// Tests of ckpt::Value: builders, typed access with path-naming errors, equality, JSON conversion.
#include <cmath>
#include <limits>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "checkpoint/value_view.h"
#include "core/error.h"
#include "tests/support/error_of.h"

namespace zrt::ckpt {
namespace {

const auto error_of = &zrt::test::error_of<CheckpointError>;

TEST(Value, ScalarsAndKinds) {
  EXPECT_TRUE(Value().is_none());
  EXPECT_TRUE(Value(nullptr).is_none());
  EXPECT_EQ(Value(true).as_bool(), true);
  EXPECT_EQ(Value(3).as_int(), 3);
  EXPECT_EQ(Value(int64_t{1} << 40).as_int(), int64_t{1} << 40);
  EXPECT_EQ(Value(2.5).as_double(), 2.5);
  EXPECT_EQ(Value(7).as_double(), 7.0);  // ints read as floats
  EXPECT_EQ(Value("abc").as_string(), "abc");
  EXPECT_TRUE(Value("abc").is_string());  // not bool
  EXPECT_EQ(Value::torch_size({2, 3}).as_size(), (std::vector<int64_t>{2, 3}));
  EXPECT_THROW(Value(2.5).as_int(), CheckpointError);
  EXPECT_THROW(Value(true).as_int(), CheckpointError);
  EXPECT_EQ(error_of([] { Value("x").as_int(); }), "expected int, got str");
}

TEST(Value, DictKeepsInsertionOrderAndReplacesInPlace) {
  Value d = Value::ordered_dict();
  d.set("b", 1);
  d.set("a", 2);
  d.set(3, "three");
  d.set("b", 10);
  ASSERT_EQ(d.length(), 3u);
  const auto& items = d.as_dict().items();
  EXPECT_EQ(items[0].first, Key("b"));
  EXPECT_EQ(items[0].second.as_int(), 10);
  EXPECT_EQ(items[1].first, Key("a"));
  EXPECT_EQ(items[2].first, Key(3));
  EXPECT_NE(Key(3), Key("3"));
  EXPECT_TRUE(d.is_ordered_dict());
  EXPECT_EQ(d.at(3).as_string(), "three");
  EXPECT_EQ(error_of([&] { d.at("zz"); }), "missing key 'zz'");
}

TEST(Value, CopiesAreDeepForContainersAndShallowForTensors) {
  Value a = Value::dict();
  a.set("list", Value::list({1, 2}));
  a.set("t", torch::zeros({2}));
  Value b = a;
  b.at("list").push_back(3);
  EXPECT_EQ(a.at("list").length(), 2u);
  EXPECT_EQ(b.at("list").length(), 3u);
  b.at("t").as_tensor().fill_(1);
  EXPECT_EQ(a.at("t").as_tensor()[0].item<float>(), 1.0f);
}

TEST(Value, EqualityComparesTensorsByValue) {
  Value a = Value::list({torch::arange(3), 1.5, "s", Value::torch_size({1})});
  Value b = Value::list({torch::arange(3), 1.5, "s", Value::torch_size({1})});
  EXPECT_TRUE(a.equals(b));
  b.items()[0] = Value(torch::arange(3) + 1);
  EXPECT_FALSE(a.equals(b));
  EXPECT_FALSE(Value(1).equals(Value(1.0)));
  EXPECT_FALSE(Value::list().equals(Value::tuple()));
  EXPECT_FALSE(Value::dict().equals(Value::ordered_dict()));
}

TEST(ValueView, ErrorsNameTheFileAndKeyPath) {
  Value root = Value::dict();
  Value osd = Value::dict();
  Value state = Value::dict();
  state.set(0, Value::dict());
  state.at(0).set("exp_avg", 5);
  osd.set("state", state);
  osd.set("layer.weight", "x");
  root.set("optimizer_state_dict", osd);
  ValueView v(root, "optim.pt");
  EXPECT_EQ(v["optimizer_state_dict"]["state"][0]["exp_avg"].as_int(), 5);
  EXPECT_EQ(error_of([&] { v["optimizer_state_dict"]["state"][0]["exp_avg"].as_tensor(); }),
            "optim.pt: optimizer_state_dict.state[0].exp_avg: expected tensor, got int");
  EXPECT_EQ(error_of([&] { v["optimizer_state_dict"]["missing"]; }),
            "optim.pt: optimizer_state_dict: missing key 'missing'");
  EXPECT_EQ(error_of([&] { v["optimizer_state_dict"]["layer.weight"].as_int(); }),
            "optim.pt: optimizer_state_dict['layer.weight']: expected int, got str");
  EXPECT_EQ(error_of([&] { v.at(0); }), "optim.pt: <root>: expected list or tuple, got dict");
  Value shape = Value::list({2, 3});
  EXPECT_EQ(ValueView(shape, "f").as_shape(), (std::vector<int64_t>{2, 3}));
}

TEST(ValueJson, RoundTripKeepsIntsAndFloatsApart) {
  Json j = Json::parse(R"({"last_batch_iteration": 7, "lr": 0.001, "one": 1.0,
                           "names": ["a", null, true], "nested": {"x": -3}})");
  Value v = from_json(j);
  EXPECT_TRUE(v.at("last_batch_iteration").is_int());
  EXPECT_TRUE(v.at("lr").is_double());
  EXPECT_TRUE(v.at("one").is_double());
  EXPECT_TRUE(v.at("names").is_list());
  EXPECT_TRUE(v.at("names")[1].is_none());
  Json back = to_json(v);
  EXPECT_EQ(back, j);
  EXPECT_TRUE(back["one"].is_number_float());
  EXPECT_TRUE(back["last_batch_iteration"].is_number_integer());
  EXPECT_EQ(to_json(Value::tuple({1, Value::torch_size({2})})), Json::parse("[1, [2]]"));
}

TEST(ValueJson, RefusesWhatJsonCannotHold) {
  Value d = Value::dict();
  d.set("t", torch::zeros({1}));
  EXPECT_EQ(error_of([&] { to_json(d); }), "cannot convert t to JSON: it is a tensor");
  Value k = Value::dict();
  k.set("a", Value::dict());
  k.at("a").set(3, 1);
  EXPECT_NE(error_of([&] { to_json(k); }).find("dict key 3 is an int"), std::string::npos);
  EXPECT_NE(error_of([&] { to_json(Value(std::nan(""))); }).find("non-finite"), std::string::npos);
  EXPECT_NE(
      error_of([&] { from_json(Json(std::numeric_limits<uint64_t>::max())); }).find("does not fit"),
      std::string::npos);
}

}  // namespace
}  // namespace zrt::ckpt
