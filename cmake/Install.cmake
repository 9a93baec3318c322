# Install rules, included from lib/CMakeLists.txt when PSK_INSTALL is on. `cmake --install` puts:
#   include/polysketch/polysketch.h, polysketch_vulkan.h (needs the Vulkan headers when included)
#   lib/libpolysketch.so.X.Y.Z (+ SONAME link libpolysketch.so.X and dev link libpolysketch.so)
#   lib/libpolysketch.a
#   lib/cmake/polysketch/  polysketchConfig.cmake, ...ConfigVersion.cmake, ...Targets*.cmake
#   lib/pkgconfig/polysketch.pc
# find_package(polysketch) then gives polysketch::polysketch (shared) and
# polysketch::polysketch_static, the same names add_subdirectory gives (see docs/INSTALL.md).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(PSK_CMAKE_INSTALL_DIR "${CMAKE_INSTALL_LIBDIR}/cmake/polysketch" CACHE STRING
    "Where the CMake package files of polysketch are installed, relative to the prefix")
mark_as_advanced(PSK_CMAKE_INSTALL_DIR)

install(FILES "${PROJECT_SOURCE_DIR}/include/polysketch/polysketch.h"
              "${PROJECT_SOURCE_DIR}/include/polysketch/polysketch_vulkan.h"
        DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}/polysketch" COMPONENT Development)

install(TARGETS polysketch polysketch_static EXPORT polysketchTargets
        RUNTIME DESTINATION "${CMAKE_INSTALL_BINDIR}" COMPONENT Runtime
        LIBRARY DESTINATION "${CMAKE_INSTALL_LIBDIR}" COMPONENT Runtime NAMELINK_COMPONENT Development
        ARCHIVE DESTINATION "${CMAKE_INSTALL_LIBDIR}" COMPONENT Development)

install(EXPORT polysketchTargets NAMESPACE polysketch:: DESTINATION "${PSK_CMAKE_INSTALL_DIR}"
        COMPONENT Development)

configure_package_config_file("${PROJECT_SOURCE_DIR}/cmake/polysketchConfig.cmake.in"
  "${PROJECT_BINARY_DIR}/polysketchConfig.cmake" INSTALL_DESTINATION "${PSK_CMAKE_INSTALL_DIR}")
write_basic_package_version_file("${PROJECT_BINARY_DIR}/polysketchConfigVersion.cmake"
  VERSION "${PROJECT_VERSION}" COMPATIBILITY SameMajorVersion)
install(FILES "${PROJECT_BINARY_DIR}/polysketchConfig.cmake" "${PROJECT_BINARY_DIR}/polysketchConfigVersion.cmake"
        DESTINATION "${PSK_CMAKE_INSTALL_DIR}" COMPONENT Development)

# pkg-config: the .pc file finds its prefix from its own location (${pcfiledir}), so an install
# with `cmake --install <build> --prefix <anywhere>` or a moved tree still works. Absolute
# CMAKE_INSTALL_LIBDIR / INCLUDEDIR values are written as they are.
set(PSK_PC_DIR "${CMAKE_INSTALL_LIBDIR}/pkgconfig")
if(IS_ABSOLUTE "${PSK_PC_DIR}")
  set(PSK_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
else()
  file(RELATIVE_PATH PSK_PC_PREFIX "/prefix/${PSK_PC_DIR}" "/prefix")
  string(REGEX REPLACE "/$" "" PSK_PC_PREFIX "\${pcfiledir}/${PSK_PC_PREFIX}")
endif()
foreach(dir LIBDIR INCLUDEDIR)
  if(IS_ABSOLUTE "${CMAKE_INSTALL_${dir}}")
    set(PSK_PC_${dir} "${CMAKE_INSTALL_${dir}}")
  else()
    set(PSK_PC_${dir} "\${prefix}/${CMAKE_INSTALL_${dir}}")
  endif()
endforeach()
# Linking the static archive also needs the C++ runtime: the libraries the C++ compiler adds
# implicitly beyond the C compiler's (for GCC: stdc++ m ...), plus dl and the thread library.
set(PSK_PC_LIBS_PRIVATE "")
foreach(lib IN LISTS CMAKE_DL_LIBS CMAKE_THREAD_LIBS_INIT CMAKE_CXX_IMPLICIT_LINK_LIBRARIES)
  if(lib IN_LIST CMAKE_C_IMPLICIT_LINK_LIBRARIES OR lib MATCHES "^-" OR lib STREQUAL "")
    if(lib MATCHES "^-" AND NOT lib IN_LIST PSK_PC_LIBS_PRIVATE)
      list(APPEND PSK_PC_LIBS_PRIVATE "${lib}")  # e.g. -pthread
    endif()
    continue()
  endif()
  if(NOT IS_ABSOLUTE "${lib}")
    set(lib "-l${lib}")
  endif()
  if(NOT lib IN_LIST PSK_PC_LIBS_PRIVATE)
    list(APPEND PSK_PC_LIBS_PRIVATE "${lib}")
  endif()
endforeach()
list(JOIN PSK_PC_LIBS_PRIVATE " " PSK_PC_LIBS_PRIVATE)
configure_file("${PROJECT_SOURCE_DIR}/cmake/polysketch.pc.in" "${PROJECT_BINARY_DIR}/polysketch.pc" @ONLY)
install(FILES "${PROJECT_BINARY_DIR}/polysketch.pc" DESTINATION "${PSK_PC_DIR}" COMPONENT Development)
