// In-process backend: N ranks as threads of one process, doing real collectives through shared
// memory. It makes multi-rank unit tests of ZeRO code fast and possible without mpirun, and is
// the world of one when a program runs without a launcher.
#pragma once

#include <functional>
#include <memory>

#include "comm/comm.h"
#include "comm/options.h"

namespace zrt::comm {

class LocalWorld;

// Creates a world of `size` in-process ranks; `comms[r]` is rank r's communicator. Each
// communicator must be used from one thread at a time (typically thread r). A collective that
// differs between ranks (op, dtype, element count, root) fails on every rank with a CommError
// naming both calls, instead of hanging.
std::vector<std::shared_ptr<Comm>> make_local_world(int size, const CommOptions& options = {});

// Runs fn(comm) on `size` threads, one per rank, and joins them. If any rank throws, the first
// exception (by rank) is rethrown after every thread finished; ranks left waiting in a
// collective fail with CommError once the world notices (abort), not after the full timeout.
void run_local_world(int size, const std::function<void(Comm&)>& fn,
                     const CommOptions& options = {});

}  // namespace zrt::comm
