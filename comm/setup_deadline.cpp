#include "comm/setup_deadline.h"

#include <chrono>
#include <string>

#include "core/error.h"
#include "core/tool_main.h"

namespace zrt::comm {

SetupDeadline::SetupDeadline(int rank, double seconds) {
  watchdog_ = std::thread([this, rank, seconds] {
    std::unique_lock<std::mutex> lock(mutex_);
    if (cv_.wait_for(lock, std::chrono::duration<double>(seconds), [this] { return done_; })) {
      return;
    }
    exit_with_error(
        str("[rank ", rank, "] communication timeout: setting up the MPI communicator "
            "(MPI_Comm_dup, MPI_Comm_split_type over all ranks) did not complete after ", seconds,
            " s (ZRT_COMM_TIMEOUT or zrt.comm_timeout). Some rank cannot reach another: a "
            "firewall between the hosts, or Open MPI using an interface the others cannot reach "
            "(btl_tcp_if_include)."),
        ExitCode::kComm);
  });
}

SetupDeadline::~SetupDeadline() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    done_ = true;
  }
  cv_.notify_all();
  watchdog_.join();
}

}  // namespace zrt::comm
