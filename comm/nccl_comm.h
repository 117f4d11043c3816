// NCCL backend for CUDA tensors (compiled when ZRT_WITH_NCCL). NCCL and CUDA headers stay
// private to comm/nccl_comm.cpp.
//
// Note [NCCL stream ordering]
// Collectives run on one dedicated communication stream per communicator. Before launching, the
// comm stream waits (cudaStreamWaitEvent) for an event recorded on the caller's current stream,
// so the collective sees everything queued before the call; Work::wait() makes the caller's
// current stream wait for the collective's completion event. The host never synchronises on the
// hot path. Tensors used on the comm stream are registered with the caching allocator
// (recordStream) so their memory is not reused before the collective finished.
//
// Timeouts: a watchdog thread polls the completion events of outstanding collectives; one that
// runs past the timeout makes the watchdog call ncclCommAbort (unblocking the GPU) and log the
// op; the communicator is then broken and every later call, wait() or is_completed() throws
// CommError naming the op, so the process exits non-zero and mpirun ends the job.
#pragma once

#include <memory>
#include <string>

#include "comm/comm.h"
#include "comm/options.h"

namespace zrt::comm {

// Whether NCCL support was compiled in.
bool nccl_available();
// "2.28.9" or "not compiled in".
std::string nccl_version();

// Collective over all MPI ranks (the NCCL unique id is broadcast with MPI). Selects CUDA device
// local_rank % device_count. Throws CommError when NCCL is not compiled in or no GPU is visible.
std::shared_ptr<Comm> make_nccl_comm(const CommOptions& options = {});

}  // namespace zrt::comm
