// Loading configs: files, JSON strings, base64, comments, duplicate keys, limits.
#include "config/load.h"

#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "tests/support/temp_dir.h"

#include "test_util.h"

namespace zrt::config {
namespace {

using test::config_error;

std::string encode_base64(const std::string& bytes, bool urlsafe) {
  const char* alphabet = urlsafe
                             ? "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
                             : "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  std::size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    const uint32_t v =
        (uint8_t(bytes[i]) << 16) | (uint8_t(bytes[i + 1]) << 8) | uint8_t(bytes[i + 2]);
    for (int s = 18; s >= 0; s -= 6) out += alphabet[(v >> s) & 63];
  }
  if (bytes.size() - i == 1) {
    const uint32_t v = uint8_t(bytes[i]) << 16;
    out += alphabet[(v >> 18) & 63];
    out += alphabet[(v >> 12) & 63];
    out += "==";
  } else if (bytes.size() - i == 2) {
    const uint32_t v = (uint8_t(bytes[i]) << 16) | (uint8_t(bytes[i + 1]) << 8);
    out += alphabet[(v >> 18) & 63];
    out += alphabet[(v >> 12) & 63];
    out += alphabet[(v >> 6) & 63];
    out += "=";
  }
  return out;
}

// A JSON file in its own temp directory (test::TempDir), removed with it.
class TempFile {
 public:
  explicit TempFile(const std::string& content) : path_(dir_.write("config.json", content)) {}
  const std::string& path() const { return path_; }

 private:
  test::TempDir dir_{"zrt_config_test"};
  std::string path_;
};

TEST(Load, CommentsAreAllowed) {
  const Json j = parse_config_text(R"({
    // line comment
    "train_batch_size": 8, /* block
    comment */ "fp16": {"enabled": true}
  })",
                                   "<test>");
  EXPECT_EQ(j["train_batch_size"], 8);
  EXPECT_EQ(j["fp16"]["enabled"], true);
}

TEST(Load, KeyOrderIsKept) {
  const Json j = parse_config_text(R"({"zeta": 1, "alpha": 2})", "<test>");
  EXPECT_EQ(j.begin().key(), "zeta");
}

TEST(Load, DuplicateKeysAreListedWithTheirPaths) {
  EXPECT_EQ(config_error([] {
              parse_config_text(R"({"train_batch_size": 8, "train_batch_size": 16})", "<t>");
            }),
            "Duplicate keys in DeepSpeed config: ['train_batch_size']");
  EXPECT_EQ(config_error([] {
              parse_config_text(
                  R"({"a": 1, "zero_optimization": {"stage": 2, "stage": 3}, "a": 2,
                      "list": [{"x": 1}, {"x": 1, "x": 2}]})",
                  "<t>");
            }),
            "Duplicate keys in DeepSpeed config: ['zero_optimization.stage', 'a', 'list[1].x']");
}

TEST(Load, SameKeyInDifferentObjectsIsFine) {
  EXPECT_NO_THROW(
      parse_config_text(R"({"fp16": {"enabled": true}, "bf16": {"enabled": false}})", "<t>"));
}

TEST(Load, NotJsonNamesLineAndColumn) {
  const std::string message =
      config_error([] { parse_config_text("{\n  \"a\": 1,\n}", "ds.json"); });
  EXPECT_CONTAINS(message, "ds.json: not valid JSON: parse error at line 3, column 1");
  EXPECT_CONTAINS(message, "trailing commas are not supported");
  EXPECT_CONTAINS(config_error([] { parse_config_text("", "e.json"); }), "e.json: not valid JSON");
  EXPECT_CONTAINS(config_error([] { parse_config_text("{unquoted: 1}", "h.json"); }),
                  "not valid JSON");
}

TEST(Load, TopLevelMustBeAnObject) {
  EXPECT_EQ(config_error([] { parse_config_text("[1, 2]", "x.json"); }),
            "x.json: a DeepSpeed config must be a JSON object, got an array");
  EXPECT_EQ(config_error([] { load_config_json(Json(5)); }),
            "a DeepSpeed config must be a JSON object, got a number");
}

TEST(Load, HugeNumbersAreParseErrorsNotCrashes) {
  EXPECT_CONTAINS(config_error([] { parse_config_text(R"({"train_batch_size": 1e400})", "n"); }),
                  "not valid JSON");
}

TEST(Load, SizeAndDepthAreBounded) {
  const std::string big(kMaxConfigBytes + 1, ' ');
  EXPECT_CONTAINS(config_error([&] { parse_config_text(big, "big.json"); }),
                  "larger than the 16777216-byte limit");
  std::string deep;
  for (int i = 0; i < 100; ++i) deep += "[";
  for (int i = 0; i < 100; ++i) deep += "]";
  EXPECT_CONTAINS(config_error([&] { parse_config_text("{\"a\": " + deep + "}", "deep.json"); }),
                  "deep.json: nesting deeper than 64 levels");
}

TEST(Load, FilePathsAndMissingFiles) {
  TempFile file(R"({"train_micro_batch_size_per_gpu": 4} // trailing comment)");
  EXPECT_EQ(load_config_file(file.path())["train_micro_batch_size_per_gpu"], 4);
  EXPECT_EQ(load_config_source(file.path())["train_micro_batch_size_per_gpu"], 4);
  EXPECT_EQ(config_error([] { load_config_file("/nonexistent/ds.json"); }),
            "/nonexistent/ds.json: no such file");
  EXPECT_CONTAINS(config_error([] { load_config_file("/tmp"); }), "/tmp: not a regular file");
  TempFile dup(R"({"a": 1, "a": 1})");
  EXPECT_EQ(config_error([&] { load_config_source(dup.path()); }),
            "Duplicate keys in DeepSpeed config: ['a']");
}

TEST(Load, JsonStringAndBase64Sources) {
  EXPECT_EQ(load_config_source(R"( {"train_batch_size": 32} )")["train_batch_size"], 32);
  const std::string text = R"({"zero_optimization": {"stage": 3}, "x": ">>>???"})";
  for (bool urlsafe : {true, false}) {
    const Json j = load_config_source(encode_base64(text, urlsafe));
    EXPECT_EQ(j["zero_optimization"]["stage"], 3);
  }
  // Unpadded urlsafe base64 decodes too.
  std::string unpadded = encode_base64(text, true);
  while (!unpadded.empty() && unpadded.back() == '=') unpadded.pop_back();
  EXPECT_EQ(load_config_source(unpadded)["x"], ">>>???");
}

TEST(Load, Base64GarbageGivesAccelerateMessage) {
  const std::string prefix =
      "Expected a string path to an existing deepspeed config, or a dictionary, or a base64 "
      "encoded string. Received: ";
  EXPECT_CONTAINS(config_error([] { load_config_source("missing_config.json"); }),
                  prefix + "missing_config.json");
  EXPECT_CONTAINS(config_error([] { load_config_source("abc!"); }), prefix + "abc!");
  // Valid base64 whose content is not JSON.
  const std::string message =
      config_error([&] { load_config_source(encode_base64("hello", true)); });
  EXPECT_CONTAINS(message, prefix);
  EXPECT_CONTAINS(message, "decoded base64: <base64>: not valid JSON");
  // Valid base64 of a JSON array.
  EXPECT_CONTAINS(config_error([&] { load_config_source(encode_base64("[1]", true)); }),
                  "must be a JSON object");
}

TEST(Load, DecodeBase64) {
  EXPECT_EQ(decode_base64("aGVsbG8="), "hello");
  EXPECT_EQ(decode_base64("aGVsbG8"), "hello");
  EXPECT_EQ(decode_base64("aGVs\nbG8="), "hello");
  EXPECT_FALSE(decode_base64("a"));
  EXPECT_FALSE(decode_base64("aGVsbG8=x"));
  EXPECT_FALSE(decode_base64(""));
  EXPECT_FALSE(decode_base64("a$bc"));
}

}  // namespace
}  // namespace zrt::config
