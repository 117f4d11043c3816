// Test support for binaries run under mpirun (zrt_add_test(... MPI_MAIN WORLD_SIZES ...)):
// the world communicator created by tests/support/mpi_main.cpp.
#pragma once

#include "comm/comm.h"

namespace zrt::test {

// The MPI communicator of this test process (valid during RUN_ALL_TESTS).
comm::Comm& world();

}  // namespace zrt::test
