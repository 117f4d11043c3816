#include "comm/init.h"

#include "comm/desync_check.h"
#include "comm/local_comm.h"
#include "comm/mpi_comm.h"
#include "comm/nccl_comm.h"
#include "core/env.h"
#include "core/error.h"
#include "core/logging.h"

namespace zrt::comm {

std::string LaunchInfo::describe() const {
  const char* name = launcher == Launcher::kMpi        ? "mpi"
                     : launcher == Launcher::kTorchrun ? "torchrun"
                                                       : "none";
  return str("launcher=", name, " rank=", rank, " world_size=", size, " local_rank=", local_rank,
             source.empty() ? "" : " (from " + source + ")");
}

LaunchInfo detect_launch() {
  LaunchInfo info;
  auto check_rank = [](LaunchInfo& i) {
    ZRT_CHECK_AS(ConfigError, i.size >= 1 && i.rank >= 0 && i.rank < i.size,
                 "inconsistent launcher environment: rank ", i.rank, ", world size ", i.size, " (",
                 i.source, ")");
  };
  if (auto size = env::get_int(env::kOmpiSize)) {
    info.launcher = LaunchInfo::Launcher::kMpi;
    info.size = static_cast<int>(*size);
    info.rank = static_cast<int>(env::get_int(env::kOmpiRank).value_or(-1));
    info.local_rank = static_cast<int>(env::get_int(env::kOmpiLocalRank).value_or(0));
    info.source = "OMPI_COMM_WORLD_*";
    check_rank(info);
    return info;
  }
  if (auto size = env::get_int(env::kPmiSize)) {
    info.launcher = LaunchInfo::Launcher::kMpi;
    info.size = static_cast<int>(*size);
    info.rank = static_cast<int>(env::get_int(env::kPmiRank).value_or(-1));
    info.local_rank = static_cast<int>(env::get_int(env::kMpiLocalRank).value_or(0));
    info.source = "PMI_RANK/PMI_SIZE";
    check_rank(info);
    return info;
  }
  if (auto rank = env::get_int(env::kPmixRank)) {
    // PMIx alone does not export the size; MPI itself will tell.
    info.launcher = LaunchInfo::Launcher::kMpi;
    info.rank = static_cast<int>(*rank);
    info.size = info.rank + 1;
    info.source = "PMIX_RANK";
    return info;
  }
  if (auto size = env::get_int(env::kTorchWorldSize)) {
    info.launcher = LaunchInfo::Launcher::kTorchrun;
    info.size = static_cast<int>(*size);
    info.rank = static_cast<int>(env::get_int(env::kTorchRank).value_or(0));
    info.local_rank = static_cast<int>(env::get_int(env::kTorchLocalRank).value_or(0));
    info.source = "RANK/WORLD_SIZE";
    check_rank(info);
  }
  return info;
}

CommOptions comm_options_from_env() {
  CommOptions options;
  if (auto t = env::get_double(env::kCommTimeout)) {
    ZRT_CHECK_AS(ConfigError, *t > 0, env::kCommTimeout,
                 " must be a positive number of seconds, got ", *t);
    options.timeout_seconds = *t;
  }
  if (auto d = env::get_bool(env::kDebugCollectives)) options.debug_collectives = *d;
  return options;
}

std::shared_ptr<Comm> init_from_env(const CommOptions& options, at::DeviceType device) {
  const LaunchInfo launch = detect_launch();
  ZRT_CHECK_AS(ConfigError, device == at::kCPU || device == at::kCUDA,
               "init_from_env: unsupported device type ", c10::DeviceTypeName(device));
  if (launch.launcher == LaunchInfo::Launcher::kTorchrun && launch.size > 1) {
    throw ConfigError(
        str("found a torchrun-style environment (", launch.describe(),
            ") but no MPI launcher variables. ZeroRT ranks are started by mpirun: run `mpirun -np ",
            launch.size, " PROGRAM ARGS` or `zrt-launch --np ", launch.size, " -- PROGRAM ARGS`"));
  }
  std::shared_ptr<Comm> comm;
  if (launch.launcher == LaunchInfo::Launcher::kMpi) {
    ZRT_CHECK_AS(ConfigError, mpi_available(), "launched by an MPI launcher (", launch.source,
                 ") but this ZeroRT build has no MPI support");
    if (device == at::kCUDA) {
      comm = make_nccl_comm(options);
    } else {
      comm = make_mpi_comm(options);
    }
  } else {
    ZRT_CHECK_AS(ConfigError, device == at::kCPU || nccl_available(),
                 "CUDA communication needs the NCCL backend, which this build does not have");
    comm = device == at::kCUDA ? make_nccl_comm(options) : make_local_world(1, options)[0];
  }
  if (options.debug_collectives) comm = std::make_shared<DesyncCheckComm>(std::move(comm));
  set_log_rank(comm->rank());
  ZRT_LOG_DEBUG("communicator ", comm->backend_name(), ": rank ", comm->rank(), " of ",
                comm->size(), ", local rank ", comm->local_rank(), " (", launch.describe(), ")");
  return comm;
}

}  // namespace zrt::comm
