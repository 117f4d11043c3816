// SetupDeadline: a watchdog over the set-up of a communicator, whose blocking calls cannot be
// interrupted.
#pragma once

#include <condition_variable>
#include <mutex>
#include <thread>

namespace zrt::comm {

// Note [Deadline of the communicator's set-up]
// MPI_Comm_dup and MPI_Comm_split_type are collectives: with a peer that cannot be reached (a
// firewall between hosts, a wrong interface) they block forever, before the OpQueue that enforces
// Note [Collective deadlines] exists. A blocked MPI call cannot be interrupted, so a watchdog
// thread ends the process with the communication exit code and a message naming what hung,
// unless the object is destroyed (the set-up finished) within `seconds`.
class SetupDeadline {
 public:
  SetupDeadline(int rank, double seconds);
  ~SetupDeadline();
  SetupDeadline(const SetupDeadline&) = delete;
  SetupDeadline& operator=(const SetupDeadline&) = delete;

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread watchdog_;
};

}  // namespace zrt::comm
