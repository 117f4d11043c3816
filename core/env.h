// The environment contract between launchers and the runtime: variable names in one place, and
// typed readers that fail with a message naming the variable.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace zrt::env {

// Set by Open MPI's mpirun (measured on 4.1.4).
inline constexpr const char* kOmpiRank = "OMPI_COMM_WORLD_RANK";
inline constexpr const char* kOmpiSize = "OMPI_COMM_WORLD_SIZE";
inline constexpr const char* kOmpiLocalRank = "OMPI_COMM_WORLD_LOCAL_RANK";
inline constexpr const char* kOmpiLocalSize = "OMPI_COMM_WORLD_LOCAL_SIZE";
// Set by PMI-based launchers (MPICH/Hydra, Slurm's PMI, PMIx).
inline constexpr const char* kPmiRank = "PMI_RANK";
inline constexpr const char* kPmiSize = "PMI_SIZE";
inline constexpr const char* kPmixRank = "PMIX_RANK";
inline constexpr const char* kMpiLocalRank = "MPI_LOCALRANKID";
// The torchrun contract; ZeroRT does not rendezvous through it, but detects it to explain.
inline constexpr const char* kTorchRank = "RANK";
inline constexpr const char* kTorchWorldSize = "WORLD_SIZE";
inline constexpr const char* kTorchLocalRank = "LOCAL_RANK";

// ZeroRT's own knobs.
inline constexpr const char* kLogLevel = "ZRT_LOG_LEVEL";        // debug|info|warn|error|off
inline constexpr const char* kCommTimeout = "ZRT_COMM_TIMEOUT";  // seconds, default 600
inline constexpr const char* kDebugCollectives = "ZRT_DEBUG_COLLECTIVES";  // 1: fingerprint check
inline constexpr const char* kNumThreads = "ZRT_NUM_THREADS";              // CPU kernel threads
inline constexpr const char* kCpuAdamIsa = "ZRT_CPU_ADAM_ISA";             // avx512|avx2|scalar
inline constexpr const char* kCpuQuantIsa = "ZRT_CPU_QUANT_ISA";           // avx512|avx2|scalar

// The variable's value, or nullopt when unset or empty.
std::optional<std::string> get_string(const char* name);
// Parsed as a base-10 integer; throws ConfigError naming the variable on garbage.
std::optional<int64_t> get_int(const char* name);
// Parsed as a finite number; throws ConfigError naming the variable on garbage.
std::optional<double> get_double(const char* name);
// "1", "true", "yes", "on" → true; "0", "false", "no", "off" → false; else ConfigError.
std::optional<bool> get_bool(const char* name);

}  // namespace zrt::env
