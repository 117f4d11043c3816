// Host discovery: local host names, physical core counting from a sysfs-like tree (hyperthreads
// count once), GPU counting from CUDA_VISIBLE_DEVICES or /dev/nvidiaN, and exit-code mapping.
#include "launch/host_facts.h"

#include <filesystem>
#include <string>

#include <gtest/gtest.h>

#include "launch/process.h"
#include "launch_test_util.h"
#include <sys/wait.h>

namespace zrt::launch {
namespace {

using test::TempDir;

// cpuN/topology/{physical_package_id,core_id} under `root`.
void add_cpu(const TempDir& root, int cpu, int package, int core) {
  const std::string topo = "cpu" + std::to_string(cpu) + "/topology";
  std::filesystem::create_directories(root.path() + "/" + topo);
  root.write(topo + "/physical_package_id", std::to_string(package) + "\n");
  root.write(topo + "/core_id", std::to_string(core) + "\n");
}

TEST(HostFacts, LocalHostNames) {
  for (const char* host : {"localhost", "127.0.0.1", "::1", "node-a", "node-a.example.org"}) {
    EXPECT_TRUE(is_local_host(host, "node-a.example.org")) << host;
  }
  for (const char* host : {"node-b", "node", "node-a.other", "10.0.0.1"}) {
    EXPECT_FALSE(is_local_host(host, "node-a.example.org")) << host;
  }
  EXPECT_FALSE(is_local_host("node-a", ""));
}

TEST(HostFacts, PhysicalCoresCountHyperthreadsOnce) {
  const TempDir sys("zrt_host_facts_sys");
  // Two packages with two cores each, every core with two hardware threads.
  int cpu = 0;
  for (int thread = 0; thread < 2; ++thread) {
    for (int package = 0; package < 2; ++package) {
      for (int core = 0; core < 2; ++core) add_cpu(sys, cpu++, package, core);
    }
  }
  EXPECT_EQ(count_physical_cores({0, 1, 2, 3, 4, 5, 6, 7}, sys.path()), 4);
  EXPECT_EQ(count_physical_cores({0, 4}, sys.path()), 1);  // two threads of one core
  EXPECT_EQ(count_physical_cores({0, 1}, sys.path()), 2);
  // Unreadable topology: one core per CPU, never zero.
  EXPECT_EQ(count_physical_cores({0, 9}, sys.path()), 2);
  EXPECT_EQ(count_physical_cores({}, sys.path()), 1);
  EXPECT_GE(HostFacts::current().cores, 1);
}

TEST(HostFacts, VisibleGpus) {
  const TempDir dev("zrt_host_facts_dev");
  for (const char* name : {"nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm", "nvidia-caps"}) {
    dev.write(name, "");
  }
  EXPECT_EQ(count_visible_gpus({}, dev.path()), 2);
  EXPECT_EQ(count_visible_gpus({{"CUDA_VISIBLE_DEVICES", "3,5,7"}}, dev.path()), 3);
  EXPECT_EQ(count_visible_gpus({{"CUDA_VISIBLE_DEVICES", ""}}, dev.path()), 0);
  EXPECT_EQ(count_visible_gpus({}, dev.path() + "/missing"), 0);
}

TEST(Process, ExitCodesLikeAShell) {
  EXPECT_EQ(exit_code_from_status(0), 0);
  EXPECT_EQ(exit_code_from_status(3 << 8), 3);
  EXPECT_EQ(exit_code_from_status(9), 128 + 9);    // killed by SIGKILL
  EXPECT_EQ(exit_code_from_status(15), 128 + 15);  // killed by SIGTERM
}

TEST(Process, FindExecutable) {
  EXPECT_EQ(find_executable("sh", "/nonexistent:/bin:/usr/bin").value_or(""), "/bin/sh");
  EXPECT_EQ(find_executable("/bin/sh", ""), "/bin/sh");
  EXPECT_FALSE(find_executable("no-such-program-zrt", "/bin:/usr/bin"));
  const TempDir dir("zrt_find_executable");
  const std::string plain = dir.write("plain", "data\n");  // written without an x bit
  EXPECT_FALSE(find_executable(plain, "/bin"));
  EXPECT_FALSE(find_executable("plain", dir.path()));
  EXPECT_FALSE(find_executable("bin", "/"));  // a directory
}

}  // namespace
}  // namespace zrt::launch
