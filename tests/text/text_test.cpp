// text/: the byte-level BPE tokenizers against ids the `tokenizers` library produced for the same
// tokenizer.json files (tests/data/text, written by tests/text/make_text_fixtures.py), the
// pre-tokenizer patterns against tokenizers' own splits, and the Unicode helpers. Torch-free.
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/error.h"
#include "core/json.h"
#include "tests/support/temp_dir.h"
#include "text/bpe_pretokenize.h"
#include "text/tokenizer.h"
#include "text/unicode_text.h"

namespace zrt::text {
namespace {

namespace fs = std::filesystem;

const fs::path kFixtures = fs::path(ZRT_SOURCE_DIR) / "tests" / "data" / "text";

Json read_json(const fs::path& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "cannot read " << path;
  return Json::parse(in);
}

std::vector<int64_t> ids_of(const Json& j) { return j.get<std::vector<int64_t>>(); }

class BpeFixture : public ::testing::TestWithParam<std::string> {};

// Every text of the fixture encodes to tokenizers' ids (with and without the special tokens the
// tokenizer adds) and those ids decode to tokenizers' text, special tokens skipped and kept.
TEST_P(BpeFixture, EncodesAndDecodesAsTokenizers) {
  const fs::path dir = kFixtures / GetParam();
  std::string why;
  const std::unique_ptr<TextTokenizer> tok = TextTokenizer::open(dir.string(), &why);
  ASSERT_NE(tok, nullptr) << dir << ": " << why;
  const Json expected = read_json(dir / "expected.json");
  EXPECT_EQ(tok->pieces(), expected["vocab_size"].get<int64_t>());
  ASSERT_GE(expected["cases"].size(), 20u);
  for (const Json& c : expected["cases"]) {
    const std::string text = c["text"].get<std::string>();
    SCOPED_TRACE("text: " + text.substr(0, 120));
    EXPECT_EQ(tok->encode(text, true), ids_of(c["ids"]));
    EXPECT_EQ(tok->encode(text, false), ids_of(c["ids_plain"]));
    int64_t dropped = 0;
    EXPECT_EQ(tok->decode(ids_of(c["ids"]), &dropped, true), c["decoded"].get<std::string>());
    EXPECT_EQ(tok->decode(ids_of(c["ids"]), &dropped, false),
              c["decoded_with_specials"].get<std::string>());
    EXPECT_EQ(dropped, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Tokenizers, BpeFixture,
                         ::testing::Values("gpt2", "gpt2_alt", "llama3", "qwen2"));

// A folder whose tokenizer.json is not its family's: transformers' AutoTokenizer builds the
// family's class, whose pipeline replaces the file's (Note [The tokenizer class transformers
// picks]); the ids are AutoTokenizer's.
class ClassFixture : public ::testing::TestWithParam<std::string> {};

TEST_P(ClassFixture, EncodesAsAutoTokenizer) {
  const fs::path dir = kFixtures / GetParam();
  std::string why;
  const std::unique_ptr<TextTokenizer> tok = TextTokenizer::open(dir.string(), &why);
  ASSERT_NE(tok, nullptr) << dir << ": " << why;
  const Json expected = read_json(dir / "expected.json");
  EXPECT_NE(tok->describe().find(expected["class"].get<std::string>()), std::string::npos)
      << tok->describe();
  for (const Json& c : expected["cases"]) {
    const std::string text = c["text"].get<std::string>();
    SCOPED_TRACE("text: " + text.substr(0, 120));
    EXPECT_EQ(tok->encode(text, true), ids_of(c["ids"]));
    EXPECT_EQ(tok->encode(text, false), ids_of(c["ids_plain"]));
  }
}

INSTANTIATE_TEST_SUITE_P(Families, ClassFixture, ::testing::Values("qwen2_class", "gpt2_class"));

// A family class ZeroRT does not implement is refused with its name, not read as the file says.
TEST(TextTokenizer, RefusesAFamilyClassItDoesNotImplement) {
  test::TempDir dir("zrt_text_class");
  fs::copy_file(kFixtures / "gpt2" / "tokenizer.json", fs::path(dir.path()) / "tokenizer.json");
  dir.write("config.json", R"({"model_type": "cohere"})");
  std::string why;
  try {
    TextTokenizer::open(dir.path(), &why);
    ADD_FAILURE() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("CohereTokenizer"), std::string::npos) << e.what();
  }
}

// split_words against tokenizers' Split(pattern, "isolated") pieces of the same texts.
TEST(PreTokenizer, SplitsAsTokenizers) {
  const Json expected = read_json(kFixtures / "splits.json");
  int checked = 0;
  for (const auto& [name, cases] : expected.items()) {
    const std::optional<SplitPattern> p = known_split_pattern(cases["regex"].get<std::string>());
    ASSERT_TRUE(p.has_value()) << name << "'s regex is not recognised";
    for (const Json& c : cases["cases"]) {
      const std::string text = c["text"].get<std::string>();
      std::vector<std::string_view> pieces;
      split_words(*p, text, &pieces);
      EXPECT_EQ(std::vector<std::string>(pieces.begin(), pieces.end()),
                c["pieces"].get<std::vector<std::string>>())
          << name << ": " << text.substr(0, 120);
      ++checked;
    }
  }
  EXPECT_GE(checked, 60);
}

TEST(PreTokenizer, UnknownRegexIsNotAKnownPattern) {
  EXPECT_FALSE(known_split_pattern("\\w+|\\s+").has_value());
  EXPECT_STREQ(split_pattern_name(SplitPattern::kQwen2), "Qwen2");
}

TEST(Unicode, Utf8Validity) {
  EXPECT_TRUE(valid_utf8("plain ascii"));
  EXPECT_TRUE(valid_utf8("caf\xC3\xA9 \xF0\x9F\x98\x80"));  // é, U+1F600
  EXPECT_FALSE(valid_utf8("\xC0\xAF"));                      // overlong '/'
  EXPECT_FALSE(valid_utf8("\xED\xA0\x80"));                  // a surrogate, U+D800
  EXPECT_FALSE(valid_utf8("\xF4\x90\x80\x80"));              // past U+10FFFF
  EXPECT_FALSE(valid_utf8("\xE2\x82"));                      // truncated
}

TEST(Unicode, LossyAndNfc) {
  EXPECT_EQ(unicode::utf8_lossy("a\xFF" "b"), "a\xEF\xBF\xBD" "b");
  EXPECT_EQ(unicode::nfc("e\xCC\x81"), "\xC3\xA9");  // e + combining acute -> é
  EXPECT_EQ(unicode::nfc("\xE1\x84\x80\xE1\x85\xA1"), "\xEA\xB0\x80");  // jamo -> 가
  std::string out;
  unicode::append_utf8(0x1F600, &out);
  EXPECT_EQ(out, "\xF0\x9F\x98\x80");
  size_t i = 0;
  EXPECT_EQ(unicode::next_code_point(out, &i), 0x1F600u);
  EXPECT_EQ(i, out.size());
  EXPECT_TRUE(unicode::is_white_space(0x3000));
  EXPECT_FALSE(unicode::is_white_space('x'));
}

// A folder whose tokenizer.json is no byte-level BPE (here a WordPiece) and no tokenizer.model:
// no tokenizer, and the reason says which file and why.
TEST(TextTokenizer, RefusesWhatItCannotRead) {
  test::TempDir dir("zrt_text_test");
  std::string why;
  EXPECT_EQ(TextTokenizer::open(dir.path(), &why), nullptr);
  EXPECT_FALSE(why.empty());
  std::ofstream(fs::path(dir.path()) / "tokenizer.json")
      << R"({"model": {"type": "WordPiece", "vocab": {"a": 0}}, "added_tokens": []})";
  why.clear();
  std::unique_ptr<TextTokenizer> tok;
  try {
    tok = TextTokenizer::open(dir.path(), &why);
  } catch (const ConfigError& e) {
    why = e.what();
  }
  EXPECT_EQ(tok, nullptr);
  EXPECT_NE(why.find("WordPiece"), std::string::npos) << why;
}

}  // namespace
}  // namespace zrt::text
