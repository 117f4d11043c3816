// config/KEYS.md must document every key the resolver accepts (the list comes from the same
// tables the resolver uses, so the document cannot drift).
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "config/keys.h"

namespace zrt::config {
namespace {

TEST(KeysDoc, EverySupportedKeyIsDocumented) {
  std::ifstream in(std::string(ZRT_SOURCE_DIR) + "/config/KEYS.md");
  ASSERT_TRUE(in) << "config/KEYS.md is missing";
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string doc = buffer.str();
  const std::vector<std::string> keys = supported_keys();
  EXPECT_GT(keys.size(), 150u);
  for (const std::string& key : keys) {
    EXPECT_NE(doc.find("`" + key + "`"), std::string::npos) << key << " is not in KEYS.md";
  }
}

}  // namespace
}  // namespace zrt::config

namespace zrt::config {
namespace {

// The README's list of supported configuration keys cannot drift from the resolver either.
TEST(KeysDoc, ReadmeNamesEveryTopLevelKey) {
  std::ifstream in(std::string(ZRT_SOURCE_DIR) + "/README.md");
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string readme = buffer.str();
  ASSERT_FALSE(readme.empty());
  for (std::string_view key : keys::kTopLevel) {
    EXPECT_NE(readme.find("`" + std::string(key) + "`"), std::string::npos)
        << "README.md does not mention the top-level key " << key;
  }
}

}  // namespace
}  // namespace zrt::config
