// Fault tests: runs comm_fault_prog under mpirun with a short communication timeout and checks
// that a rank that throws, exits, skips a collective or stalls ends the whole job non-zero within
// the deadline, with an error naming the collective where one is expected; and runs
// out_of_step_prog, whose ZeRO-3 ranks run different experts, which must end within seconds
// (different experts each in their own unit) or train as at stage 0 (the experts in one unit).
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <utility>

#include <gtest/gtest.h>

#include "tests/support/run_command.h"

namespace {

struct JobResult {
  int exit_code = -1;
  double seconds = 0;
  std::string output;
};

// `env`: extra "NAME=value " settings for every rank; `program`'s arguments follow it.
JobResult run_job(const std::string& scenario, int comm_timeout, const std::string& env = "",
                  const std::string& program = ZRT_FAULT_PROG, int ranks = 2) {
  const std::string cmd =
      std::string("OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 ZRT_LOG_LEVEL=warn ") +
      env + "ZRT_COMM_TIMEOUT=" + std::to_string(comm_timeout) + " " ZRT_MPIEXEC " -np " +
      std::to_string(ranks) + " --oversubscribe --bind-to none --timeout 90 " + program + " " +
      scenario;
  const auto start = std::chrono::steady_clock::now();
  const auto c = zrt::test::run_command(cmd);
  JobResult r;
  r.output = c.output;
  r.exit_code = c.exit_code >= 0 ? c.exit_code : 128 + c.signal;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}

// A failing or dying rank must end the job within seconds even with a long communication
// timeout: the others must not wait for their deadline.
TEST(CommFaults, RankThatThrowsEndsTheJob) {
  JobResult r = run_job("throw", 100);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_LT(r.seconds, 15) << r.output;
  EXPECT_NE(r.output.find("rank 1 gives up (injected)"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("finished normally"), std::string::npos) << r.output;
}

TEST(CommFaults, RankThatExitsEndsTheJob) {
  JobResult r = run_job("exit", 100);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_LT(r.seconds, 15) << r.output;
}

// Without the stall check (Note [Stalled collectives]) a skipped collective meets the deadline.
TEST(CommFaults, SkippedCollectiveTimesOutNamingTheOp) {
  JobResult r = run_job("skip", 3, "ZRT_COMM_STALL_CHECK=0 ");
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_LT(r.seconds, 30) << r.output;
  EXPECT_NE(r.output.find("communication timeout"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("all_reduce(sum) #2 dtype=Float numel=16"), std::string::npos)
      << r.output;
}

// With it, ranks stuck in different collectives end the job within seconds, not at the deadline
// (100 s here), each naming its own call and its neighbour's; with ZRT_MPI_CALLER_RUNS=0 the
// verdict is thrown to the waiting caller instead of ending the process from the queue's thread.
TEST(CommFaults, RanksInDifferentCollectivesFailWithinSeconds) {
  const std::pair<std::string, std::string> cases[] = {
      {"skip", "ranks out of step on the mpi communicator: this rank is in all_reduce(sum) #2 "
               "dtype=Float numel=16 but rank 1 is in barrier #2"},
      {"extra", "but rank 1 is in all_gather #2 dtype=Float numel=8 for an extra step of rank 1"}};
  for (const std::string env : {"", "ZRT_MPI_CALLER_RUNS=0 "}) {
    for (const auto& [scenario, message] : cases) {
      const JobResult r = run_job(scenario, 100, env);
      const std::string where = env + scenario + ": ";
      EXPECT_EQ(r.exit_code, 4) << where << r.output;
      EXPECT_LT(r.seconds, 20) << where << r.output;
      EXPECT_NE(r.output.find(message), std::string::npos) << where << r.output;
      EXPECT_EQ(r.output.find("communication timeout"), std::string::npos) << where << r.output;
    }
  }
}

// A rank that is only late (5 s, past the 1 s stall check) is in the same collective: no verdict.
TEST(CommFaults, ALateRankIsNotOutOfStep) {
  JobResult r = run_job("slow", 100, "ZRT_COMM_STALL_CHECK=1 ");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("rank 0 finished normally"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("rank 1 finished normally"), std::string::npos) << r.output;
}

// Rank 0's blocking all_reduce runs on its own thread (Note [The caller runs what it waits
// for]): the queue's thread ends the job with the message; with ZRT_MPI_CALLER_RUNS=0 the queue's
// thread runs it and the caller throws the same message.
TEST(CommFaults, StalledRankTimesOutNamingTheOp) {
  for (const std::string env : {"", "ZRT_MPI_CALLER_RUNS=0 "}) {
    JobResult r = run_job("stall", 3, env);
    EXPECT_EQ(r.exit_code, 4) << env << r.output;
    EXPECT_LT(r.seconds, 30) << env << r.output;  // the stalled rank would sleep 120 s
    EXPECT_NE(r.output.find("comm_fault_prog: error: [rank 0] communication timeout: "
                            "all_reduce(sum) #2"),
              std::string::npos)
        << env << r.output;
  }
}

// ZeRO-3, each expert its own unit, experts of different sizes: rank r runs experts 0..r, or
// rank 0 runs one more than the others. Every rank's gathers and reductions go out of step; each
// job must end within seconds (the communication timeout is 100 s) with an error naming where the
// ranks parted: a unit tag that does not match, or the stall check's two collectives.
TEST(ZeroOutOfStep, RanksRunningDifferentExpertsFailWithinSeconds) {
  for (int ranks : {2, 3}) {
    for (const std::string scenario : {"count", "skip"}) {
      JobResult r = run_job(scenario, 100, "", ZRT_OUT_OF_STEP_PROG, ranks);
      const std::string where = scenario + " at " + std::to_string(ranks) + " ranks: ";
      EXPECT_EQ(r.exit_code, 4) << where << r.output;
      EXPECT_LT(r.seconds, 40) << where << r.output;
      EXPECT_NE(r.output.find("out of step"), std::string::npos) << where << r.output;
      EXPECT_NE(r.output.find("unit "), std::string::npos) << where << r.output;
      EXPECT_NE(r.output.find("(expert"), std::string::npos) << where << r.output;
      EXPECT_EQ(r.output.find("communication timeout"), std::string::npos) << where << r.output;
      EXPECT_EQ(r.output.find("step 2 loss"), std::string::npos) << where << r.output;
    }
  }
}

// Every "rank R/W step S loss L" line of a job's output, keyed "R/W step S".
std::map<std::string, double> losses(const std::string& output) {
  std::map<std::string, double> out;
  size_t at = 0;
  while ((at = output.find("rank ", at)) != std::string::npos) {
    int rank = 0, world = 0, step = 0;
    double loss = 0;
    if (std::sscanf(output.c_str() + at, "rank %d/%d step %d loss %lf", &rank, &world, &step,
                    &loss) == 4) {
      out[std::to_string(rank) + "/" + std::to_string(world) + " step " + std::to_string(step)] =
          loss;
    }
    at += 5;
  }
  return out;
}

// The experts inside one ShardUnit (DeepSpeed's leaf module), or made a leaf by the config: the
// ranks run different experts and train as at stage 0. At stages 1 and 2 the same job checks unused parameters: each rank
// leaves the experts it did not run without a gradient, and the bucketed reductions count them as
// zeros on that rank (DDP's find_unused_parameters), so every rank still reduces every bucket.
TEST(ZeroOutOfStep, ExpertsInOneUnitTrainAsAtStageZero) {
  for (int ranks : {2, 3}) {
    const JobResult plain = run_job("leaf 0", 100, "", ZRT_OUT_OF_STEP_PROG, ranks);
    ASSERT_EQ(plain.exit_code, 0) << plain.output;
    const auto want = losses(plain.output);
    ASSERT_EQ(want.size(), 3u * ranks) << plain.output;
    for (const std::string job_args : {"leaf 1", "leaf 2", "leaf 3", "leaf_config 3"}) {
      const JobResult job = run_job(job_args, 100, "", ZRT_OUT_OF_STEP_PROG, ranks);
      const std::string where = job_args + " at " + std::to_string(ranks) + " ranks: ";
      ASSERT_EQ(job.exit_code, 0) << where << job.output;
      const auto got = losses(job.output);
      ASSERT_EQ(got.size(), want.size()) << where << job.output;
      for (const auto& [key, loss] : want) {
        ASSERT_EQ(got.count(key), 1u) << where << key << "\n" << job.output;
        EXPECT_NEAR(got.at(key), loss, 1e-5 * std::max(1.0, std::abs(loss))) << where << key;
      }
    }
  }
}

}  // namespace
