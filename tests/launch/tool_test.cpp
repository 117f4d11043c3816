// End-to-end runs of the zrt-launch binary: exit codes (0, the job's code, 1 for bad flags, 2 for
// bad input, 128+N for a signal), --dry-run text (also inside a fabricated Slurm allocation), the
// environment mpirun receives (checked with a fake mpirun script), signal forwarding, and real
// Open MPI jobs (skipped without mpirun).
// Every real job passes --timeout so nothing can hang.
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "launch/env_file.h"
#include "launch/host_facts.h"
#include "launch/plan.h"
#include "launch/process.h"
#include "launch_test_util.h"
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

namespace zrt::launch {
namespace {

using test::TempDir;
using Args = std::vector<std::string>;
using EnvChanges = std::map<std::string, std::optional<std::string>>;  // nullopt: unset

struct ToolRun {
  int exit_code = -1;
  double seconds = 0;
  std::string out;
  std::string err;
};

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Starts zrt-launch with `args` in `cwd` (HOME too, so no user env file is read) with the
// current environment changed by `env`; stdout/stderr go to files in `cwd`. Unless `env` sets
// them, the Slurm nodelist variables are unset, so that tests run inside a Slurm job still plan
// local jobs.
pid_t start_tool(const Args& args, const std::string& cwd, EnvChanges env) {
  env.emplace("HOME", cwd);
  for (const char* name :
       {"OMPI_ALLOW_RUN_AS_ROOT", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "OMP_NUM_THREADS",
        "ZRT_ENV_FILE", "DS_ENV_FILE", "SLURM_JOB_NODELIST", "SLURM_NODELIST"}) {
    env.emplace(name, std::nullopt);
  }
  const pid_t pid = fork();
  if (pid == 0) {
    for (const auto& [name, value] : env) {
      value ? setenv(name.c_str(), value->c_str(), 1) : unsetenv(name.c_str());
    }
    if (chdir(cwd.c_str()) != 0) _exit(121);
    if (!freopen((cwd + "/tool.out").c_str(), "w", stdout)) _exit(122);
    if (!freopen((cwd + "/tool.err").c_str(), "w", stderr)) _exit(123);
    std::vector<char*> argv = {const_cast<char*>(ZRT_LAUNCH_TOOL)};
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(ZRT_LAUNCH_TOOL, argv.data());
    _exit(124);
  }
  return pid;
}

ToolRun finish_tool(pid_t pid, const std::string& cwd,
                    std::chrono::steady_clock::time_point start) {
  ToolRun r;
  int status = 0;
  if (waitpid(pid, &status, 0) == pid) r.exit_code = exit_code_from_status(status);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  r.out = read_text(cwd + "/tool.out");
  r.err = read_text(cwd + "/tool.err");
  return r;
}

struct ToolTest : ::testing::Test {
  TempDir dir{"zrt_launch_tool_test"};

  ToolRun run(const Args& args, const EnvChanges& env = {}) {
    const auto start = std::chrono::steady_clock::now();
    return finish_tool(start_tool(args, dir.path(), env), dir.path(), start);
  }

  // An executable shell script in the scratch directory.
  std::string script(const std::string& name, const std::string& body) {
    const std::string path = dir.write(name, "#!/bin/sh\n" + body);
    chmod(path.c_str(), 0755);
    return path;
  }

  // Real mpirun jobs need mpirun and no site hostfile that would send them elsewhere.
  static std::optional<std::string> real_job_skip_reason() {
    const char* path = std::getenv("PATH");
    if (!find_executable("mpirun", path ? path : "")) return "no mpirun on PATH (openmpi-bin)";
    std::error_code ec;
    if (std::filesystem::exists("/job/hostfile", ec)) return "/job/hostfile exists on this machine";
    return std::nullopt;
  }

  // A fake mpirun that writes "ready", then runs for up to 30 s; SIGTERM makes it write `word` to
  // got_term and exit 42.
  std::string term_catching_mpirun(const std::string& word) {
    return script("fake_mpirun", "trap 'echo " + word + " > got_term; exit 42' TERM\n"
                                 "echo up > ready\n"
                                 "i=0; while [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done\n"
                                 "exit 5\n");
  }

  // Starts zrt-launch with `fake_mpirun`, waits until the fake writes "ready", sends `sig` to the
  // launcher alone and waits for it to end.
  ToolRun signal_when_ready(const std::string& fake_mpirun, int sig,
                            const std::vector<std::string>& program = {"true"}) {
    const auto start = std::chrono::steady_clock::now();
    std::vector<std::string> args = {"--np", "1", "--mpirun", fake_mpirun, "--"};
    args.insert(args.end(), program.begin(), program.end());
    const pid_t pid = start_tool(args, dir.path(), {});
    const std::string ready = dir.path() + "/ready";
    for (int i = 0; i < 200 && !std::filesystem::exists(ready); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    EXPECT_TRUE(std::filesystem::exists(ready)) << "the fake mpirun did not start";
    kill(pid, sig);
    return finish_tool(pid, dir.path(), start);
  }
};

// Unsets whatever in this process's environment would change a plan: forwarded names, MCA
// settings, Slurm variables.
EnvChanges without_launch_variables() {
  EnvChanges changes;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string name = std::string(*e).substr(0, std::string(*e).find('='));
    if (is_forwarded_name(name) || name.rfind("OMPI_MCA_", 0) == 0 || name.rfind("SLURM_", 0) == 0)
      changes.emplace(name, std::nullopt);
  }
  return changes;
}

#define SKIP_WITHOUT_MPIRUN() \
  if (const auto reason = real_job_skip_reason()) GTEST_SKIP() << *reason

TEST_F(ToolTest, HelpExitsZero) {
  const ToolRun r = run({"--help"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("--num_gpus"), std::string::npos) << r.out;
}

TEST_F(ToolTest, BadFlagsExitOne) {
  for (const Args& args :
       {Args{"--np", "x", "--", "true"}, Args{"--bogus", "--", "true"}, Args{"--np", "2"},
        Args{"--np", "2", "true"}, Args{"-i", "a", "-e", "b", "--", "true"}}) {
    const ToolRun r = run(args);
    EXPECT_EQ(r.exit_code, 1) << args[0] << ": " << r.err;
    EXPECT_NE(r.err.find("zrt-launch: error:"), std::string::npos) << r.err;
  }
  EXPECT_NE(run({"--np", "x", "--", "true"}).err.find("--np 'x'"), std::string::npos);
}

TEST_F(ToolTest, BadHostfileOrSpecExitsTwo) {
  const std::string bad = dir.write("bad_hosts", "worker-0 slots=2\nworker-0 slots=2\n");
  ToolRun r = run({"--hostfile", bad, "--dry-run", "--", "true"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find(bad + ":2: host 'worker-0' is listed twice"), std::string::npos) << r.err;
  r = run({"--hostfile", dir.path() + "/missing", "--dry-run", "--", "true"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  const std::string good = dir.write("hosts", "worker-0 slots=2\n");
  r = run({"--hostfile", good, "--include", "worker-1", "--dry-run", "--", "true"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("unknown host 'worker-1'"), std::string::npos) << r.err;
  dir.write(".zrt_env", "no equals sign\n");
  r = run({"--np", "1", "--dry-run", "--", "true"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find(".zrt_env:1"), std::string::npos) << r.err;
}

TEST_F(ToolTest, DryRunPrintsTheCommandAndEnvironment) {
  const std::string hosts = dir.write("hosts", "worker-0 slots=4\nworker-1 slots=4\n");
  const ToolRun r =
      run({"-H", hosts, "--num_gpus", "2", "--timeout", "60", "--master_addr", "worker-0",
           "--mpirun", "/opt/mpi/bin/mpirun", "--dry-run", "--", "./train", "--tag", "a b"},
          {{"ZRT_PROBE", "1"}, {"PATH", "/nonexistent"}});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("# 4 rank(s) on 2 nodes: worker-0:0,1 worker-1:0,1\n"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("export MASTER_ADDR=worker-0\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("export OMP_NUM_THREADS="), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("OMPI_ALLOW_RUN_AS_ROOT") != std::string::npos, geteuid() == 0) << r.out;
  EXPECT_NE(r.out.find("/opt/mpi/bin/mpirun --bind-to none --timeout 60 "), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find(" -x ZRT_PROBE "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(" -np 4 --host worker-0:2,worker-1:2 ./train --tag 'a b'\n"),
            std::string::npos)
      << r.out;
}

// Inside a (fabricated) Slurm allocation the nodes come from SLURM_JOB_NODELIST and the slots from
// SLURM_TASKS_PER_NODE; --launcher_args words follow zrt-launch's own mpirun options; an
// OMPI_MCA_* setting is shown, not forwarded; no SLURM_* variable is forwarded.
TEST_F(ToolTest, DryRunInsideASlurmAllocation) {
  if (std::filesystem::exists("/job/hostfile")) GTEST_SKIP() << "/job/hostfile exists";
  EnvChanges env = without_launch_variables();
  env["PATH"] = "/nonexistent";
  env["ZRT_PROBE"] = "1";
  env["OMPI_MCA_pml"] = "ob1";
  env["SLURM_JOB_ID"] = "4242";
  env["SLURM_JOB_NODELIST"] = "gpu-a[1-2],gpu-b07";
  env["SLURM_NODELIST"] = "ignored[1-9]";
  env["SLURM_TASKS_PER_NODE"] = "2(x2),1";
  env["SLURM_NTASKS_PER_NODE"] = "9";
  const ToolRun r = run({"--num_nodes", "2", "--timeout", "60", "--launcher_args",
                         "--mca btl tcp,self --mca btl_tcp_if_include '10.0.0.0/24'", "--mpirun",
                         "/opt/mpi/bin/mpirun", "--dry-run", "--", "./train", "--tag", "a b"},
                        env);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("zrt-launch: Slurm allocation: 3 node(s) from "
                       "SLURM_JOB_NODELIST=gpu-a[1-2],gpu-b07, 2,2,1 task(s) per node from "
                       "SLURM_TASKS_PER_NODE=2(x2),1\n"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("zrt-launch: mpirun reads OMPI_MCA_pml=ob1 from the environment\n"),
            std::string::npos)
      << r.err;
  const std::string root_x =
      geteuid() == 0 ? "-x OMPI_ALLOW_RUN_AS_ROOT -x OMPI_ALLOW_RUN_AS_ROOT_CONFIRM " : "";
  const std::string command =
      "/opt/mpi/bin/mpirun --bind-to none --timeout 60 --mca btl tcp,self --mca "
      "btl_tcp_if_include 10.0.0.0/24 " +
      root_x +
      "-x OMP_NUM_THREADS -x ZRT_PROBE -x ZRT_PROGRESS -np 4 --host gpu-a1:2,gpu-a2:2 ./train "
      "--tag 'a b'\n";
  EXPECT_NE(r.out.find("# 4 rank(s) on 2 nodes: gpu-a1:0,1 gpu-a2:0,1\n"
                       "# from the environment: export OMPI_MCA_pml=ob1\n"),
            std::string::npos)
      << r.out;
  ASSERT_GE(r.out.size(), command.size()) << r.out;
  EXPECT_EQ(r.out.substr(r.out.size() - command.size()), command) << r.out;
}

TEST_F(ToolTest, SlurmErrorsAndPrecedence) {
  EnvChanges env = without_launch_variables();
  env["SLURM_JOB_NODELIST"] = "gpu[1-2";
  ToolRun r = run({"--dry-run", "--", "./train"}, env);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("zrt-launch: error: SLURM_JOB_NODELIST='gpu[1-2': '[' without ']'"),
            std::string::npos)
      << r.err;
  env["SLURM_JOB_NODELIST"] = "gpu[1-2]";
  env["SLURM_TASKS_PER_NODE"] = "4(x2";
  r = run({"--dry-run", "--", "./train"}, env);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("SLURM_TASKS_PER_NODE='4(x2'"), std::string::npos) << r.err;
  // A --hostfile wins: the allocation's variables are not even read.
  const std::string hosts = dir.write("hosts", "w0 slots=2\n");
  r = run({"-H", hosts, "--dry-run", "--", "./train"}, env);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err.find("Slurm"), std::string::npos) << r.err;
  EXPECT_NE(r.out.find(" -np 2 --host w0:2 ./train\n"), std::string::npos) << r.out;
}

TEST_F(ToolTest, UnbalancedLauncherArgsExitOne) {
  const ToolRun r = run({"--np", "1", "--launcher_args", "--mca btl 'tcp", "--dry-run", "--", "p"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("zrt-launch: error: --launcher_args '--mca btl 'tcp': unbalanced single "
                       "quote"),
            std::string::npos)
      << r.err;
}

TEST_F(ToolTest, MissingMpirunNamesThePackage) {
  ToolRun r = run({"--np", "1", "--", "true"}, {{"PATH", "/nonexistent"}});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("apt-get install openmpi-bin"), std::string::npos) << r.err;
  r = run({"--np", "1", "--mpirun", dir.path() + "/nope", "--", "true"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("--mpirun"), std::string::npos) << r.err;
}

// A fake mpirun records what it was given; its exit code becomes the launcher's.
TEST_F(ToolTest, RunsMpirunWithThePlannedArgumentsAndEnvironment) {
  const std::string fake =
      script("fake_mpirun", "printf '%s\\n' \"$@\" > args.txt\nenv > env.txt\nexit 9\n");
  dir.write(".deepspeed_env", "FROM_ENV_FILE=yes\n");
  const ToolRun r = run({"--np", "2", "--timeout", "60", "--mpirun", fake, "--", "/bin/echo", "hi"},
                        {{"NCCL_DEBUG", "INFO"}});
  EXPECT_EQ(r.exit_code, 9) << r.err;
  const std::string args = read_text(dir.path() + "/args.txt");
  EXPECT_NE(args.find("--bind-to\nnone\n--timeout\n60\n"), std::string::npos) << args;
  EXPECT_NE(args.find("-x\nFROM_ENV_FILE\n"), std::string::npos) << args;
  EXPECT_NE(args.find("-x\nNCCL_DEBUG\n"), std::string::npos) << args;
  EXPECT_NE(args.find("-np\n2\n/bin/echo\nhi\n"), std::string::npos) << args;
  const std::string env = read_text(dir.path() + "/env.txt");
  EXPECT_NE(env.find("FROM_ENV_FILE=yes\n"), std::string::npos) << env;
  EXPECT_NE(env.find("NCCL_DEBUG=INFO\n"), std::string::npos) << env;
  EXPECT_NE(env.find("OMP_NUM_THREADS="), std::string::npos) << env;
  EXPECT_EQ(env.find("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1\n") != std::string::npos, geteuid() == 0)
      << env;
  EXPECT_NE(r.err.find("zrt-launch: read env file"), std::string::npos) << r.err;
}

// A program that does not exist is reported by the launcher, before mpirun runs.
TEST_F(ToolTest, MissingProgramIsNamedBeforeLaunching) {
  const std::string fake = script("fake_mpirun", "echo ran > ran.txt\nexit 0\n");
  ToolRun r = run({"--np", "1", "--mpirun", fake, "--", dir.path() + "/no-such-program"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("no-such-program' not found: no such executable file"), std::string::npos)
      << r.err;
  r = run({"--np", "1", "--mpirun", fake, "--", "zrt-no-such-tool"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("no executable of that name on PATH"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(dir.path() + "/ran.txt"));
}

TEST_F(ToolTest, MpirunKilledBySignalGives128PlusSignal) {
  const std::string fake = script("fake_mpirun", "kill -KILL $$\n");
  EXPECT_EQ(run({"--np", "1", "--mpirun", fake, "--", "true"}).exit_code, 128 + SIGKILL);
}

// SIGTERM sent to the launcher reaches mpirun; the launcher says so and exits with the shell's
// code for SIGTERM (mpirun's own, here 42, would hide why the job ended).
TEST_F(ToolTest, ForwardsSigtermToMpirun) {
  const ToolRun r = signal_when_ready(term_catching_mpirun("forwarded"), SIGTERM);
  EXPECT_EQ(r.exit_code, 128 + SIGTERM) << r.err;
  EXPECT_NE(r.err.find("zrt-launch: stopped by SIGTERM"), std::string::npos) << r.err;
  EXPECT_EQ(read_text(dir.path() + "/got_term"), "forwarded\n");
  EXPECT_LT(r.seconds, 20);
}

// A job stopped by SIGTERM: the launcher names the newest complete checkpoint-N of the program's
// --output_dir (checkpoint-6 has no `latest` yet: a save in progress) and how to resume.
TEST_F(ToolTest, SigtermNamesTheNewestCheckpoint) {
  for (const char* step : {"2", "10", "6"}) {
    std::filesystem::create_directories(dir.path() + "/out/checkpoint-" + std::string(step));
  }
  dir.write("out/checkpoint-2/latest", "global_step2");
  dir.write("out/checkpoint-10/latest", "global_step10");
  const ToolRun r = signal_when_ready(term_catching_mpirun("forwarded"), SIGTERM,
                                      {"true", "--output_dir", dir.path() + "/out"});
  EXPECT_EQ(r.exit_code, 128 + SIGTERM) << r.err;
  const std::string newest = dir.path() + "/out/checkpoint-10";
  EXPECT_NE(r.err.find("the newest checkpoint is " + newest + "; to go on, run the same command "
                       "with --resume_from_checkpoint " + newest),
            std::string::npos)
      << r.err;
}

// A launcher killed by SIGKILL forwards nothing; mpirun still gets SIGTERM (PR_SET_PDEATHSIG), so
// the ranks do not go on training without it.
TEST_F(ToolTest, SigkillOfTheLauncherStopsMpirun) {
  const ToolRun r = signal_when_ready(term_catching_mpirun("stopped"), SIGKILL);
  EXPECT_EQ(r.exit_code, 128 + SIGKILL);
  const std::string got = dir.path() + "/got_term";
  for (int i = 0; i < 200 && read_text(got).empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(read_text(got), "stopped\n") << "mpirun went on without its launcher";
}

// Ctrl-C: mpirun exits at once (here 1) while a rank still winds down; the launcher returns only
// after that rank is gone, with the shell's code for SIGINT.
TEST_F(ToolTest, SigintWaitsForTheRanksAndExits130) {
  const std::string fake = script("fake_mpirun",
                                  "(trap '' INT; sleep 1.5; echo gone > rank_done) &\n"
                                  "trap 'exit 1' INT\n"
                                  "echo up > ready\n"
                                  "i=0; while [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done\n"
                                  "exit 5\n");
  const ToolRun r = signal_when_ready(fake, SIGINT);
  EXPECT_EQ(r.exit_code, 130) << r.err;
  EXPECT_EQ(read_text(dir.path() + "/rank_done"), "gone\n") << "returned before the rank ended";
  EXPECT_LT(r.seconds, 20);
}

TEST_F(ToolTest, RealJobSucceeds) {
  SKIP_WITHOUT_MPIRUN();
  const ToolRun r = run({"--np", "2", "--timeout", "60", "--", "/bin/sh", "-c", "exit 0"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

// Open MPI aborts the job when a rank fails and returns that rank's code (measured: 3).
TEST_F(ToolTest, RealJobWithAFailingRankFails) {
  SKIP_WITHOUT_MPIRUN();
  const ToolRun r = run({"--np", "2", "--timeout", "60", "--", "/bin/sh", "-c",
                         "[ \"$OMPI_COMM_WORLD_RANK\" = 1 ] && exit 3; sleep 5; exit 0"});
  EXPECT_NE(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.exit_code, 3) << r.err;
}

// Note [One error line per job] (core/tool_main.cpp): a bad config fails on every rank; the job
// prints it once, without Open MPI's banners, and exits with the input-error code — before MPI
// starts (an unreadable file) and after (a batch triad that does not add up at 2 ranks).
TEST_F(ToolTest, RealJobWithABadConfigPrintsTheErrorOnce) {
  SKIP_WITHOUT_MPIRUN();
  const std::string bad_triad =
      dir.write("ds.json", R"({"train_batch_size": 3, "train_micro_batch_size_per_gpu": 2,
                    "gradient_accumulation_steps": 1,
                    "optimizer": {"type": "AdamW", "params": {"lr": 0.001}}})");
  for (const std::string& config : {dir.path() + "/missing.json", bad_triad}) {
    const ToolRun r = run({"--np", "2", "--timeout", "120", "--", ZRT_TRAIN_TOOL, "--deepspeed",
                           config, "--output_dir", dir.path() + "/out", "--max_steps", "1"});
    EXPECT_EQ(r.exit_code, 2) << r.err;
    size_t count = 0;
    for (size_t at = r.err.find("zrt-train: error:"); at != std::string::npos;
         at = r.err.find("zrt-train: error:", at + 1)) {
      ++count;
    }
    EXPECT_EQ(count, 1u) << config << "\n" << r.err;
    EXPECT_EQ(r.err.find("MPI_ABORT was invoked"), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("exited with non-zero status"), std::string::npos) << r.err;
  }
}

// A bad checkpoint is a user error too: one line per job, exit code 3, no Open MPI banners.
TEST_F(ToolTest, RealJobWithABadCheckpointPrintsTheErrorOnce) {
  SKIP_WITHOUT_MPIRUN();
  std::filesystem::create_directories(dir.path() + "/ckpt/global_step4");
  dir.write("ckpt/latest", "global_step4");
  const ToolRun r = run({"--np", "2", "--timeout", "120", "--", ZRT_TRAIN_TOOL, "--model", "mlp",
                         "--output_dir", dir.path() + "/out", "--max_steps", "1",
                         "--resume_from_checkpoint", dir.path() + "/ckpt"});
  EXPECT_EQ(r.exit_code, 3) << r.err;
  size_t count = 0;
  for (size_t at = r.err.find("zrt-train: error:"); at != std::string::npos;
       at = r.err.find("zrt-train: error:", at + 1)) {
    ++count;
  }
  EXPECT_EQ(count, 1u) << r.err;
  EXPECT_EQ(r.err.find("ORTE_ERROR_LOG"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("MPI_ABORT was invoked"), std::string::npos) << r.err;
}

TEST_F(ToolTest, RealJobWithMoreRanksThanCoresIsOversubscribed) {
  SKIP_WITHOUT_MPIRUN();
  const int np = HostFacts::current().cores + 1;
  const ToolRun r =
      run({"--np", std::to_string(np), "--timeout", "60", "--", "/bin/sh", "-c", "exit 0"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("adding --oversubscribe"), std::string::npos) << r.err;
}

// Forwarded and added variables reach every rank.
TEST_F(ToolTest, RealJobSeesTheEnvironment) {
  SKIP_WITHOUT_MPIRUN();
  dir.write(".zrt_env", "FROM_ZRT_ENV=ok\n");
  const ToolRun r =
      run({"--np", "2", "--timeout", "60", "--", "/bin/sh", "-c",
           "echo \"rank=$OMPI_COMM_WORLD_RANK $ZRT_PROBE $FROM_ZRT_ENV omp=$OMP_NUM_THREADS\""},
          {{"ZRT_PROBE", "probe"}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("rank=0 probe ok omp="), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("rank=1 probe ok omp="), std::string::npos) << r.out;
}

TEST_F(ToolTest, RealJobTimeoutEndsAHungJob) {
  SKIP_WITHOUT_MPIRUN();
  const ToolRun r = run({"--np", "1", "--timeout", "2", "--", "/bin/sleep", "60"});
  EXPECT_NE(r.exit_code, 0) << r.err;
  EXPECT_LT(r.seconds, 30) << r.err;
}

TEST_F(ToolTest, RealJobFromAHostfile) {
  SKIP_WITHOUT_MPIRUN();
  const std::string hosts = dir.write("hosts", "# this machine\nlocalhost slots=2\n");
  const ToolRun r = run(
      {"-H", hosts, "--timeout", "60", "--", "/bin/sh", "-c", "echo size=$OMPI_COMM_WORLD_SIZE"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("size=2"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace zrt::launch
