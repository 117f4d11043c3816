# Finds ZeroRT's dependencies and resolves the AUTO options into ZRT_<X>_ENABLED (0 or 1).
# LibTorch and nlohmann_json are required; MPI, CUDA and NCCL are optional.

# --- LibTorch (cmake/ZrtTorch.cmake: the venv's wheel by default, -DZRT_TORCH=system for 1.13) ---
include(ZrtTorch)
# TORCH_CXX_FLAGS carries the C++ ABI define (-D_GLIBCXX_USE_CXX11_ABI=0|1). Every target must use
# it, including the ones that do not include LibTorch, because std::string crosses their APIs.
separate_arguments(ZRT_TORCH_CXX_FLAGS UNIX_COMMAND "${TORCH_CXX_FLAGS}")
add_compile_options(${ZRT_TORCH_CXX_FLAGS})

# --- JSON, CLI --------------------------------------------------------------------------------
find_package(nlohmann_json 3.9 REQUIRED)
find_path(ZRT_CXXOPTS_INCLUDE_DIR cxxopts.hpp REQUIRED)

# --- MPI --------------------------------------------------------------------------------------
set(ZRT_MPI_ENABLED 0)
if(NOT ZRT_WITH_MPI STREQUAL "OFF")
  find_package(MPI COMPONENTS C)
  if(MPI_C_FOUND)
    set(ZRT_MPI_ENABLED 1)
  elseif(ZRT_WITH_MPI STREQUAL "ON")
    message(FATAL_ERROR "ZRT_WITH_MPI=ON but MPI was not found (install libopenmpi-dev)")
  endif()
endif()

# --- CUDA -------------------------------------------------------------------------------------
# Looked up in CUDA_HOME, then the toolkit's default prefix. CUDA is never required.
set(ZRT_CUDA_ENABLED 0)
if(NOT ZRT_WITH_CUDA STREQUAL "OFF")
  if(NOT CMAKE_CUDA_COMPILER)
    foreach(_prefix "$ENV{CUDA_HOME}" "$ENV{CUDA_PATH}" "/usr/local/cuda")
      if(_prefix AND EXISTS "${_prefix}/bin/nvcc")
        set(CMAKE_CUDA_COMPILER "${_prefix}/bin/nvcc" CACHE FILEPATH "nvcc")
        break()
      endif()
    endforeach()
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 80 90 CACHE STRING "CUDA architectures")
    endif()
    enable_language(CUDA)
    find_package(CUDAToolkit)
    if(CUDAToolkit_FOUND)
      set(ZRT_CUDA_ENABLED 1)
    endif()
  endif()
  if(NOT ZRT_CUDA_ENABLED AND ZRT_WITH_CUDA STREQUAL "ON")
    message(FATAL_ERROR "ZRT_WITH_CUDA=ON but no usable nvcc/CUDA toolkit was found (set CUDA_HOME)")
  endif()
endif()

# Whether CUDA tensors and c10::cuda streams are usable from ZeroRT's code: a CUDA LibTorch, and
# for the wheel also the toolkit's headers (Note [Wheel LibTorch without TorchConfig]).
set(ZRT_TORCH_CUDA_ENABLED ${ZRT_TORCH_CUDA_BUILD})
if(ZRT_TORCH STREQUAL "venv" AND ZRT_TORCH_CUDA_BUILD)
  if(ZRT_CUDA_ENABLED)
    set(_lib "${TORCH_INSTALL_PREFIX}/lib")
    set_property(TARGET torch APPEND PROPERTY INTERFACE_LINK_LIBRARIES
                 "${_lib}/libtorch_cuda.so" "${_lib}/libc10_cuda.so" CUDA::cudart)
  else()
    set(ZRT_TORCH_CUDA_ENABLED 0)
  endif()
endif()

# --- NCCL -------------------------------------------------------------------------------------
set(ZRT_NCCL_ENABLED 0)
if(NOT ZRT_WITH_NCCL STREQUAL "OFF" AND ZRT_CUDA_ENABLED)
  set(_nccl_hints "$ENV{NCCL_HOME}" "$ENV{CUDA_HOME}" "${CUDAToolkit_LIBRARY_ROOT}" "/usr/local/cuda")
  find_path(ZRT_NCCL_INCLUDE_DIR nccl.h HINTS ${_nccl_hints} ${CUDAToolkit_INCLUDE_DIRS}
            PATH_SUFFIXES include)
  find_library(ZRT_NCCL_LIBRARY nccl HINTS ${_nccl_hints} ${CUDAToolkit_LIBRARY_DIR}
               PATH_SUFFIXES lib64 lib)
  if(ZRT_NCCL_INCLUDE_DIR AND ZRT_NCCL_LIBRARY AND ZRT_MPI_ENABLED)
    set(ZRT_NCCL_ENABLED 1)
    file(STRINGS "${ZRT_NCCL_INCLUDE_DIR}/nccl.h" _nccl_ver REGEX "#define NCCL_(MAJOR|MINOR|PATCH) ")
    string(REGEX REPLACE ".*NCCL_MAJOR ([0-9]+).*NCCL_MINOR ([0-9]+).*NCCL_PATCH ([0-9]+).*"
           "\\1.\\2.\\3" ZRT_NCCL_VERSION "${_nccl_ver}")
  endif()
endif()
# ZRT_LINK_TORCH_CUDA: keep libtorch_cuda in every program even though nothing calls it directly
# (a linker that drops unneeded libraries, Ubuntu's default --as-needed, leaves it out, and
# LibTorch then sees no GPU). libtorch_cuda needs the NCCL its wheel ships, so ZRT_NCCL_LIBRARY
# must be that one (scripts/gpu_check.py passes it); its folder goes first on the search paths.
option(ZRT_LINK_TORCH_CUDA "Link libtorch_cuda into every program (GPU runs of the wheel's LibTorch)" OFF)
if(ZRT_LINK_TORCH_CUDA AND ZRT_TORCH_CUDA_ENABLED)
  set(_opts "LINKER:--no-as-needed")
  if(ZRT_NCCL_LIBRARY)
    get_filename_component(_nccl_dir "${ZRT_NCCL_LIBRARY}" DIRECTORY)
    list(PREPEND _opts "LINKER:-rpath-link,${_nccl_dir}" "LINKER:-rpath,${_nccl_dir}")
  endif()
  set_property(TARGET torch APPEND PROPERTY INTERFACE_LINK_OPTIONS ${_opts})
endif()
if(ZRT_WITH_NCCL STREQUAL "ON" AND NOT ZRT_NCCL_ENABLED)
  message(FATAL_ERROR "ZRT_WITH_NCCL=ON but NCCL (with CUDA and MPI for bootstrap) was not found")
endif()

# --- SentencePiece (zrt-generate's text prompts) ----------------------------------------------
# Debian's libsentencepiece carries its own protobuf-lite and exports its symbols; Debian's
# LibTorch 1.13 links libprotobuf 3.21, so in one process the two would interpose. AUTO therefore
# enables it only with a LibTorch that has no protobuf of its own (the venv's wheel), and only
# with the C++11 string ABI that Debian's library was built with.
set(ZRT_SENTENCEPIECE_ENABLED 0)
if(NOT ZRT_WITH_SENTENCEPIECE STREQUAL "OFF")
  find_path(ZRT_SENTENCEPIECE_INCLUDE_DIR sentencepiece_processor.h)
  find_library(ZRT_SENTENCEPIECE_LIBRARY sentencepiece)
  set(_spm_why "")
  if(NOT ZRT_SENTENCEPIECE_INCLUDE_DIR OR NOT ZRT_SENTENCEPIECE_LIBRARY)
    set(_spm_why "not found (install libsentencepiece-dev)")
  elseif(TORCH_CXX_FLAGS MATCHES "_GLIBCXX_USE_CXX11_ABI=0")
    set(_spm_why "LibTorch uses the pre-C++11 string ABI, libsentencepiece the C++11 one")
  elseif(ZRT_TORCH STREQUAL "system" AND NOT ZRT_WITH_SENTENCEPIECE STREQUAL "ON")
    set(_spm_why "off with the system LibTorch (its libprotobuf and libsentencepiece's clash; -DZRT_WITH_SENTENCEPIECE=ON to try)")
  endif()
  if(_spm_why STREQUAL "")
    set(ZRT_SENTENCEPIECE_ENABLED 1)
  elseif(ZRT_WITH_SENTENCEPIECE STREQUAL "ON")
    message(FATAL_ERROR "ZRT_WITH_SENTENCEPIECE=ON but SentencePiece is ${_spm_why}")
  else()
    message(STATUS "SentencePiece: ${_spm_why}")
  endif()
endif()

# --- Test dependencies ------------------------------------------------------------------------
# ZRT_GTEST_SOURCE: GoogleTest built from a source folder (what scripts/gpu_check.sh carries to a
# machine that has no googletest package); otherwise the installed package.
set(ZRT_GTEST_SOURCE "" CACHE PATH "GoogleTest sources to build instead of finding the package")
if(ZRT_BUILD_TESTS)
  if(ZRT_GTEST_SOURCE)
    set(BUILD_GMOCK OFF CACHE BOOL "" FORCE)
    set(INSTALL_GTEST OFF CACHE BOOL "" FORCE)
    add_subdirectory(${ZRT_GTEST_SOURCE} ${CMAKE_BINARY_DIR}/_deps/googletest EXCLUDE_FROM_ALL)
    foreach(_gt gtest gtest_main)
      if(NOT TARGET GTest::${_gt})
        add_library(GTest::${_gt} ALIAS ${_gt})
      endif()
    endforeach()
  else()
    find_package(GTest REQUIRED)
  endif()
endif()

# --- ccache -----------------------------------------------------------------------------------
find_program(ZRT_CCACHE ccache)
if(ZRT_CCACHE)
  # Precompiled headers are only cacheable with these sloppiness settings. CCACHE_BASEDIR makes the
  # paths inside the source tree relative, so that every clone (CI's is a fresh one in another
  # folder) shares one cache; the venv's LibTorch is found by its real path, the same for all.
  set(_launcher env CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime
      CCACHE_BASEDIR=${CMAKE_SOURCE_DIR} CCACHE_NOHASHDIR=1 ${ZRT_CCACHE})
  set(CMAKE_CXX_COMPILER_LAUNCHER ${_launcher})
  set(CMAKE_C_COMPILER_LAUNCHER ${_launcher})
endif()

# --- Version --------------------------------------------------------------------------------
execute_process(COMMAND git rev-parse --short=12 HEAD WORKING_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR}
                OUTPUT_VARIABLE ZRT_GIT_HASH OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
if(NOT ZRT_GIT_HASH)
  set(ZRT_GIT_HASH "unknown")
endif()
