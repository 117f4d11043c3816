# Run at install time (cmake/ZrtInstall.cmake): copies the public headers into
# <prefix>/include/zrt/, rewriting each `#include "<module>/<header>"` to
# `#include "zrt/<module>/<header>"` so that an installed header names only <zrt/...> headers.
# Inputs: ZRT_PUBLIC_HEADERS, ZRT_SOURCE_ROOT, ZRT_HEADER_DESTINATION.
foreach(header IN LISTS ZRT_PUBLIC_HEADERS)
  if(header MATCHES "^zrt/")
    set(dest "${ZRT_HEADER_DESTINATION}/${header}")
  else()
    set(dest "${ZRT_HEADER_DESTINATION}/zrt/${header}")
  endif()
  file(READ "${ZRT_SOURCE_ROOT}/${header}" text)
  string(REPLACE "#include \"" "#include \"zrt/" text "${text}")
  string(REPLACE "#include \"zrt/zrt/" "#include \"zrt/" text "${text}")
  message(STATUS "Installing: ${dest}")
  file(WRITE "${dest}" "${text}")
endforeach()
