// Options of the communication layer (leaf header: includes only core/).
#pragma once

namespace zrt::comm {

struct CommOptions {
  // Deadline of every blocking collective, in seconds. ZRT_COMM_TIMEOUT overrides the default;
  // the config key "zrt.comm_timeout" overrides both.
  double timeout_seconds = 600.0;
  // Before each collective the ranks agree on (op, dtype, shape); see ZRT_DEBUG_COLLECTIVES.
  bool debug_collectives = false;
  // The in-process backend only (comm/local_comm.h): ranks per emulated host, consecutive ranks
  // sharing one (local_rank(), split_by_host()); 0: every rank on one host.
  int local_ranks_per_host = 0;
};

}  // namespace zrt::comm
