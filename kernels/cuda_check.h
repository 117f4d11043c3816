// The one checking macro for CUDA runtime return codes in kernels/ (the .cu files). Included only
// by sources compiled with nvcc.
#pragma once

#include <cuda_runtime.h>

#include "core/error.h"

#define ZRT_KERNELS_CUDA_CHECK(call)                                                             \
  do {                                                                                           \
    const cudaError_t zrt_cuda_rc = (call);                                                      \
    if (zrt_cuda_rc != cudaSuccess) {                                                            \
      throw ::zrt::Error(::zrt::str("CUDA call ", #call, " failed at ", __FILE__, ":", __LINE__, \
                                    ": ", cudaGetErrorString(zrt_cuda_rc)));                     \
    }                                                                                            \
  } while (false)
