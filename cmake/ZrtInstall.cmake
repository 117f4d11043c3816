# Installation: libraries, the public headers (cmake/ZrtPublicHeaders.cmake, as
# <prefix>/include/zrt/...), tools, and the CMake package (ZeroRTConfig.cmake, ZeroRTTargets.cmake).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

add_library(zrt INTERFACE)
add_library(ZeroRT::zrt ALIAS zrt)
target_link_libraries(zrt INTERFACE zrt_hf zrt_runtime zrt_launch)
set_target_properties(zrt PROPERTIES EXPORT_NAME zrt)

get_property(_modules GLOBAL PROPERTY ZRT_MODULES)
install(TARGETS zrt ${_modules} EXPORT ZeroRTTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
include(${ZRT_SOURCE_ROOT}/cmake/ZrtPublicHeaders.cmake)
install(CODE "
  set(ZRT_PUBLIC_HEADERS \"${ZRT_PUBLIC_HEADERS}\")
  set(ZRT_SOURCE_ROOT \"${ZRT_SOURCE_ROOT}\")
  set(ZRT_HEADER_DESTINATION \"\$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_INCLUDEDIR}\")
  include(\"${ZRT_SOURCE_ROOT}/cmake/ZrtInstallHeaders.cmake\")")
get_property(_tools GLOBAL PROPERTY ZRT_TOOLS)
install(TARGETS ${_tools} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})

install(EXPORT ZeroRTTargets NAMESPACE ZeroRT:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/ZeroRT)
if(ZRT_TORCH STREQUAL "venv")
  foreach(_prop INCLUDES:INTERFACE_INCLUDE_DIRECTORIES DEFINES:INTERFACE_COMPILE_DEFINITIONS
                LIBS:INTERFACE_LINK_LIBRARIES LINK_OPTIONS:INTERFACE_LINK_OPTIONS
                FEATURES:INTERFACE_COMPILE_FEATURES)
    string(REPLACE ":" ";" _pair "${_prop}")
    list(GET _pair 0 _var)
    list(GET _pair 1 _name)
    get_target_property(ZRT_TORCH_EXPORT_${_var} torch ${_name})
    if(NOT ZRT_TORCH_EXPORT_${_var})
      set(ZRT_TORCH_EXPORT_${_var} "")
    endif()
    # Paths inside this machine's torch become paths inside the user's (ZeroRTConfig.cmake.in).
    string(REPLACE "${TORCH_INSTALL_PREFIX}" "\${ZeroRT_TORCH_ROOT}" ZRT_TORCH_EXPORT_${_var}
                   "${ZRT_TORCH_EXPORT_${_var}}")
  endforeach()
endif()
configure_package_config_file(${ZRT_SOURCE_ROOT}/cmake/ZeroRTConfig.cmake.in
  ${CMAKE_BINARY_DIR}/ZeroRTConfig.cmake INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/ZeroRT)
write_basic_package_version_file(${CMAKE_BINARY_DIR}/ZeroRTConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMajorVersion)
install(FILES ${CMAKE_BINARY_DIR}/ZeroRTConfig.cmake ${CMAKE_BINARY_DIR}/ZeroRTConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/ZeroRT)
