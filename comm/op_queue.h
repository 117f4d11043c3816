// OpQueue: runs the collectives of one CPU communicator one at a time, in the order they were
// submitted, on a dedicated thread (or, for a blocking call finding it idle, on the caller's:
// Note [The caller runs what it waits for]), and turns a collective that does not complete in
// time into a CommError or, where the caller itself is stuck in it, the end of the process.
//
// Used by the MPI and in-process backends. It gives them asynchronous Work handles (the caller
// keeps computing while the collective runs on the queue's thread) and the no-silent-hang rule of
// DESIGN.md: see Note [Collective deadlines].
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "comm/comm.h"

namespace zrt::comm {

// Note [Collective deadlines]
// A blocking MPI call cannot be interrupted, so collectives execute on the queue's thread and the
// caller waits on a condition variable (for the exception, see the next Note). wait() throws
// CommError once the collective that is *currently executing* has been running longer than the
// timeout (if the caller's own op is still
// queued, the one blocking the queue is the culprit and is the one named). The message names the
// op, dtype, element count, rank and the time waited. After that the communicator is broken:
// every later call fails immediately, the stuck thread is detached at destruction, and MPI is not
// finalized (that would hang too); the process is expected to exit non-zero, which makes mpirun
// tear the job down. A collective whose body throws also breaks the communicator, since the
// ranks can no longer be assumed to be in step.
//
// Note [The caller runs what it waits for]
// A collective submitted by a blocking call (the blocking forms of Comm mark the calling thread
// with a BlockingCall, comm/blocking_call.h) is run by submit() on the caller's thread when the
// queue is idle — nothing pending, nothing running — if the queue was made with `caller_runs`;
// otherwise it is queued as any other. Handing it over costs two thread wake-ups per
// collective, and on a host with more busy threads than cores each wake-up waits for a time
// slice: at 4 ranks on 2 cores a 1-4 MiB reduce-scatter took over twice as long through the
// queue's thread as on the caller's (docs/PERFORMANCE.md). Order is kept: the queue's thread
// starts nothing while the caller runs one, and whatever another thread queued meanwhile starts
// when it ends. The deadline still holds, enforced by the queue's thread:
// the caller is inside a blocking call and cannot be told, so a collective that outlives its
// deadline ends the process with the same message (zrt::exit_with_error, exit code 4 and
// MPI_Abort through the abort hook) instead of a CommError thrown to the caller. Asynchronous
// collectives that the caller overlaps with compute are picked up by the queue's thread as before.
// Note [Stalled collectives]
// Ranks that issue different collectives at the same point (a rank skipped one, or ran a module
// the others did not) wait for each other forever: each is inside a call that only the matching
// call on the other ranks can complete. The deadline above ends that, but only after
// zrt.comm_timeout (600 s by default). A StallCheck ends it within seconds at no cost to a healthy
// collective: once the running collective has run for `stall_seconds` (2 s; ZRT_COMM_STALL_CHECK
// sets it, 0 turns it off), the thread watching it (a caller in wait(), or the queue's thread
// while a caller runs it) asks the backend's check, and again every half second. The MPI check
// (comm/mpi_stall_check.h) sends this rank's description of the collective (sequence number, op,
// dtype, count, context) to its two ring neighbours, once per collective, and reads what they
// sent; two ranks stuck at the same sequence number in different collectives can never complete,
// so that is the verdict: the communicator breaks with a message naming both calls, thrown to the
// waiting caller or, where the caller itself is stuck inside MPI, ending the process as the
// deadline does. A collective that is merely slow (a rank late from a checkpoint write) is the
// same call on both sides and is left alone; ranks that never arrive still meet the deadline.
class StallCheck {
 public:
  virtual ~StallCheck() = default;
  // Called with the collective that has been running for `stall_seconds` or longer (by one thread
  // at a time). Returns why the ranks cannot complete it, or an empty string.
  virtual std::string check(const OpInfo& running) = 0;
};

// ZRT_COMM_STALL_CHECK (seconds, default 2; 0: never check).
double stall_check_seconds_from_env();

class OpQueue {
 public:
  // `label` is used in messages ("mpi", "local"); `rank` is this process's rank. `caller_runs`:
  // see Note [The caller runs what it waits for] (off for backends whose collectives must stay
  // interruptible by a CommError, e.g. the in-process one, whose ranks are threads of one test).
  OpQueue(std::string label, int rank, double timeout_seconds, bool caller_runs = false);
  // Drains pending collectives (bounded by the timeout) and joins the thread; detaches it when
  // the queue is broken or the drain does not finish in time.
  ~OpQueue();

  OpQueue(const OpQueue&) = delete;
  OpQueue& operator=(const OpQueue&) = delete;

  // Enqueues `body` (run on the queue's thread), or runs it before returning (Note [The caller
  // runs what it waits for]). `keep_alive` tensors are referenced until the collective
  // completed. Throws CommError if the queue is already broken.
  // `stall`: the check of Note [Stalled collectives] for this collective (none if null).
  std::shared_ptr<Work> submit(const OpInfo& info, std::function<void()> body,
                               std::vector<at::Tensor> keep_alive,
                               std::shared_ptr<StallCheck> stall = nullptr);

  // Blocks until every submitted collective completed (throws like Work::wait()).
  void drain();

  bool broken() const;
  double timeout_seconds() const;
  // Busy time of the queue's thread and time callers waited (see CommTimes).
  CommTimes times() const;

  struct Core;  // shared with the Work handles and the thread (defined in op_queue.cpp)

 private:
  std::shared_ptr<Core> core_;
};

// True once any communicator in this process broke (timeout or failed collective). MPI uses it to
// skip MPI_Finalize at exit.
bool any_comm_broken();

}  // namespace zrt::comm
