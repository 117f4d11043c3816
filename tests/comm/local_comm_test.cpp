// The in-process backend: every collective against closed-form results at world sizes 1–4,
// mismatch detection, timeouts and failure propagation, the counting decorator, init_from_env.
#include "comm/local_comm.h"

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "comm/blocking_call.h"
#include "comm/counting_comm.h"
#include "comm/desync_check.h"
#include "comm/init.h"
#include "comm/op_queue.h"
#include "core/error.h"
#include "tests/comm/collective_checks.h"
#include "tests/comm/sub_comm_checks.h"

namespace zrt::comm {
namespace {

class LocalWorldTest : public ::testing::TestWithParam<int> {};

TEST_P(LocalWorldTest, EveryCollectiveMatchesClosedForm) {
  run_local_world(GetParam(), [](Comm& comm) { test::check_everything(comm); });
}

TEST_P(LocalWorldTest, AllToAllAndSubCommunicators) {
  run_local_world(GetParam(), [](Comm& comm) {
    test::check_all_to_all_everywhere(comm);
    test::check_split(comm);
  });
}

// Emulated hosts: consecutive ranks share one; split_by_host() gives them.
TEST(LocalWorld, EmulatedHostsSplitByHost) {
  CommOptions options;
  options.local_ranks_per_host = 3;
  run_local_world(
      6,
      [](Comm& comm) {
        EXPECT_EQ(comm.local_size(), 3);
        EXPECT_EQ(comm.local_rank(), comm.rank() % 3);
        test::check_split(comm);
        std::shared_ptr<Comm> host = comm.split_by_host();
        at::Tensor ranks = at::empty({3}, at::kInt);
        host->all_gather(ranks, at::full({1}, comm.rank(), at::kInt));
        const int first = comm.rank() / 3 * 3;
        EXPECT_TRUE(at::equal(ranks, at::arange(first, first + 3, at::kInt)));
      },
      options);
  EXPECT_THROW(
      {
        CommOptions bad;
        bad.local_ranks_per_host = 4;
        make_local_world(6, bad);
      },
      ConfigError);
}

TEST_P(LocalWorldTest, AsyncCollectivesOverlapAndComplete) {
  run_local_world(GetParam(), [](Comm& comm) { test::check_async_overlap(comm); });
}

TEST_P(LocalWorldTest, LargeTensors) {
  // > 64 MiB in total per collective.
  run_local_world(GetParam(), [](Comm& comm) {
    test::check_all_reduce(comm, at::kFloat, (64 << 20) / 4 + 5, ReduceOp::kSum);
    test::check_all_gather(comm, at::kFloat, (16 << 20) / 4 + 3);
  });
}

TEST_P(LocalWorldTest, CountingDecoratorUsesRingAccounting) {
  const int n = GetParam();
  run_local_world(n, [n](Comm& inner) {
    auto counting = std::make_shared<CountingComm>(std::shared_ptr<Comm>(&inner, [](Comm*) {}));
    at::Tensor a = at::ones({1000}, at::kFloat);
    counting->all_reduce(a);
    at::Tensor rs_in = at::ones({10L * n}, at::kBFloat16);
    at::Tensor rs_out = at::empty({10}, at::kBFloat16);
    counting->reduce_scatter(rs_out, rs_in);
    at::Tensor ag_out = at::empty({6L * n}, at::kDouble);
    counting->all_gather(ag_out, at::zeros({6}, at::kDouble));
    at::Tensor b = at::zeros({8}, at::kLong);
    counting->broadcast(b, 0);
    counting->barrier();
    const CommStats s = counting->stats();
    const double f = static_cast<double>(n - 1) / n;
    EXPECT_DOUBLE_EQ(s[OpType::kAllReduce].wire_bytes, 2 * f * 4000);
    EXPECT_DOUBLE_EQ(s[OpType::kReduceScatter].wire_bytes, f * 2 * 10 * n);
    EXPECT_DOUBLE_EQ(s[OpType::kAllGather].wire_bytes, f * 8 * 6 * n);
    EXPECT_DOUBLE_EQ(s[OpType::kBroadcast].wire_bytes, n > 1 ? 64 : 0);
    EXPECT_EQ(s[OpType::kBarrier].calls, 1);
    EXPECT_EQ(s.total_calls(), 5);
    EXPECT_EQ(s[OpType::kAllReduce].elements, 1000);
    // Variable-size pieces: S minus this rank's own piece.
    std::vector<int64_t> counts(n);
    int64_t total = 0;
    for (int r = 0; r < n; ++r) total += (counts[r] = r + 1);
    const int me = inner.rank();
    counting->reduce_scatter_v(at::empty({counts[me]}), at::ones({total}), counts);
    counting->all_gather_v(at::empty({total}), at::ones({counts[me]}), counts);
    const CommStats v = counting->stats();
    const double expect_v = n > 1 ? 4.0 * (total - counts[me]) : 0.0;
    EXPECT_DOUBLE_EQ(v[OpType::kReduceScatterV].wire_bytes, expect_v);
    EXPECT_DOUBLE_EQ(v[OpType::kAllGatherV].wire_bytes, expect_v);
    counting->reset();
    EXPECT_EQ(counting->stats().total_calls(), 0);
    EXPECT_EQ(counting->backend_name(), "counting(local)");
  });
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, LocalWorldTest, ::testing::Values(1, 2, 3, 4));

TEST(LocalWorld, MismatchedCollectivesFailOnEveryRankNamingBoth) {
  std::vector<std::string> messages(2);
  EXPECT_THROW(run_local_world(2,
                               [&](Comm& comm) {
                                 at::Tensor t = at::ones({comm.rank() == 0 ? 4 : 5});
                                 try {
                                   comm.all_reduce(t);
                                 } catch (const CommError& e) {
                                   messages[comm.rank()] = e.what();
                                   throw;
                                 }
                               }),
               CommError);
  for (const auto& m : messages) {
    EXPECT_NE(m.find("collective mismatch"), std::string::npos) << m;
    EXPECT_NE(m.find("numel=4"), std::string::npos) << m;
    EXPECT_NE(m.find("numel=5"), std::string::npos) << m;
  }
}

// ZRT_DEBUG_COLLECTIVES: a mismatch or a skipped collective is an error naming both calls.
TEST(DesyncCheck, MismatchedAndSkippedCollectivesAreNamed) {
  std::vector<std::string> messages(3);
  EXPECT_THROW(run_local_world(3,
                               [&](Comm& inner) {
                                 DesyncCheckComm comm(std::shared_ptr<Comm>(&inner, [](Comm*) {}));
                                 at::Tensor ok = at::ones({4});
                                 comm.all_reduce(ok);  // the same everywhere: passes
                                 EXPECT_TRUE(at::equal(ok, at::full({4}, 3.0f)));
                                 try {
                                   if (comm.rank() == 2) {
                                     comm.barrier();  // skips the all_reduce below
                                   } else {
                                     comm.all_reduce(ok, ReduceOp::kMax);
                                   }
                                 } catch (const CommError& e) {
                                   messages[comm.rank()] = e.what();
                                   throw;
                                 }
                               }),
               CommError);
  for (const auto& m : messages) {
    EXPECT_NE(m.find("desynchronisation detected"), std::string::npos) << m;
    EXPECT_NE(m.find("all_reduce(max) #2"), std::string::npos) << m;
    EXPECT_NE(m.find("rank 2 called barrier #2"), std::string::npos) << m;
  }
}

TEST(LocalWorld, SkippedCollectiveTimesOutNamingTheOp) {
  CommOptions opts;
  opts.timeout_seconds = 0.5;
  const auto start = std::chrono::steady_clock::now();
  std::string message;
  try {
    run_local_world(
        2,
        [&](Comm& comm) {
          if (comm.rank() == 1) return;  // skips the collective
          at::Tensor t = at::ones({3});
          comm.all_reduce(t);
        },
        opts);
    FAIL() << "no timeout";
  } catch (const CommError& e) {
    message = e.what();
  }
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(secs, 5.0);
  EXPECT_NE(message.find("communication timeout"), std::string::npos) << message;
  EXPECT_NE(message.find("all_reduce(sum) #1"), std::string::npos) << message;
  EXPECT_NE(message.find("numel=3"), std::string::npos) << message;
}

TEST(LocalWorld, ExceptionOnOneRankReleasesTheOthersQuickly) {
  const auto start = std::chrono::steady_clock::now();
  try {
    run_local_world(3, [](Comm& comm) {
      if (comm.rank() == 2) throw ConfigError("rank 2 hit a bad config");
      at::Tensor t = at::ones({3});
      comm.all_reduce(t);  // would wait forever for rank 2 without the abort
    });
    FAIL() << "no exception";
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()), "rank 2 hit a bad config");  // the root cause wins
  }
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 5.0);
}

TEST(LocalWorld, BrokenCommunicatorRefusesLaterCalls) {
  CommOptions opts;
  opts.timeout_seconds = 0.3;
  auto comms = make_local_world(2, opts);
  at::Tensor t = at::ones({2});
  EXPECT_THROW(comms[0]->all_reduce(t), CommError);  // rank 1 never joins
  try {
    comms[0]->all_reduce(t);
    FAIL() << "broken communicator accepted a collective";
  } catch (const CommError& e) {
    EXPECT_NE(std::string(e.what()).find("broken"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(any_comm_broken());
}

// Note [The caller runs what it waits for] (comm/op_queue.h), on the queue itself.
OpInfo barrier_info(uint64_t seq) {
  OpInfo info;
  info.seq = seq;
  return info;
}

TEST(OpQueueCallerRuns, ABlockingCallRunsOnTheCallersThreadOnlyWhenTheQueueIsIdle) {
  const std::thread::id me = std::this_thread::get_id();
  std::thread::id ran_on;
  auto record = [&] { ran_on = std::this_thread::get_id(); };
  {
    OpQueue q("test", 0, 5.0, /*caller_runs=*/true);
    {
      const BlockingCall blocking;
      auto work = q.submit(barrier_info(1), record, {});
      EXPECT_TRUE(work->is_completed());  // done before submit returned
      work->wait();
    }
    EXPECT_EQ(ran_on, me);
    q.submit(barrier_info(2), record, {})->wait();  // asynchronous: the queue's thread
    EXPECT_NE(ran_on, me);
    const CommTimes t = q.times();
    EXPECT_EQ(t.collectives, 2u);
  }
  {
    OpQueue q("test", 0, 5.0, /*caller_runs=*/false);
    const BlockingCall blocking;
    q.submit(barrier_info(1), record, {})->wait();
    EXPECT_NE(ran_on, me);
  }
}

TEST(OpQueueCallerRuns, ABlockingCallBehindAQueuedOneWaitsItsTurn) {
  OpQueue q("test", 0, 5.0, /*caller_runs=*/true);
  std::atomic<bool> release{false};
  std::mutex m;
  std::vector<int> order;
  std::thread::id second_ran_on;
  auto first = q.submit(
      barrier_info(1),
      [&] {
        while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        std::lock_guard<std::mutex> lock(m);
        order.push_back(1);
      },
      {});
  std::shared_ptr<Work> second;
  {
    const BlockingCall blocking;
    second = q.submit(
        barrier_info(2),
        [&] {
          std::lock_guard<std::mutex> lock(m);
          order.push_back(2);
          second_ran_on = std::this_thread::get_id();
        },
        {});
  }
  EXPECT_FALSE(second->is_completed());  // queued behind the first, not run here
  release = true;
  second->wait();
  first->wait();
  EXPECT_EQ(order, (std::vector<int>{1, 2}));
  EXPECT_NE(second_ran_on, std::this_thread::get_id());
}

// Another thread's collective, queued while a caller runs one, starts when that one ends (not at
// its deadline); the caller's wait counts as exposed time.
TEST(OpQueueCallerRuns, ACollectiveQueuedMeanwhileStartsWhenTheCallersEnds) {
  OpQueue q("test", 0, 60.0, /*caller_runs=*/true);
  const auto start = std::chrono::steady_clock::now();
  double other_done = -1;
  std::thread other([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
    q.submit(barrier_info(2), [] {}, {})->wait();
    other_done =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  });
  {
    const BlockingCall blocking;
    q.submit(barrier_info(1), [] { std::this_thread::sleep_for(std::chrono::milliseconds(500)); },
             {})
        ->wait();
  }
  other.join();
  EXPECT_GE(other_done, 0.45);
  EXPECT_LT(other_done, 5.0) << "the queue's thread slept until the first one's deadline";
  EXPECT_GE(q.times().exposed_seconds, 0.45);
}

// Note [Waited time is a union]: two threads waiting for one collective at once add its time
// once, so the time waited never exceeds the time the collectives took.
TEST(OpQueueTimes, ConcurrentWaitersCountOnce) {
  OpQueue q("test", 0, 60.0, /*caller_runs=*/false);
  auto work = q.submit(barrier_info(1),
                       [] { std::this_thread::sleep_for(std::chrono::milliseconds(300)); }, {});
  std::thread other([&] { work->wait(); });
  work->wait();
  other.join();
  const CommTimes t = q.times();
  EXPECT_GE(t.busy_seconds, 0.29);
  EXPECT_GE(t.exposed_seconds, 0.2);
  EXPECT_LE(t.exposed_seconds, t.busy_seconds + 0.05) << "two waits of one collective counted twice";
}

TEST(OpQueueCallerRuns, AFailureOnTheCallersThreadBreaksTheQueueLikeAnyOther) {
  OpQueue q("test", 3, 5.0, /*caller_runs=*/true);
  std::shared_ptr<Work> work;
  {
    const BlockingCall blocking;
    work = q.submit(barrier_info(1), [] { throw CommError("injected"); }, {});
  }
  try {
    work->wait();
    FAIL() << "no error";
  } catch (const CommError& e) {  // the caller learns which collective failed
    EXPECT_EQ(std::string(e.what()), "[rank 3] barrier #1 failed: injected");
  }
  EXPECT_TRUE(q.broken());
  EXPECT_THROW(q.submit(barrier_info(2), [] {}, {}), CommError);
}

// The caller is inside the collective and cannot be told: the queue's thread ends the process
// with the timeout message and the communication exit code.
TEST(OpQueueCallerRunsDeathTest, ACallersCollectivePastItsDeadlineEndsTheProcess) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        OpQueue q("test", 1, 0.3, /*caller_runs=*/true);
        const BlockingCall blocking;
        q.submit(barrier_info(7), [] { std::this_thread::sleep_for(std::chrono::seconds(30)); },
                 {});
      },
      ::testing::ExitedWithCode(4),
      "error: \\[rank 1\\] communication timeout: barrier #7 on the test communicator did not "
      "complete after");
}

TEST(CommValidation, RejectsBadArgumentsWithClearErrors) {
  auto comm = make_local_world(1)[0];
  auto expect_msg = [](const std::function<void()>& f, const std::string& needle) {
    try {
      f();
      ADD_FAILURE() << "no error, expected: " << needle;
    } catch (const CommError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  at::Tensor nc = at::ones({4, 4}).t();
  expect_msg([&] { comm->all_reduce(nc); }, "must be contiguous");
  expect_msg([&] { comm->all_reduce(at::Tensor()); }, "undefined");
  expect_msg([&] { comm->all_reduce(at::ones({2}, at::kComplexFloat)); }, "unsupported dtype");
  expect_msg([&] { comm->all_reduce(at::ones({2}, at::kInt), ReduceOp::kAvg); },
             "avg needs a floating dtype");
  expect_msg([&] { comm->all_reduce(at::ones({2}, at::kBool)); }, "Bool tensors support only");
  expect_msg([&] { comm->reduce_scatter(at::ones({3}), at::ones({4})); },
             "input must have world_size x output elements");
  expect_msg([&] { comm->all_gather(at::ones({3}), at::ones({2})); },
             "output must have world_size x input elements");
  expect_msg([&] { comm->all_gather(at::ones({2}, at::kDouble), at::ones({2})); },
             "output dtype Double differs from input dtype Float");
  expect_msg([&] { comm->broadcast(at::ones({2}), 1); }, "root 1 is not a rank");
}

TEST(InitFromEnv, AloneIsAWorldOfOne) {
  ::unsetenv("OMPI_COMM_WORLD_SIZE");
  ::unsetenv("PMI_SIZE");
  ::unsetenv("PMIX_RANK");
  ::unsetenv("WORLD_SIZE");
  auto comm = init_from_env();
  EXPECT_EQ(comm->size(), 1);
  EXPECT_EQ(comm->rank(), 0);
  at::Tensor t = at::full({3}, 2.0);
  comm->all_reduce(t, ReduceOp::kAvg);
  EXPECT_TRUE(at::equal(t, at::full({3}, 2.0)));
}

TEST(InitFromEnv, TorchrunEnvironmentExplainsHowToLaunch) {
  ::setenv("RANK", "1", 1);
  ::setenv("WORLD_SIZE", "4", 1);
  try {
    init_from_env();
    FAIL() << "accepted a torchrun environment";
  } catch (const ConfigError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("mpirun -np 4"), std::string::npos) << m;
    EXPECT_NE(m.find("zrt-launch --np 4"), std::string::npos) << m;
  }
  ::setenv("RANK", "7", 1);
  EXPECT_THROW(detect_launch(), ConfigError);  // rank outside the world
  ::unsetenv("RANK");
  ::unsetenv("WORLD_SIZE");
}

TEST(InitFromEnv, TimeoutFromEnvironment) {
  ::setenv("ZRT_COMM_TIMEOUT", "12.5", 1);
  EXPECT_DOUBLE_EQ(comm_options_from_env().timeout_seconds, 12.5);
  ::setenv("ZRT_COMM_TIMEOUT", "-1", 1);
  EXPECT_THROW(comm_options_from_env(), ConfigError);
  ::setenv("ZRT_COMM_TIMEOUT", "soon", 1);
  EXPECT_THROW(comm_options_from_env(), ConfigError);
  ::unsetenv("ZRT_COMM_TIMEOUT");
  EXPECT_DOUBLE_EQ(comm_options_from_env().timeout_seconds, 600.0);
}

}  // namespace
}  // namespace zrt::comm
