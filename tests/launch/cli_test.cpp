// The zrt-launch command line: DeepSpeed spellings and dashed aliases, `-np`, the program after
// `--`, --launcher_args and its shell-like word splitting, and usage errors that name the flag.
#include "launch/cli.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/error.h"
#include "launch_test_util.h"

namespace zrt::launch {
namespace {

using test::error_message;
using Args = std::vector<std::string>;

TEST(Cli, ParsesEveryFlag) {
  const CliArgs cli =
      parse_launch_args({"--num_gpus", "4", "--num_nodes=2", "-H", "hosts", "--master_addr",
                         "10.0.0.1", "--timeout", "60", "--oversubscribe", "--dry-run", "--mpirun",
                         "/opt/ompi/bin/mpirun", "--", "./train", "--np", "7", "--", "x"});
  const LaunchOptions& o = cli.options;
  EXPECT_FALSE(cli.help);
  EXPECT_EQ(o.np, -1);
  EXPECT_EQ(o.num_gpus, 4);
  EXPECT_EQ(o.num_nodes, 2);
  EXPECT_EQ(o.hostfile, "hosts");
  EXPECT_EQ(o.master_addr, "10.0.0.1");
  EXPECT_EQ(o.timeout_s, 60);
  EXPECT_TRUE(o.oversubscribe);
  EXPECT_TRUE(o.dry_run);
  EXPECT_EQ(o.mpirun, "/opt/ompi/bin/mpirun");
  EXPECT_EQ(o.program, (Args{"./train", "--np", "7", "--", "x"}));  // the program's own flags
}

TEST(Cli, AliasesAndDefaults) {
  for (const Args& args : {Args{"--np", "3"}, Args{"--np=3"}, Args{"-np", "3"}, Args{"-n", "3"}}) {
    Args full = args;
    full.insert(full.end(), {"--", "prog"});
    EXPECT_EQ(parse_launch_args(full).options.np, 3);
  }
  const LaunchOptions o = parse_launch_args({"--num-gpus", "2", "--num-nodes", "1", "--dry_run",
                                             "--master-addr", "h", "--", "prog"})
                              .options;
  EXPECT_EQ(o.num_gpus, 2);
  EXPECT_EQ(o.num_nodes, 1);
  EXPECT_TRUE(o.dry_run);
  EXPECT_EQ(o.master_addr, "h");
  const LaunchOptions d = parse_launch_args({"--", "prog"}).options;
  EXPECT_EQ(d.np, -1);
  EXPECT_EQ(d.timeout_s, 0);
  EXPECT_FALSE(d.dry_run);
  EXPECT_TRUE(d.hostfile.empty());
  EXPECT_EQ(parse_launch_args({"-i", "a:0@b", "--", "p"}).options.include, "a:0@b");
  EXPECT_EQ(parse_launch_args({"-e", "b", "--", "p"}).options.exclude, "b");
}

TEST(Cli, Help) {
  EXPECT_TRUE(parse_launch_args({"--help"}).help);
  EXPECT_TRUE(parse_launch_args({"-h"}).help);
  const std::string help = launch_help();
  for (const char* part : {"--num_gpus", "--hostfile", "--include", "--exclude", "--dry-run",
                           "--timeout", "--oversubscribe", "-- PROGRAM", ".zrt_env"}) {
    EXPECT_NE(help.find(part), std::string::npos) << part;
  }
}

TEST(Cli, LauncherArgsAreSplitIntoWords) {
  for (const char* flag : {"--launcher_args", "--launcher-args"}) {
    const LaunchOptions o =
        parse_launch_args(
            {flag, "--mca btl tcp,self --mca btl_tcp_if_include 10.0.0.0/24", "--", "p"})
            .options;
    EXPECT_EQ(o.launcher_args,
              (Args{"--mca", "btl", "tcp,self", "--mca", "btl_tcp_if_include", "10.0.0.0/24"}));
  }
  EXPECT_EQ(parse_launch_args({"--launcher_args=-x FOO", "--", "p"}).options.launcher_args,
            (Args{"-x", "FOO"}));
  // DeepSpeed's default is "": no words, not an error.
  EXPECT_TRUE(parse_launch_args({"--launcher_args", "", "--", "p"}).options.launcher_args.empty());
  EXPECT_TRUE(parse_launch_args({"--", "p"}).options.launcher_args.empty());
}

TEST(Cli, ShellWordSplitting) {
  auto split = [](const std::string& text) { return split_shell_words(text, "--launcher_args"); };
  EXPECT_EQ(split(""), Args{});
  EXPECT_EQ(split(" \t\n "), Args{});
  EXPECT_EQ(split("  a  b\tc\nd "), (Args{"a", "b", "c", "d"}));
  EXPECT_EQ(split("--mca btl 'tcp, self'"), (Args{"--mca", "btl", "tcp, self"}));
  EXPECT_EQ(split("a'b c'd"), (Args{"ab cd"}));            // quotes join with their neighbours
  EXPECT_EQ(split("'' \"\" x"), (Args{"", "", "x"}));      // empty quoted words are words
  EXPECT_EQ(split("'a\\b \"c\"'"), (Args{"a\\b \"c\""}));  // single quotes keep everything
  EXPECT_EQ(split("\"a \\\"b\\\" \\$HOME \\x 'y'\""), (Args{"a \"b\" $HOME \\x 'y'"}));
  EXPECT_EQ(split("a\\ b \\'c\\' \\\\"), (Args{"a b", "'c'", "\\"}));
  EXPECT_EQ(split("a\\\nb"), (Args{"ab"}));  // backslash-newline continues the line
}

TEST(Cli, ShellWordSplittingErrorsNameTheFlag) {
  for (const std::string& text : {"--mca 'btl", "\"a", "a'b'c'", "\"a\\\"", "trailing\\"}) {
    const std::string msg = error_message<UsageError>([&] {
      parse_launch_args({"--launcher_args", text, "--", "p"});
    });
    EXPECT_EQ(msg.rfind("--launcher_args '" + text + "': ", 0), 0u) << msg;
    const bool backslash = text.back() == '\\' && text.front() != '"';
    EXPECT_NE(msg.find(backslash ? "backslash at the end" : "unbalanced"), std::string::npos)
        << msg;
  }
}

TEST(Cli, UsageErrorsNameTheFlag) {
  const std::vector<std::pair<Args, std::string>> cases = {
      {{"--np", "0", "--", "p"}, "--np '0' is not a positive integer"},
      {{"--np", "two", "--", "p"}, "--np 'two'"},
      {{"--num_gpus", "-1", "--", "p"}, "--num_gpus '-1'"},
      {{"--num_nodes", "1x", "--", "p"}, "--num_nodes '1x'"},
      {{"--timeout", "1.5", "--", "p"}, "--timeout '1.5'"},
      {{"--bogus", "--", "p"}, "bogus"},
      {{"--np"}, "np"},
      {{"--hostfile=", "--", "p"}, "--hostfile needs a non-empty value"},
      {{"--np", "2", "--num_gpus", "2", "--", "p"}, "exclusive"},
      {{"-i", "a", "-e", "b", "--", "p"}, "exclusive"},
      {{"-i", "a", "--num_nodes", "1", "--", "p"}, "cannot be combined"},
      {{"--np", "2"}, "no program given"},
      {{"--np", "2", "--"}, "no program given"},
      {{"--np", "2", "./train"}, "unexpected argument './train': put the program after '--'"},
  };
  for (const auto& [args, want] : cases) {
    const std::string msg = error_message<UsageError>([&] { parse_launch_args(args); });
    EXPECT_NE(msg.find(want), std::string::npos) << "want '" << want << "' in '" << msg << "'";
  }
}

}  // namespace
}  // namespace zrt::launch
