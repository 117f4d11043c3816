// The MPI backend's StallCheck (Note [Stalled collectives], comm/op_queue.h). Internal to comm/.
#pragma once

#include "zrt/build_config.h"

#if ZRT_WITH_MPI

#define OMPI_SKIP_MPICXX 1
#include <memory>
#include <string>

#include <mpi.h>

#include "comm/op_queue.h"

namespace zrt::comm {

// A check of the collectives on `comm` (not owned: it must stay valid while they run), where this
// process is `rank` of `size`. It calls MPI while another thread is inside a collective, so it
// needs MPI_THREAD_MULTIPLE; `label` names the communicator in its messages ("mpi").
std::shared_ptr<StallCheck> make_mpi_stall_check(MPI_Comm comm, int rank, int size,
                                                 std::string label);

}  // namespace zrt::comm

#endif  // ZRT_WITH_MPI
