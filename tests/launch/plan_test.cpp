// Building the mpirun command: root-allow variables, --oversubscribe and --bind-to rules,
// --timeout, --launcher_args, --host for multi-node jobs, app contexts for non-prefix slots,
// environment forwarding, env files, the OMP_NUM_THREADS default, OMPI_MCA_* in the environment,
// and the --dry-run text.
#include "launch/plan.h"

#include <algorithm>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/error.h"
#include "launch_test_util.h"

namespace zrt::launch {
namespace {

using test::error_message;
using test::TempDir;
using Argv = std::vector<std::string>;

// A reproducible machine: not root, 8 cores, named "node-a", HOME and cwd in a scratch dir.
struct PlanTest : ::testing::Test {
  TempDir dir{"zrt_plan_test"};
  HostFacts facts;
  LaunchOptions options;

  PlanTest() {
    facts.is_root = false;
    facts.cores = 8;
    facts.hostname = "node-a.cluster";
    facts.cwd = dir.path();
    facts.env = {{"HOME", dir.path()}, {"PATH", "/usr/bin"}};
    options.default_hostfile = dir.path() + "/no-such-default-hostfile";
    options.program = {"./train", "--deepspeed", "ds config.json"};
  }

  LaunchPlan plan() { return make_plan(options, facts, "mpirun"); }
};

std::string env_value(const LaunchPlan& plan, const std::string& name) {
  for (const auto& [n, v] : plan.env) {
    if (n == name) return v;
  }
  return "<unset>";
}

bool has_word(const Argv& argv, const std::string& word) {
  return std::find(argv.begin(), argv.end(), word) != argv.end();
}

bool forwards(const Argv& argv, const std::string& name) {
  for (std::size_t i = 0; i + 1 < argv.size(); ++i) {
    if (argv[i] == "-x" && argv[i + 1] == name) return true;
  }
  return false;
}

bool has_note(const LaunchPlan& plan, const std::string& part) {
  return std::any_of(plan.notes.begin(), plan.notes.end(),
                     [&](const std::string& n) { return n.find(part) != std::string::npos; });
}

TEST_F(PlanTest, LocalJobExactCommand) {
  options.np = 2;
  const LaunchPlan p = plan();
  EXPECT_TRUE(p.single_node);
  EXPECT_EQ(p.argv, (Argv{"mpirun", "--bind-to", "none", "-x", "OMP_NUM_THREADS", "-np", "2",
                          "./train", "--deepspeed", "ds config.json"}));
  EXPECT_EQ(p.env, (EnvVars{{"OMP_NUM_THREADS", "4"}}));
  EXPECT_TRUE(
      has_note(p, "OMP_NUM_THREADS not set: using 4 per rank (8 cores / 2 ranks per node)"));
}

// Open MPI gives ranks a pseudo-terminal even when zrt-launch writes to a log file: the plan tells
// them (ZRT_PROGRESS=lines) so that no carriage-return frames land in the file; a user's own
// ZRT_PROGRESS wins.
TEST_F(PlanTest, ProgressLinesWhenStdoutIsNotATerminal) {
  options.np = 2;
  EXPECT_EQ(env_value(plan(), "ZRT_PROGRESS"), "<unset>");
  facts.stdout_is_terminal = false;
  LaunchPlan p = plan();
  EXPECT_EQ(env_value(p, "ZRT_PROGRESS"), "lines");
  EXPECT_TRUE(forwards(p.argv, "ZRT_PROGRESS"));
  facts.env["ZRT_PROGRESS"] = "bar";
  EXPECT_EQ(env_value(plan(), "ZRT_PROGRESS"), "<unset>");
}

TEST_F(PlanTest, RootAllowVariablesAreSetAndForwarded) {
  options.np = 2;
  facts.is_root = true;
  const LaunchPlan p = plan();
  EXPECT_EQ(env_value(p, "OMPI_ALLOW_RUN_AS_ROOT"), "1");
  EXPECT_EQ(env_value(p, "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"), "1");
  EXPECT_TRUE(forwards(p.argv, "OMPI_ALLOW_RUN_AS_ROOT"));
  EXPECT_TRUE(forwards(p.argv, "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"));
  EXPECT_TRUE(has_note(p, "running as root"));
  facts.is_root = false;
  EXPECT_EQ(env_value(plan(), "OMPI_ALLOW_RUN_AS_ROOT"), "<unset>");
}

TEST_F(PlanTest, OversubscribeWhenRanksExceedCores) {
  facts.cores = 2;
  options.np = 2;
  EXPECT_FALSE(has_word(plan().argv, "--oversubscribe"));
  options.np = 3;
  const LaunchPlan p = plan();
  EXPECT_TRUE(has_word(p.argv, "--oversubscribe"));
  EXPECT_TRUE(has_note(p, "3 ranks on 2 cores: adding --oversubscribe"));
  EXPECT_EQ(env_value(p, "OMP_NUM_THREADS"), "1");
}

TEST_F(PlanTest, OversubscribeWhenAsked) {
  options.np = 1;
  options.oversubscribe = true;
  EXPECT_TRUE(has_word(plan().argv, "--oversubscribe"));
}

TEST_F(PlanTest, TimeoutIsPassedToMpirun) {
  options.np = 1;
  EXPECT_FALSE(has_word(plan().argv, "--timeout"));
  options.timeout_s = 60;
  const Argv argv = plan().argv;
  const auto it = std::find(argv.begin(), argv.end(), "--timeout");
  ASSERT_NE(it, argv.end());
  EXPECT_EQ(*(it + 1), "60");
}

TEST_F(PlanTest, MultiNodeUsesHostListAndNoAutomaticOversubscribe) {
  facts.cores = 2;
  options.hostfile = dir.write("hosts", "w0 slots=4\nw1 slots=4\n");
  const LaunchPlan p = plan();
  EXPECT_FALSE(p.single_node);
  EXPECT_FALSE(has_word(p.argv, "--oversubscribe"));
  const auto it = std::find(p.argv.begin(), p.argv.end(), "--host");
  ASSERT_NE(it, p.argv.end());
  EXPECT_EQ(*(it + 1), "w0:4,w1:4");
  EXPECT_TRUE(has_word(p.argv, "8"));
  EXPECT_TRUE(has_word(p.argv, "none"));
  EXPECT_TRUE(has_note(p, "assuming every node has as many cores"));
}

TEST_F(PlanTest, HostfileNamingThisMachineIsASingleNodeJob) {
  facts.cores = 2;
  for (const char* host : {"localhost", "node-a", "node-a.cluster", "127.0.0.1"}) {
    options.hostfile = dir.write("hosts", std::string(host) + " slots=3\n");
    const LaunchPlan p = plan();
    EXPECT_TRUE(p.single_node) << host;
    EXPECT_FALSE(has_word(p.argv, "--host")) << host;
    EXPECT_TRUE(has_word(p.argv, "--oversubscribe")) << host;
  }
}

TEST_F(PlanTest, NonPrefixSlotsBecomeAppContextsWithDeviceLists) {
  options.hostfile = dir.write("hosts", "w0 slots=4\nw1 slots=4\n");
  options.include = "w0:1,3@w1";
  const Argv argv = plan().argv;
  const auto first = std::find(argv.begin(), argv.end(), "-np");
  ASSERT_NE(first, argv.end());
  const Argv contexts(first, argv.end());
  EXPECT_EQ(contexts,
            (Argv{"-np", "2", "--host", "w0:2", "env", "CUDA_VISIBLE_DEVICES=1,3", "./train",
                  "--deepspeed", "ds config.json", ":", "-np", "4", "--host", "w1:4", "env",
                  "CUDA_VISIBLE_DEVICES=0,1,2,3", "./train", "--deepspeed", "ds config.json"}));
}

TEST_F(PlanTest, NumGpusLeavesCudaVisibleDevicesAlone) {
  options.hostfile = dir.write("hosts", "w0 slots=4\nw1 slots=4\n");
  options.num_gpus = 2;
  facts.env["CUDA_VISIBLE_DEVICES"] = "4,5,6,7";
  const LaunchPlan p = plan();
  EXPECT_FALSE(has_word(p.argv, "env"));
  EXPECT_EQ(env_value(p, "CUDA_VISIBLE_DEVICES"), "<unset>");
  EXPECT_TRUE(forwards(p.argv, "CUDA_VISIBLE_DEVICES"));
  EXPECT_EQ(p.world.describe(), "w0:0,1 w1:0,1");
  EXPECT_EQ(env_value(p, "OMP_NUM_THREADS"), "4");
}

TEST_F(PlanTest, ForwardsTheDocumentedPrefixesOnly) {
  options.np = 1;
  for (const char* name :
       {"ZRT_LOG_LEVEL", "NCCL_SOCKET_IFNAME", "CUDA_HOME", "OMP_PROC_BIND", "MKL_NUM_THREADS",
        "PYTHONPATH", "UCX_TLS", "XZRT_NOT", "MY_VAR", "LD_LIBRARY_PATH", "nccl_lower"}) {
    facts.env[name] = "v";
  }
  const Argv argv = plan().argv;
  for (const char* name : {"ZRT_LOG_LEVEL", "NCCL_SOCKET_IFNAME", "CUDA_HOME", "OMP_PROC_BIND",
                           "MKL_NUM_THREADS", "PYTHONPATH", "UCX_TLS", "OMP_NUM_THREADS"}) {
    EXPECT_TRUE(forwards(argv, name)) << name;
  }
  for (const char* name : {"XZRT_NOT", "MY_VAR", "LD_LIBRARY_PATH", "nccl_lower", "HOME", "PATH"}) {
    EXPECT_FALSE(forwards(argv, name)) << name;
  }
}

TEST_F(PlanTest, UserOmpNumThreadsIsKept) {
  options.np = 2;
  facts.env["OMP_NUM_THREADS"] = "3";
  const LaunchPlan p = plan();
  EXPECT_EQ(env_value(p, "OMP_NUM_THREADS"), "<unset>");
  EXPECT_TRUE(forwards(p.argv, "OMP_NUM_THREADS"));
  EXPECT_FALSE(has_note(p, "OMP_NUM_THREADS not set"));
}

TEST_F(PlanTest, OmpNumThreadsIsCoresPerRankAtLeastOne) {
  facts.cores = 16;
  for (const auto& [np, want] : std::vector<std::pair<int, std::string>>{
           {1, "16"}, {3, "5"}, {4, "4"}, {16, "1"}, {40, "1"}}) {
    options.np = np;
    EXPECT_EQ(env_value(plan(), "OMP_NUM_THREADS"), want) << np;
  }
}

TEST_F(PlanTest, EnvFilesAreExportedAndForwarded) {
  options.np = 1;
  dir.write(".deepspeed_env",
            "# comment\nLD_LIBRARY_PATH=/opt/torch/lib\nexport NCCL_IB_DISABLE=1\n");
  TempDir work("zrt_plan_test_cwd");
  facts.cwd = work.path();
  work.write(".zrt_env", "NCCL_IB_DISABLE=0\nOMP_NUM_THREADS=\"2\"\n");
  facts.env["NCCL_IB_DISABLE"] = "7";
  const LaunchPlan p = plan();
  EXPECT_EQ(env_value(p, "LD_LIBRARY_PATH"), "/opt/torch/lib");
  EXPECT_EQ(env_value(p, "NCCL_IB_DISABLE"), "0");  // the working directory's file wins
  EXPECT_EQ(env_value(p, "OMP_NUM_THREADS"), "2");
  EXPECT_TRUE(forwards(p.argv, "LD_LIBRARY_PATH"));
  EXPECT_TRUE(has_note(p, "read env file " + dir.path() + "/.deepspeed_env"));
  EXPECT_TRUE(has_note(p, "read env file " + work.path() + "/.zrt_env"));
  EXPECT_TRUE(has_note(p, "NCCL_IB_DISABLE='0' from the env file replaces '7'"));
}

TEST_F(PlanTest, ExplicitEnvFile) {
  options.np = 1;
  dir.write(".deepspeed_env", "IGNORED=1\n");
  dir.write("my.env", "PICKED=1\n");
  facts.env["DS_ENV_FILE"] = "my.env";
  LaunchPlan p = plan();
  EXPECT_EQ(env_value(p, "PICKED"), "1");
  EXPECT_EQ(env_value(p, "IGNORED"), "<unset>");
  facts.env["ZRT_ENV_FILE"] = dir.path() + "/missing.env";
  const std::string msg = error_message<ConfigError>([&] { plan(); });
  EXPECT_NE(msg.find("ZRT_ENV_FILE='" + dir.path() + "/missing.env': no such env file"),
            std::string::npos)
      << msg;
}

TEST_F(PlanTest, BadEnvFileLineNamesFileAndLine) {
  options.np = 1;
  const std::string path = dir.write(".zrt_env", "A=1\n\nnot an assignment\n");
  const std::string msg = error_message<ConfigError>([&] { plan(); });
  EXPECT_NE(msg.find(path + ":3: expected 'NAME=VALUE'"), std::string::npos) << msg;
  dir.write(".zrt_env", "1BAD=x\n");
  EXPECT_NE(error_message<ConfigError>([&] { plan(); }).find(":1:"), std::string::npos);
}

TEST_F(PlanTest, MasterAddrIsExported) {
  options.np = 1;
  options.master_addr = "10.1.2.3";
  const LaunchPlan p = plan();
  EXPECT_EQ(env_value(p, "MASTER_ADDR"), "10.1.2.3");
  EXPECT_TRUE(forwards(p.argv, "MASTER_ADDR"));
}

TEST_F(PlanTest, RankCountComesFromFlagsOrGpus) {
  EXPECT_NE(error_message<UsageError>([&] { plan(); }).find("--np N"), std::string::npos);
  facts.visible_gpus = 2;
  EXPECT_EQ(plan().world.describe(), "localhost:0,1");
  options.num_gpus = 3;
  EXPECT_EQ(plan().world.describe(), "localhost:0,1,2");
  options.num_gpus = -1;
  options.include = "localhost:1";
  EXPECT_EQ(plan().world.describe(), "localhost:1");
  options.np = 3;
  options.include = "localhost:2";
  EXPECT_EQ(plan().world.describe(), "localhost:2");
}

TEST_F(PlanTest, FlagConflictsAreUsageErrors) {
  options.np = 2;
  options.num_nodes = 2;
  EXPECT_NE(error_message<UsageError>([&] { plan(); }).find("needs a hostfile"), std::string::npos);
  options.num_nodes = -1;
  options.num_gpus = 2;
  EXPECT_NE(error_message<UsageError>([&] { plan(); }).find("exclusive"), std::string::npos);
  options.num_gpus = -1;
  options.include = "localhost";
  options.exclude = "localhost:0";
  EXPECT_NE(error_message<UsageError>([&] { plan(); }).find("exclusive"), std::string::npos);
  options.exclude.clear();
  options.np = -1;
  options.num_gpus = 1;
  EXPECT_NE(error_message<UsageError>([&] { plan(); }).find("cannot be combined"),
            std::string::npos);
  options.num_gpus = -1;
  options.program.clear();
  EXPECT_NE(error_message<UsageError>([&] { plan(); }).find("no program"), std::string::npos);
}

TEST_F(PlanTest, HostfileSelectionErrorsAreConfigErrors) {
  options.hostfile = dir.write("hosts", "w0 slots=2\n");
  options.include = "w1";
  EXPECT_NE(error_message<ConfigError>([&] { plan(); }).find("unknown host 'w1'"),
            std::string::npos);
  options.include.clear();
  options.np = 3;
  EXPECT_NE(error_message<ConfigError>([&] { plan(); }).find("--np 3 but only 2"),
            std::string::npos);
  options.hostfile = dir.path() + "/absent";
  EXPECT_NE(error_message<ConfigError>([&] { plan(); }).find("cannot read hostfile"),
            std::string::npos);
}

TEST_F(PlanTest, DefaultHostfileIsUsedOnlyWhenPresent) {
  options.np = 1;
  EXPECT_EQ(plan().world.describe(), "localhost:0");
  options.default_hostfile = dir.write("default_hosts", "w0 slots=2\nw1 slots=2\n");
  options.np = -1;
  const LaunchPlan p = plan();
  EXPECT_EQ(p.world.describe(), "w0:0,1 w1:0,1");
  EXPECT_TRUE(has_note(p, "using the default hostfile"));
}

TEST(ShellQuote, QuotesOnlyWhatNeedsIt) {
  EXPECT_EQ(shell_quote("plain-word_1.0/x=y:z,@%+"), "plain-word_1.0/x=y:z,@%+");
  EXPECT_EQ(shell_quote(""), "''");
  EXPECT_EQ(shell_quote("two words"), "'two words'");
  EXPECT_EQ(shell_quote("it's"), "'it'\\''s'");
  EXPECT_EQ(shell_quote("$HOME"), "'$HOME'");
  EXPECT_EQ(shell_join({"sh", "-c", "exit 3"}), "sh -c 'exit 3'");
}

// DeepSpeed's OpenMPI runner puts --launcher_args after its own mpirun options and before the
// exports; so does zrt-launch (after --bind-to/--oversubscribe/--timeout, before -x and -np).
TEST_F(PlanTest, LauncherArgsFollowOurOwnMpirunOptions) {
  options.np = 2;
  options.timeout_s = 30;
  options.oversubscribe = true;
  options.launcher_args = {"--mca", "btl", "tcp,self", "--report-bindings"};
  const LaunchPlan p = plan();
  EXPECT_EQ(p.argv, (Argv{"mpirun", "--bind-to", "none", "--oversubscribe", "--timeout", "30",
                          "--mca", "btl", "tcp,self", "--report-bindings", "-x", "OMP_NUM_THREADS",
                          "-np", "2", "./train", "--deepspeed", "ds config.json"}));
  EXPECT_TRUE(
      has_note(p, "mpirun options from --launcher_args: --mca btl tcp,self --report-bindings"));
  options.launcher_args = {"--mca", "btl_tcp_if_include", "a b"};  // shown shell-quoted
  EXPECT_TRUE(has_note(plan(), "--launcher_args: --mca btl_tcp_if_include 'a b'"));
}

// Note [MCA variables]: shown, not set and not forwarded; an env file's value is an ordinary
// addition instead.
TEST_F(PlanTest, McaVariablesFromTheEnvironmentAreShownNotForwarded) {
  options.np = 1;
  facts.env["OMPI_MCA_btl"] = "tcp,self";
  facts.env["OMPI_MCA_btl_tcp_if_include"] = "eth0";
  facts.env["OMPI_COMM_WORLD_SIZE"] = "4";  // not an MCA setting
  LaunchPlan p = plan();
  EXPECT_EQ(p.mpi_env,
            (EnvVars{{"OMPI_MCA_btl", "tcp,self"}, {"OMPI_MCA_btl_tcp_if_include", "eth0"}}));
  EXPECT_FALSE(forwards(p.argv, "OMPI_MCA_btl"));
  EXPECT_EQ(env_value(p, "OMPI_MCA_btl"), "<unset>");
  EXPECT_TRUE(has_note(p, "mpirun reads OMPI_MCA_btl=tcp,self from the environment"));
  const std::string text = format_dry_run(p);
  EXPECT_NE(text.find("\n# from the environment: export OMPI_MCA_btl=tcp,self\n"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("\nexport OMPI_MCA"), std::string::npos) << text;  // not set again
  dir.write(".zrt_env", "OMPI_MCA_btl=self,vader\n");
  p = plan();
  EXPECT_EQ(p.mpi_env, (EnvVars{{"OMPI_MCA_btl_tcp_if_include", "eth0"}}));
  EXPECT_EQ(env_value(p, "OMPI_MCA_btl"), "self,vader");
  EXPECT_TRUE(forwards(p.argv, "OMPI_MCA_btl"));
}

TEST_F(PlanTest, DryRunText) {
  options.np = 2;
  options.timeout_s = 30;
  options.program = {"/bin/sh", "-c", "echo $OMPI_COMM_WORLD_RANK"};
  facts.is_root = true;
  facts.cores = 1;
  EXPECT_EQ(format_dry_run(plan()),
            "# 2 rank(s) on 1 node: localhost:0,1\n"
            "export OMPI_ALLOW_RUN_AS_ROOT=1\n"
            "export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1\n"
            "export OMP_NUM_THREADS=1\n"
            "mpirun --bind-to none --oversubscribe --timeout 30 -x OMPI_ALLOW_RUN_AS_ROOT "
            "-x OMPI_ALLOW_RUN_AS_ROOT_CONFIRM -x OMP_NUM_THREADS -np 2 /bin/sh -c "
            "'echo $OMPI_COMM_WORLD_RANK'\n");
}

TEST_F(PlanTest, DryRunTextShowsMcaVariablesAsComments) {
  options.np = 1;
  facts.env["OMPI_MCA_btl"] = "tcp,self";
  facts.env["OMPI_MCA_pml"] = "ob1 x";
  options.launcher_args = {"--mca", "btl_tcp_if_include", "10.0.0.0/24"};
  EXPECT_EQ(format_dry_run(plan()),
            "# 1 rank(s) on 1 node: localhost:0\n"
            "# from the environment: export OMPI_MCA_btl=tcp,self\n"
            "# from the environment: export OMPI_MCA_pml='ob1 x'\n"
            "export OMP_NUM_THREADS=8\n"
            "mpirun --bind-to none --mca btl_tcp_if_include 10.0.0.0/24 -x OMP_NUM_THREADS -np 1 "
            "./train --deepspeed 'ds config.json'\n");
}

}  // namespace
}  // namespace zrt::launch
