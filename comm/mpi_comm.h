// MPI backend for CPU tensors (compiled when ZRT_WITH_MPI). MPI headers stay private to
// comm/mpi_comm.cpp.
#pragma once

#include <memory>
#include <string>

#include "comm/comm.h"
#include "comm/options.h"

namespace zrt::comm {

// Algorithms the MPI backend can use for reduce_scatter, all_gather and all_reduce. kAuto picks per call
// from measurements on this class of machine (docs/PERFORMANCE.md, comm section); the environment
// variable ZRT_MPI_ALGO=native|ring|auto overrides it.
enum class MpiAlgo { kAuto, kNative, kRing };

// Collective: every process of MPI_COMM_WORLD must call this. Initialises MPI on first use
// (MPI_THREAD_MULTIPLE requested, MPI_THREAD_SERIALIZED required) and returns a communicator over
// a duplicate of MPI_COMM_WORLD whose collectives run on their own thread (comm/op_queue.h),
// except that a blocking call finding that thread idle runs on the caller's thread (Note [The
// caller runs what it waits for]; ZRT_MPI_CALLER_RUNS=0 turns this off).
std::shared_ptr<Comm> make_mpi_comm(const CommOptions& options = {});

// Whether MPI support was compiled in.
bool mpi_available();

// "Open MPI v4.1.4, ..." (MPI_Get_library_version), or "not compiled in".
std::string mpi_library_version();

}  // namespace zrt::comm
