// Slurm allocations: host-list expansion (ranges, zero padding, several bracket groups, errors),
// SLURM_TASKS_PER_NODE and the other slot sources, and the world select_world builds from
// fabricated Slurm variables, narrowed by the usual flags.
#include "launch/slurm.h"

#include <algorithm>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/error.h"
#include "launch/plan.h"
#include "launch_test_util.h"

namespace zrt::launch {
namespace {

using test::error_message;
using test::TempDir;
using Names = std::vector<std::string>;
using Counts = std::vector<int>;

Names expand(const std::string& text) { return expand_slurm_nodelist(text, "SLURM_JOB_NODELIST"); }

std::string nodelist_error(const std::string& text) {
  return error_message<ConfigError>([&] { expand(text); });
}

std::string tasks_error(const std::string& text) {
  return error_message<ConfigError>(
      [&] { expand_slurm_tasks_per_node(text, "SLURM_TASKS_PER_NODE"); });
}

TEST(SlurmNodelist, PlainNamesAndRanges) {
  EXPECT_EQ(expand("login"), (Names{"login"}));
  EXPECT_EQ(expand("a,b.cluster,c_1"), (Names{"a", "b.cluster", "c_1"}));
  EXPECT_EQ(expand("node[01-04,07],gpu-a[1-2],login"),
            (Names{"node01", "node02", "node03", "node04", "node07", "gpu-a1", "gpu-a2", "login"}));
  EXPECT_EQ(expand("n[3]"), (Names{"n3"}));
  EXPECT_EQ(expand("n[5,1,3]"), (Names{"n5", "n1", "n3"}));  // Slurm's order, not sorted
  EXPECT_EQ(expand("n[1-2]-ib"), (Names{"n1-ib", "n2-ib"}));
}

// The width of a range is that of its lower bound: padded ranges stay padded past 9, unpadded
// ones simply grow.
TEST(SlurmNodelist, ZeroPaddingKeepsTheWidth) {
  EXPECT_EQ(expand("n[08-11]"), (Names{"n08", "n09", "n10", "n11"}));
  EXPECT_EQ(expand("n[8-11]"), (Names{"n8", "n9", "n10", "n11"}));
  EXPECT_EQ(expand("n[0098-0101]"), (Names{"n0098", "n0099", "n0100", "n0101"}));
  EXPECT_EQ(expand("n[0-1]"), (Names{"n0", "n1"}));
}

TEST(SlurmNodelist, SeveralBracketGroupsExpandLeftToRight) {
  EXPECT_EQ(expand("r[1-2]n[1-2]"), (Names{"r1n1", "r1n2", "r2n1", "r2n2"}));
  EXPECT_EQ(expand("r[1,3]n[01-02]x,solo"),
            (Names{"r1n01x", "r1n02x", "r3n01x", "r3n02x", "solo"}));
}

TEST(SlurmNodelist, ErrorsNameTheVariableAndTheText) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"a,,b", "empty host name"},
      {"a,", "empty host name"},
      {",a", "empty host name"},
      {"node[01-04", "'[' without ']'"},
      {"node01-04]", "']' without '['"},
      {"n[1-[2]]", "nested '['"},
      {"n[]", "empty brackets"},
      {"n[a-b]", "bad range 'a-b'"},
      {"n[1-]", "bad range '1-'"},
      {"n[1,,2]", "bad range ''"},
      {"n[1-2-3]", "bad range '1-2-3'"},
      {"n[4-2]", "range '4-2' runs backwards"},
      {"n[1-200000]", "more than 100000 nodes"},
      {"a b", "unexpected character ' '"},
      {"n(1)", "unexpected character '('"},
      {"a,b,a", "node 'a' is listed twice"},
      {"n[1-3],n2", "node 'n2' is listed twice"},
      {"n[01-02],n[1-2]", ""},  // n01 and n1 are different nodes
  };
  for (const auto& [text, why] : cases) {
    if (why.empty()) {
      EXPECT_EQ(expand(text).size(), 4u) << text;
      continue;
    }
    const std::string message = nodelist_error(text);
    EXPECT_NE(message.find("SLURM_JOB_NODELIST='" + text + "'"), std::string::npos) << message;
    EXPECT_NE(message.find(why), std::string::npos) << text << ": " << message;
  }
  EXPECT_NE(nodelist_error("").find("SLURM_JOB_NODELIST is empty"), std::string::npos);
  // The product of two groups is bounded too, not only each range.
  EXPECT_NE(nodelist_error("r[1-1000]n[1-1000]").find("more than 100000 nodes"), std::string::npos);
}

TEST(SlurmTasksPerNode, Formats) {
  auto tasks = [](const std::string& text) {
    return expand_slurm_tasks_per_node(text, "SLURM_TASKS_PER_NODE");
  };
  EXPECT_EQ(tasks("4"), (Counts{4}));
  EXPECT_EQ(tasks("2(x3),1"), (Counts{2, 2, 2, 1}));
  EXPECT_EQ(tasks("1,3(x2),8(x1)"), (Counts{1, 3, 3, 8}));
  EXPECT_EQ(tasks("16(x2)"), (Counts{16, 16}));
}

TEST(SlurmTasksPerNode, Errors) {
  for (const std::string& text : {"", "0", "-1", "a", "2(x0)", "2(x)", "2x3", "2(3)", "2(x3",
                                  "(x3)", "2(x3),", ",1", "1 ,2", "2(x3)1"}) {
    const std::string message = tasks_error(text);
    EXPECT_NE(message.find("SLURM_TASKS_PER_NODE='" + text + "': bad item"), std::string::npos)
        << text << ": " << message;
  }
  EXPECT_NE(tasks_error("1(x200000)").find("more than 100000 nodes"), std::string::npos);
}

std::string describe(const std::optional<SlurmAllocation>& allocation) {
  return allocation ? allocation->world.describe() : "<none>";
}

TEST(SlurmAllocation, NoneOutsideSlurm) {
  EXPECT_FALSE(slurm_allocation({}).has_value());
  EXPECT_FALSE(slurm_allocation({{"SLURM_JOB_NODELIST", ""}, {"PATH", "/bin"}}).has_value());
  // Tasks without nodes are not an allocation either.
  EXPECT_FALSE(slurm_allocation({{"SLURM_TASKS_PER_NODE", "2"}}).has_value());
}

TEST(SlurmAllocation, NodesAndTasksPerNode) {
  const auto a =
      slurm_allocation({{"SLURM_JOB_NODELIST", "node[01-04]"}, {"SLURM_TASKS_PER_NODE", "2(x4)"}});
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->world.describe(), "node01:0,1 node02:0,1 node03:0,1 node04:0,1");
  EXPECT_EQ(a->notes, (Names{"Slurm allocation: 4 node(s) from SLURM_JOB_NODELIST=node[01-04], 2 "
                             "task(s) per node from SLURM_TASKS_PER_NODE=2(x4)"}));
  const auto uneven =
      slurm_allocation({{"SLURM_JOB_NODELIST", "a,b[1-3]"}, {"SLURM_TASKS_PER_NODE", "2(x3),1"}});
  EXPECT_EQ(describe(uneven), "a:0,1 b1:0,1 b2:0,1 b3:0");
  EXPECT_NE(uneven->notes[0].find("2,2,2,1 task(s) per node"), std::string::npos);
}

// SLURM_JOB_NODELIST is the job's; the older SLURM_NODELIST is used when it is absent.
TEST(SlurmAllocation, NodelistVariables) {
  EXPECT_EQ(describe(slurm_allocation({{"SLURM_NODELIST", "old[1-2]"}})), "old1:0 old2:0");
  EXPECT_EQ(
      describe(slurm_allocation({{"SLURM_JOB_NODELIST", "new1"}, {"SLURM_NODELIST", "old[1-2]"}})),
      "new1:0");
  const auto a = slurm_allocation({{"SLURM_NODELIST", "old1"}});
  EXPECT_NE(a->notes[0].find("1 node(s) from SLURM_NODELIST=old1"), std::string::npos);
}

// Note [Slurm slot counts]: the first source present wins.
TEST(SlurmAllocation, SlotSourcesInOrder) {
  EnvMap env = {{"SLURM_JOB_NODELIST", "n[1-2]"},
                {"SLURM_TASKS_PER_NODE", "3(x2)"},
                {"SLURM_NTASKS_PER_NODE", "2"},
                {"SLURM_GPUS_ON_NODE", "4"},
                {"SLURM_GPUS_PER_NODE", "8"}};
  EXPECT_EQ(describe(slurm_allocation(env)), "n1:0,1,2 n2:0,1,2");
  env.erase("SLURM_TASKS_PER_NODE");
  EXPECT_EQ(describe(slurm_allocation(env)), "n1:0,1 n2:0,1");
  EXPECT_NE(slurm_allocation(env)->notes[0].find("2 task(s) per node from SLURM_NTASKS_PER_NODE"),
            std::string::npos);
  env.erase("SLURM_NTASKS_PER_NODE");
  EXPECT_EQ(describe(slurm_allocation(env)), "n1:0,1,2,3 n2:0,1,2,3");
  env.erase("SLURM_GPUS_ON_NODE");
  EXPECT_EQ(describe(slurm_allocation(env)), "n1:0,1,2,3,4,5,6,7 n2:0,1,2,3,4,5,6,7");
  EXPECT_NE(slurm_allocation(env)->notes[0].find("from SLURM_GPUS_PER_NODE"), std::string::npos);
  env.erase("SLURM_GPUS_PER_NODE");
  const auto one = slurm_allocation(env);
  EXPECT_EQ(describe(one), "n1:0 n2:0");
  EXPECT_NE(one->notes[0].find("1 slot per node (none of SLURM_TASKS_PER_NODE"), std::string::npos)
      << one->notes[0];
}

// `--gpus-per-node=a100:4` gives a typed count: not a plain number, so it is skipped (with a
// note) for the next source.
TEST(SlurmAllocation, TypedGpuCountIsIgnoredWithANote) {
  const auto a = slurm_allocation({{"SLURM_JOB_NODELIST", "n1"},
                                   {"SLURM_GPUS_ON_NODE", "x"},
                                   {"SLURM_GPUS_PER_NODE", "a100:4"}});
  EXPECT_EQ(describe(a), "n1:0");
  ASSERT_EQ(a->notes.size(), 3u);
  EXPECT_NE(a->notes[1].find("SLURM_GPUS_ON_NODE='x' is not a plain GPU count: ignored"),
            std::string::npos);
  EXPECT_NE(a->notes[2].find("SLURM_GPUS_PER_NODE='a100:4' is not a plain GPU count"),
            std::string::npos);
}

TEST(SlurmAllocation, MalformedVariablesAreConfigErrors) {
  auto message = [](const EnvMap& env) {
    return error_message<ConfigError>([&] { slurm_allocation(env); });
  };
  EXPECT_NE(message({{"SLURM_JOB_NODELIST", "n[1-2"}}).find("SLURM_JOB_NODELIST='n[1-2'"),
            std::string::npos);
  EXPECT_NE(message({{"SLURM_NODELIST", "n[2-1]"}}).find("SLURM_NODELIST='n[2-1]'"),
            std::string::npos);
  EXPECT_NE(message({{"SLURM_JOB_NODELIST", "n[1-2]"}, {"SLURM_TASKS_PER_NODE", "2(x"}})
                .find("SLURM_TASKS_PER_NODE='2(x': bad item '2(x'"),
            std::string::npos);
  EXPECT_NE(message({{"SLURM_JOB_NODELIST", "n[1-3]"}, {"SLURM_TASKS_PER_NODE", "2(x2)"}})
                .find("SLURM_TASKS_PER_NODE='2(x2)' gives counts for 2 node(s) but "
                      "SLURM_JOB_NODELIST lists 3"),
            std::string::npos);
  EXPECT_NE(message({{"SLURM_JOB_NODELIST", "n1"}, {"SLURM_NTASKS_PER_NODE", "two"}})
                .find("SLURM_NTASKS_PER_NODE='two' is not a positive integer"),
            std::string::npos);
}

// select_world inside an allocation: no hostfile means the allocation, narrowed by the flags.
struct SlurmWorldTest : ::testing::Test {
  TempDir dir{"zrt_slurm_test"};
  HostFacts facts;
  LaunchOptions options;
  std::vector<std::string> notes;

  SlurmWorldTest() {
    facts.hostname = "login-1";
    facts.cores = 8;
    facts.cwd = dir.path();
    facts.env = {{"HOME", dir.path()},
                 {"SLURM_JOB_NODELIST", "gpu[01-03]"},
                 {"SLURM_TASKS_PER_NODE", "4(x3)"}};
    options.default_hostfile = dir.path() + "/no-such-default-hostfile";
    options.program = {"./train"};
  }

  std::string world() {
    notes.clear();
    return select_world(options, facts, &notes).describe();
  }
};

TEST_F(SlurmWorldTest, TheAllocationIsTheWorld) {
  EXPECT_EQ(world(), "gpu01:0,1,2,3 gpu02:0,1,2,3 gpu03:0,1,2,3");
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_EQ(notes[0].rfind("Slurm allocation: 3 node(s) from SLURM_JOB_NODELIST=gpu[01-03]", 0),
            0u);
}

TEST_F(SlurmWorldTest, FlagsNarrowItAsWithAHostfile) {
  options.num_nodes = 2;
  options.num_gpus = 2;
  EXPECT_EQ(world(), "gpu01:0,1 gpu02:0,1");
  options.num_nodes = -1;
  options.num_gpus = -1;
  options.np = 6;
  EXPECT_EQ(world(), "gpu01:0,1,2,3 gpu02:0,1");
  options.np = -1;
  options.include = "gpu02:1,3@gpu03";
  EXPECT_EQ(world(), "gpu02:1,3 gpu03:0,1,2,3");
  options.include.clear();
  options.exclude = "gpu01";
  EXPECT_EQ(world(), "gpu02:0,1,2,3 gpu03:0,1,2,3");
}

TEST_F(SlurmWorldTest, AskingForMoreThanTheAllocationIsAnError) {
  options.np = 13;
  EXPECT_NE(error_message<ConfigError>([&] { world(); }).find("--np 13 but only 12 slot(s)"),
            std::string::npos);
  options.np = -1;
  options.num_nodes = 4;
  EXPECT_NE(error_message<ConfigError>([&] { world(); }).find("--num_nodes 4 but only 3 host(s)"),
            std::string::npos);
  options.num_nodes = -1;
  options.include = "gpu04";
  EXPECT_NE(error_message<ConfigError>([&] { world(); }).find("unknown host 'gpu04'"),
            std::string::npos);
}

// A hostfile, given or the default one, wins over the allocation.
TEST_F(SlurmWorldTest, HostfilesComeFirst) {
  options.hostfile = dir.write("hosts", "w0 slots=2\n");
  EXPECT_EQ(world(), "w0:0,1");
  EXPECT_TRUE(std::none_of(notes.begin(), notes.end(), [](const std::string& n) {
    return n.find("Slurm") != std::string::npos;
  }));
  options.hostfile.clear();
  options.default_hostfile = dir.write("default_hosts", "w1 slots=1\n");
  EXPECT_EQ(world(), "w1:0");
}

TEST_F(SlurmWorldTest, MalformedAllocationFailsTheLaunch) {
  facts.env["SLURM_TASKS_PER_NODE"] = "4(x3";
  EXPECT_NE(error_message<ConfigError>([&] { world(); }).find("SLURM_TASKS_PER_NODE='4(x3'"),
            std::string::npos);
}

// The plan for an allocation: --host lists the nodes (the launcher runs on a login node here).
TEST_F(SlurmWorldTest, PlanPlacesRanksOnTheNodes) {
  options.num_gpus = 2;
  const LaunchPlan plan = make_plan(options, facts, "mpirun");
  EXPECT_FALSE(plan.single_node);
  EXPECT_EQ(plan.argv,
            (std::vector<std::string>{"mpirun", "--bind-to", "none", "-x", "OMP_NUM_THREADS", "-np",
                                      "6", "--host", "gpu01:2,gpu02:2,gpu03:2", "./train"}));
  // A single-node allocation on this very node runs as a local job.
  facts.hostname = "gpu01.cluster";
  facts.env["SLURM_JOB_NODELIST"] = "gpu01";
  facts.env["SLURM_TASKS_PER_NODE"] = "2";
  options.num_gpus = -1;
  EXPECT_TRUE(make_plan(options, facts, "mpirun").single_node);
}

}  // namespace
}  // namespace zrt::launch
