# Helpers shared by every CMakeLists.txt in the tree:
#   zrt_add_module(<name> SOURCES ... [DEPS ...] [TORCH])   library zrt_<name>, alias ZeroRT::<name>
#   zrt_add_tool(<exe> SOURCES ... DEPS ...)                a user-facing zrt-* program
#   zrt_add_test(<name> SOURCES ... DEPS ... [WORLD_SIZES 1 2 3 4] [LABELS ...] [TIMEOUT s])
#   zrt_print_summary()

set(ZRT_SOURCE_ROOT ${CMAKE_CURRENT_LIST_DIR}/..)
set(ZRT_GENERATED_INCLUDE ${CMAKE_BINARY_DIR}/generated)

# One precompiled LibTorch header shared by every target that includes LibTorch (REUSE_FROM).
function(_zrt_ensure_pch)
  if(TARGET zrt_torch_pch OR NOT ZRT_USE_PCH)
    return()
  endif()
  file(WRITE ${CMAKE_BINARY_DIR}/zrt_torch_pch.cpp "// Anchor for the shared LibTorch PCH.\n")
  add_library(zrt_torch_pch OBJECT ${CMAKE_BINARY_DIR}/zrt_torch_pch.cpp)
  target_link_libraries(zrt_torch_pch PRIVATE torch)
  target_precompile_headers(zrt_torch_pch PRIVATE <torch/torch.h>)
endfunction()

# Links LibTorch into <target> and reuses the shared precompiled header.
function(zrt_use_torch target visibility)
  target_link_libraries(${target} ${visibility} torch)
  if(ZRT_USE_PCH)
    _zrt_ensure_pch()
    target_precompile_headers(${target} REUSE_FROM zrt_torch_pch)
  endif()
endfunction()

# Note [Module include folders]
# A module's code includes "<module>/<header>.h" from the source root, but no module sees the
# whole root: module M's public include folder is build/include/M, which holds only a link named
# M to its own source folder, so M's code can include a header of X only when X is among M's
# DEPS (CMake passes the include folders of linked modules on). The torch-free leaf headers
# <X>/options.h (DESIGN.md) are the exception, reachable from every module through
# build/include/_options, which zrt_core publishes. An upward include therefore fails to
# compile; scripts/check_layout.py checks the same rules with readable messages. Tools, tests,
# examples and benchmarks see the whole source root (they sit above every module).
set(ZRT_MODULE_INCLUDE ${CMAKE_BINARY_DIR}/include)

function(_zrt_link_module_folder name)
  set(dir ${ZRT_MODULE_INCLUDE}/${name})
  file(MAKE_DIRECTORY ${dir})
  file(CREATE_LINK ${CMAKE_CURRENT_SOURCE_DIR} ${dir}/${name} SYMBOLIC)
  if(name STREQUAL "core")
    file(GLOB leaves RELATIVE ${ZRT_SOURCE_ROOT} ${ZRT_SOURCE_ROOT}/*/options.h)
    foreach(leaf ${leaves})
      get_filename_component(module ${leaf} DIRECTORY)
      file(MAKE_DIRECTORY ${ZRT_MODULE_INCLUDE}/_options/${module})
      file(CREATE_LINK ${ZRT_SOURCE_ROOT}/${leaf} ${ZRT_MODULE_INCLUDE}/_options/${leaf} SYMBOLIC)
    endforeach()
  endif()
endfunction()

function(zrt_add_module name)
  cmake_parse_arguments(M "TORCH" "" "SOURCES;DEPS;PRIVATE_DEPS" ${ARGN})
  set(target zrt_${name})
  add_library(${target} ${M_SOURCES})
  add_library(ZeroRT::${name} ALIAS ${target})
  _zrt_link_module_folder(${name})
  target_include_directories(${target} PUBLIC
    $<BUILD_INTERFACE:${ZRT_MODULE_INCLUDE}/${name}>
    $<BUILD_INTERFACE:${ZRT_GENERATED_INCLUDE}>
    $<INSTALL_INTERFACE:include>)
  if(name STREQUAL "core")
    target_include_directories(${target} PUBLIC $<BUILD_INTERFACE:${ZRT_MODULE_INCLUDE}/_options>)
  endif()
  target_link_libraries(${target} PUBLIC ${M_DEPS} PRIVATE ${M_PRIVATE_DEPS})
  if(M_TORCH)
    zrt_use_torch(${target} PUBLIC)
  endif()
  set_target_properties(${target} PROPERTIES EXPORT_NAME ${name})
  set_property(GLOBAL APPEND PROPERTY ZRT_MODULES ${target})
endfunction()

function(zrt_add_tool exe)
  cmake_parse_arguments(T "TORCH" "" "SOURCES;DEPS" ${ARGN})
  add_executable(${exe} ${T_SOURCES})
  target_link_libraries(${exe} PRIVATE ${T_DEPS})
  target_include_directories(${exe} PRIVATE ${ZRT_SOURCE_ROOT})
  if(T_TORCH)
    zrt_use_torch(${exe} PRIVATE)
  endif()
  set_target_properties(${exe} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)
  set_property(GLOBAL APPEND PROPERTY ZRT_TOOLS ${exe})
endfunction()

# The environment of every test: the test data and the project's Python (tests/support/python.h).
set(ZRT_TEST_ENV "ZRT_TEST_DATA=${ZRT_SOURCE_ROOT}/tests/data" "ZRT_PYTHON=${ZRT_PYTHON}")

# Registers a GoogleTest binary. Without WORLD_SIZES it is one CTest test (label "unit"). With
# WORLD_SIZES it is one CTest test per size, run as `mpirun -np N --oversubscribe --timeout T`
# (label "mpi"); those need MPI and are skipped at configure time without it.
function(zrt_add_test name)
  cmake_parse_arguments(T "TORCH;MPI_MAIN" "TIMEOUT" "SOURCES;DEPS;WORLD_SIZES;LABELS;ENV" ${ARGN})
  if(T_WORLD_SIZES AND NOT ZRT_MPI_ENABLED)
    message(STATUS "  test ${name}: skipped (needs MPI)")
    return()
  endif()
  if(T_WORLD_SIZES AND NOT ZRT_BUILD_MPI_TESTS)
    return()  # -DZRT_BUILD_MPI_TESTS=OFF: a build that runs only the unit tests
  endif()
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 300)
  endif()
  add_executable(${name} ${T_SOURCES})
  target_link_libraries(${name} PRIVATE ${T_DEPS} GTest::gtest)
  target_include_directories(${name} PRIVATE ${ZRT_SOURCE_ROOT})
  if(T_MPI_MAIN)
    target_link_libraries(${name} PRIVATE zrt_test_mpi_main)
  else()
    target_link_libraries(${name} PRIVATE GTest::gtest_main)
  endif()
  if(T_TORCH)
    zrt_use_torch(${name} PRIVATE)
  endif()
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
  set(_env ${ZRT_TEST_ENV} ${T_ENV})
  if(NOT T_WORLD_SIZES)
    add_test(NAME ${name} COMMAND ${name})
    set_tests_properties(${name} PROPERTIES TIMEOUT ${T_TIMEOUT} LABELS "unit;${T_LABELS}"
                         ENVIRONMENT "${_env}")
    return()
  endif()
  foreach(np ${T_WORLD_SIZES})
    # mpirun's own --timeout fires first (it names the job); CTest's TIMEOUT is the backstop.
    add_test(NAME ${name}.np${np}
             COMMAND ${MPIEXEC_EXECUTABLE} -np ${np} --oversubscribe --bind-to none
                     --timeout ${T_TIMEOUT} $<TARGET_FILE:${name}>)
    math(EXPR _ctest_timeout "${T_TIMEOUT} + 30")
    set_tests_properties(${name}.np${np} PROPERTIES
      TIMEOUT ${_ctest_timeout} LABELS "mpi;${T_LABELS}" PROCESSORS 2
      ENVIRONMENT "${_env};OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMPI_MCA_rmaps_base_oversubscribe=1")
  endforeach()
endfunction()

function(_zrt_onoff value out)
  if(${value})
    set(${out} "yes" PARENT_SCOPE)
  else()
    set(${out} "no" PARENT_SCOPE)
  endif()
endfunction()

function(zrt_print_summary)
  _zrt_onoff(ZRT_MPI_ENABLED mpi)
  _zrt_onoff(ZRT_CUDA_ENABLED cuda)
  _zrt_onoff(ZRT_NCCL_ENABLED nccl)
  _zrt_onoff(ZRT_CCACHE ccache)
  message(STATUS "")
  message(STATUS "ZeroRT ${PROJECT_VERSION} (${ZRT_GIT_HASH}) configuration summary")
  _zrt_onoff(ZRT_TORCH_CUDA_BUILD torch_cuda)
  _zrt_onoff(ZRT_TORCH_CUDA_ENABLED torch_cuda_used)
  message(STATUS "  LibTorch      : ${Torch_VERSION} from ${ZRT_TORCH_SOURCE} (${TORCH_INSTALL_PREFIX})")
  message(STATUS "  LibTorch CUDA : built with CUDA: ${torch_cuda} ${ZRT_TORCH_CUDA_VERSION}; used by ZeroRT: ${torch_cuda_used}")
  message(STATUS "  Python (venv) : ${ZRT_PYTHON}")
  message(STATUS "  C++ flags     : ${TORCH_CXX_FLAGS}")
  message(STATUS "  MPI           : ${mpi} (MPI ${MPI_C_VERSION}, ${MPIEXEC_EXECUTABLE})")
  message(STATUS "  CUDA          : ${cuda} ${CUDAToolkit_VERSION} (archs ${CMAKE_CUDA_ARCHITECTURES})")
  message(STATUS "  NCCL          : ${nccl} ${ZRT_NCCL_VERSION}")
  if(ZRT_SENTENCEPIECE_ENABLED)
    message(STATUS "  SentencePiece : yes (${ZRT_SENTENCEPIECE_LIBRARY})")
  else()
    message(STATUS "  SentencePiece : no")
  endif()
  message(STATUS "  aio backends  : ${ZRT_AIO_BACKENDS}")
  message(STATUS "  tests / bench : ${ZRT_BUILD_TESTS} / ${ZRT_BUILD_BENCH}")
  message(STATUS "  ccache / PCH  : ${ccache} / ${ZRT_USE_PCH}")
  message(STATUS "")
endfunction()
