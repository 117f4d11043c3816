// Start-up: how this process was launched, and the communicator that goes with it.
#pragma once

#include <memory>
#include <string>

#include "comm/comm.h"
#include "comm/options.h"

namespace zrt::comm {

struct LaunchInfo {
  enum class Launcher { kNone, kMpi, kTorchrun };
  Launcher launcher = Launcher::kNone;
  int rank = 0;
  int size = 1;
  int local_rank = 0;
  std::string source;  // which variables were read, for messages

  std::string describe() const;
};

// Reads the launcher's environment: OMPI_COMM_WORLD_* (Open MPI), PMI_RANK/PMI_SIZE or PMIX_RANK
// (MPICH, Slurm, PMIx), RANK/WORLD_SIZE (torchrun). Throws ConfigError on inconsistent values.
LaunchInfo detect_launch();

// CommOptions with the environment applied: ZRT_COMM_TIMEOUT (seconds, > 0) and
// ZRT_DEBUG_COLLECTIVES. A config file's "zrt" section is applied on top by the config module.
CommOptions comm_options_from_env();

// Collective under a launcher: every rank must call it. Under mpirun (or another MPI launcher)
// builds the MPI backend — for device kCUDA the NCCL backend, bootstrapped over MPI, with the CUDA
// device set to the local rank. Without a launcher returns a world of one. A torchrun-style
// environment (RANK/WORLD_SIZE > 1, no MPI variables) is a ConfigError explaining how to launch.
// Also sets the logging rank.
std::shared_ptr<Comm> init_from_env(const CommOptions& options = comm_options_from_env(),
                                    at::DeviceType device = at::kCPU);

}  // namespace zrt::comm
