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
  for (const std::string env : {"", "ZRT_MPI_CALLER_RUNS=0 "}) {
    JobResult skip = run_job("skip", 100, env);
    EXPECT_EQ(skip.exit_code, 4) << env << skip.output;
    EXPECT_LT(skip.seconds, 20) << env << skip.output;
    EXPECT_NE(skip.output.find("ranks out of step on the mpi communicator: this rank is in "
                               "all_reduce(sum) #2 dtype=Float numel=16 but rank 1 is in barrier #2"),
              std::string::npos)
        << env << skip.output;
    JobResult extra = run_job("extra", 100, env);
    EXPECT_EQ(extra.exit_code, 4) << env << extra.output;
    EXPECT_LT(extra.seconds, 20) << env << extra.output;
    EXPECT_NE(extra.output.find("but rank 1 is in all_gather #2 dtype=Float numel=8 for an extra "
                                "step of rank 1"),
              std::string::npos)
        << env << extra.output;
    EXPECT_EQ(extra.output.find("communication timeout"), std::string::npos) << extra.output;
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

}  // namespace
