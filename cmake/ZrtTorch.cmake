# Finds LibTorch and defines the target `torch`, TORCH_CXX_FLAGS, Torch_VERSION,
# TORCH_INSTALL_PREFIX and ZRT_TORCH_CUDA_BUILD (1 when this LibTorch was built with CUDA).
#
#   -DZRT_TORCH=venv    (default) the torch wheel in the project's venv: ZRT_PYTHON, by default
#                       <source>/.venv/bin/python (scripts/install_deps.sh makes it)
#   -DZRT_TORCH=system  Debian's libtorch-dev (1.13.1)
#   -DZRT_TORCH=<dir>   any LibTorch prefix with share/cmake/Torch (e.g. an unpacked libtorch zip)
#
# Note [Wheel LibTorch without TorchConfig]: the PyPI wheel is a CUDA build, and its
# TorchConfig.cmake insists on finding a matching CUDA toolkit (nvcc, cuDNN, ...) even for code
# that never touches a GPU. ZeroRT must build on machines with no toolkit and with a different
# one (CUDA 13 here), so for the wheel we describe the libraries ourselves: headers, the ABI
# define the wheel was built with, torch_cpu + c10, and torch_cuda + c10_cuda only when this
# build compiles CUDA code of its own (then the toolkit's headers are there too).

set(ZRT_TORCH "venv" CACHE STRING "LibTorch to build against: venv (the project's venv), system (Debian's 1.13) or a LibTorch prefix")
set(ZRT_PYTHON "${CMAKE_CURRENT_SOURCE_DIR}/.venv/bin/python" CACHE FILEPATH
    "Python of the project's venv (the torch of ZRT_TORCH=venv; DeepSpeed/transformers for the peer tests)")

if(ZRT_TORCH STREQUAL "venv")
  if(NOT EXISTS "${ZRT_PYTHON}")
    message(FATAL_ERROR "ZRT_TORCH=venv: ${ZRT_PYTHON} does not exist. Run scripts/install_deps.sh "
                        "(it makes the venv), pass -DZRT_PYTHON=<python with torch>, or build "
                        "against Debian's LibTorch 1.13 with -DZRT_TORCH=system.")
  endif()
  execute_process(
    COMMAND "${ZRT_PYTHON}" -c
      "import os, torch; print(os.path.realpath(os.path.dirname(torch.__file__))); print(torch.__version__.split('+')[0]); print(torch.version.cuda or ''); print(int(torch._C._GLIBCXX_USE_CXX11_ABI))"
    OUTPUT_VARIABLE _zrt_torch_info ERROR_VARIABLE _zrt_torch_err RESULT_VARIABLE _zrt_torch_rc
    OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(NOT _zrt_torch_rc EQUAL 0)
    message(FATAL_ERROR "ZRT_TORCH=venv: ${ZRT_PYTHON} cannot import torch:\n${_zrt_torch_err}")
  endif()
  string(REPLACE "\n" ";" _zrt_torch_info "${_zrt_torch_info}")
  list(GET _zrt_torch_info 0 TORCH_INSTALL_PREFIX)
  list(GET _zrt_torch_info 1 Torch_VERSION)
  list(GET _zrt_torch_info 2 ZRT_TORCH_CUDA_VERSION)
  list(GET _zrt_torch_info 3 _zrt_abi)
  set(TORCH_CXX_FLAGS "-D_GLIBCXX_USE_CXX11_ABI=${_zrt_abi}")
  set(_lib "${TORCH_INSTALL_PREFIX}/lib")
  foreach(_name torch_cpu c10)
    if(NOT EXISTS "${_lib}/lib${_name}.so")
      message(FATAL_ERROR "ZRT_TORCH=venv: ${_lib}/lib${_name}.so is missing (a broken torch install?)")
    endif()
  endforeach()
  add_library(torch INTERFACE IMPORTED)
  set_target_properties(torch PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES
      "${TORCH_INSTALL_PREFIX}/include;${TORCH_INSTALL_PREFIX}/include/torch/csrc/api/include"
    INTERFACE_COMPILE_DEFINITIONS "_GLIBCXX_USE_CXX11_ABI=${_zrt_abi}"
    INTERFACE_LINK_LIBRARIES "${_lib}/libtorch_cpu.so;${_lib}/libc10.so"
    INTERFACE_LINK_OPTIONS "LINKER:-rpath,${_lib}")
  # Recent LibTorch headers need C++20 (their TorchConfig asks for cxx_std_20); so do we then.
  file(STRINGS "${TORCH_INSTALL_PREFIX}/share/cmake/Torch/TorchConfig.cmake" _zrt_std20
       REGEX "cxx_std_20")
  if(_zrt_std20)
    set_property(TARGET torch PROPERTY INTERFACE_COMPILE_FEATURES cxx_std_20)
    set(CMAKE_CXX_STANDARD 20)
  endif()
  if(ZRT_TORCH_CUDA_VERSION)
    set(ZRT_TORCH_CUDA_BUILD 1)
  else()
    set(ZRT_TORCH_CUDA_BUILD 0)
  endif()
  set(ZRT_TORCH_SOURCE "venv wheel")
else()
  if(ZRT_TORCH STREQUAL "system")
    find_package(Torch REQUIRED)
    set(ZRT_TORCH_SOURCE "system")
  else()
    find_package(Torch REQUIRED PATHS "${ZRT_TORCH}" NO_DEFAULT_PATH)
    set(ZRT_TORCH_SOURCE "${ZRT_TORCH}")
  endif()
  if(NOT Torch_VERSION)
    set(Torch_VERSION "unknown")
  endif()
  if(TORCH_CUDA_LIBRARIES OR CAFFE2_USE_CUDA)
    set(ZRT_TORCH_CUDA_BUILD 1)
  else()
    set(ZRT_TORCH_CUDA_BUILD 0)
  endif()
endif()
