// Test support for binaries run under mpirun (zrt_add_test(... MPI_MAIN WORLD_SIZES ...)):
// the world communicator created by tests/support/mpi_main.cpp.
#pragma once

#include <string>

#include "comm/comm.h"

namespace zrt::test {

// The MPI communicator of this test process (valid during RUN_ALL_TESTS).
comm::Comm& world();

// Collective: a fresh directory under /tmp that every rank of `comm` agrees on (rank 0 makes it
// with mkdtemp, the name is broadcast). It is removed when the test binary ends, whatever the
// tests did; a test may remove it earlier (rank 0).
std::string shared_temp_dir(comm::Comm& comm, const std::string& label);

}  // namespace zrt::test
