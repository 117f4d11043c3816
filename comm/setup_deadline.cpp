#include "comm/setup_deadline.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/error.h"
#include "core/logging.h"

namespace zrt::comm {

SetupDeadline::SetupDeadline(int rank, double seconds) {
  watchdog_ = std::thread([this, rank, seconds] {
    std::unique_lock<std::mutex> lock(mutex_);
    if (cv_.wait_for(lock, std::chrono::duration<double>(seconds), [this] { return done_; })) {
      return;
    }
    const std::string message = str(
        "zrt: error: [rank ", rank, "] communication timeout: setting up the MPI communicator "
        "(MPI_Comm_dup, MPI_Comm_split_type over all ranks) did not complete after ", seconds,
        " s (ZRT_COMM_TIMEOUT or zrt.comm_timeout). Some rank cannot reach another: a firewall "
        "between the hosts, or Open MPI using an interface the others cannot reach "
        "(btl_tcp_if_include).");
    std::fprintf(stderr, "%s\n", message.c_str());
    std::fflush(stderr);
    append_to_rank_log_file(message);
    std::_Exit(static_cast<int>(ExitCode::kComm));
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
