// Hostfile grammar: `HOST slots=N` lines, comments, blank lines; duplicates, bad lines, empty
// files and missing files are ConfigErrors naming the file and line.
#include "launch/hostfile.h"

#include <string>

#include <gtest/gtest.h>

#include "core/error.h"
#include "launch_test_util.h"

namespace zrt::launch {
namespace {

using test::error_message;
using test::TempDir;

TEST(Hostfile, ParsesHostsInOrder) {
  const auto hosts = parse_hostfile("worker-0 slots=4\nworker-1 slots=2\n", "h");
  ASSERT_EQ(hosts.size(), 2u);
  EXPECT_EQ(hosts[0].host, "worker-0");
  EXPECT_EQ(hosts[0].slots, 4);
  EXPECT_EQ(hosts[1].host, "worker-1");
  EXPECT_EQ(hosts[1].slots, 2);
  EXPECT_EQ(hosts[1].line, 2);
}

TEST(Hostfile, SkipsCommentsBlankLinesAndExtraSpace) {
  const auto hosts = parse_hostfile(
      "# cluster A\n\n   \n  10.0.0.1\tslots=8   # the big one\r\n#worker-9 slots=1\nb slots=1",
      "h");
  ASSERT_EQ(hosts.size(), 2u);
  EXPECT_EQ(hosts[0].host, "10.0.0.1");
  EXPECT_EQ(hosts[0].slots, 8);
  EXPECT_EQ(hosts[0].line, 4);
  EXPECT_EQ(hosts[1].host, "b");
}

TEST(Hostfile, DuplicateHostNamesBothLines) {
  const std::string msg = error_message<ConfigError>(
      [] { parse_hostfile("a slots=1\nb slots=2\n\na slots=4\n", "hosts.txt"); });
  EXPECT_NE(msg.find("hosts.txt:4"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'a' is listed twice (first on line 1)"), std::string::npos) << msg;
}

TEST(Hostfile, BadLinesNameFileAndLine) {
  for (const char* line :
       {"worker-0", "worker-0 4", "worker-0 slots=", "worker-0 slots=0", "worker-0 slots=-1",
        "worker-0 slots=two", "worker-0 slots=2 extra", "worker-0 max_slots=2", "slots=2"}) {
    const std::string msg = error_message<ConfigError>(
        [&] { parse_hostfile(std::string("ok slots=1\n") + line + "\n", "hf"); });
    EXPECT_NE(msg.find("hf:2: expected 'HOST slots=N'"), std::string::npos) << line << ": " << msg;
    EXPECT_NE(msg.find(line), std::string::npos) << line << ": " << msg;
  }
}

TEST(Hostfile, EmptyFileIsAnError) {
  for (const char* text : {"", "\n\n", "# only a comment\n   # another\n"}) {
    const std::string msg = error_message<ConfigError>([&] { parse_hostfile(text, "empty.txt"); });
    EXPECT_NE(msg.find("empty.txt: no hosts"), std::string::npos) << msg;
  }
}

TEST(Hostfile, ReadsFilesAndRejectsMissingOnes) {
  const TempDir dir("zrt_hostfile_test");
  const std::string path = dir.write("hosts", "localhost slots=3\n");
  const auto hosts = read_hostfile(path);
  ASSERT_EQ(hosts.size(), 1u);
  EXPECT_EQ(hosts[0].slots, 3);
  EXPECT_NE(error_message<ConfigError>([&] {
              read_hostfile(path + ".missing");
            }).find("cannot read hostfile '" + path + ".missing'"),
            std::string::npos);
  EXPECT_NE(error_message<ConfigError>([&] { read_hostfile(dir.path()); }).find("is a directory"),
            std::string::npos);
}

}  // namespace
}  // namespace zrt::launch
