// Fault tests: runs comm_fault_prog under mpirun with a short communication timeout and checks
// that a rank that throws, exits, skips a collective or stalls ends the whole job non-zero within
// the deadline, with an error naming the collective where one is expected.
#include <chrono>
#include <string>

#include <gtest/gtest.h>

#include "tests/support/run_command.h"

namespace {

struct JobResult {
  int exit_code = -1;
  double seconds = 0;
  std::string output;
};

// `env`: extra "NAME=value " settings for every rank.
JobResult run_job(const std::string& scenario, int comm_timeout, const std::string& env = "") {
  const std::string cmd =
      std::string("OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 ") + env +
      "ZRT_COMM_TIMEOUT=" + std::to_string(comm_timeout) +
      " " ZRT_MPIEXEC " -np 2 --oversubscribe --bind-to none --timeout 60 " ZRT_FAULT_PROG " " +
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

TEST(CommFaults, SkippedCollectiveTimesOutNamingTheOp) {
  JobResult r = run_job("skip", 3);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_LT(r.seconds, 30) << r.output;
  EXPECT_NE(r.output.find("communication timeout"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("all_reduce(sum) #2 dtype=Float numel=16"), std::string::npos)
      << r.output;
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

}  // namespace
